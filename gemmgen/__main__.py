"""python -m gemmgen and the gemmgen script: the command line."""
from . import cli_run  # noqa: F401 - registers verify, bench, report on the group
from .cli import main


def run() -> None:
    main()


if __name__ == "__main__":
    run()
