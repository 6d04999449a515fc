"""python -m gemmgen and the gemmgen script: the command line."""
from . import cli_run, cli_tune  # noqa: F401 - register verify, bench, report, tune
from .cli import main


def run() -> None:
    main()


if __name__ == "__main__":
    run()
