"""Model: user text in error messages, quoted short (a 1 MB name makes a one-line message)."""
from __future__ import annotations

QUOTE_CHARS = 60
"""Characters of user text an error message quotes; longer text is cut and ends in '…'."""


def quote(value, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` of a string (``str(value)`` otherwise) of at most ``limit`` characters,
    else its first ``limit`` characters and '…'."""
    text = value if isinstance(value, str) else str(value) if isinstance(value, (int, float)) \
        else repr(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return repr(text) if isinstance(value, str) else text
