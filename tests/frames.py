"""The Python functions a call runs, by file (``sys.setprofile``): how tests check that a call
takes no Python path of some package."""
import sys


def frames(fn, where) -> list[str]:
    """Names of the Python functions that calling ``fn()`` enters whose file name satisfies
    ``where`` (a predicate on the path)."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and where(frame.f_code.co_filename):
            seen.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen
