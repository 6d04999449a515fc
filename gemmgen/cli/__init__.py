"""The command line: one click group (``main``), one module per command group."""
from . import emit, explain, run, tune  # noqa: F401 - each registers its commands on the group
from .main import main

__all__ = ["main"]
