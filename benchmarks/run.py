"""Run a benchmark suite: the same as ``gemmgen bench --suite NAME ...``.

python3 benchmarks/run.py NAME|PATH [--only SUBSTR] [--quick] [--max-rows N]
                          [--max-minutes M] [--results-dir DIR] [--json OUT] [--plot OUT]
                          [--seed N] [--arch sm_XY]

NAME is a file of benchmarks/suites/ (ladder, square, odd, llm, epilogues, torch; see the
README there), PATH any suite file. Writes benchmarks/results/<suite>_<GPU>.json and .png.
Needs a GPU, PyCUDA and CuPy (cuBLAS); the torch suite needs PyTorch.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's gemmgen

from gemmgen.cli import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    main(["bench", "--suite", sys.argv[1], *sys.argv[2:]], prog_name="gemmgen")
