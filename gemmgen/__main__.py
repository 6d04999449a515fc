"""python -m gemmgen: the command line."""
from .cli import main

main()
