"""python -m gemmgen and the gemmgen script: the command line."""
from .cli import main


def run() -> None:
    main()


if __name__ == "__main__":
    run()
