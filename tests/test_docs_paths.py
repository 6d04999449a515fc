"""Every repository path the README and the docs cite (in backticks or as a link) exists."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PREFIXES = ("gemmgen/", "benchmarks/", "templates/", "tests/", "examples/", "docs/",
            "generated/")
PATH = re.compile(r"(?:\.\./)*(?:%s)[\w./-]*" % "|".join(map(re.escape, PREFIXES)))
PLACEHOLDER = re.compile(r"[<>*{}$]|\b[A-Z]{3,}\b|\.\.\.")
"""Spans that name a pattern, not a file: generated/<name>.cu, benchmarks/suites/NAME.toml."""


def cited(doc: Path) -> list[tuple[int, str]]:
    """(line, path) of every repository path in backticks or a link target in ``doc``."""
    out = []
    for no, line in enumerate(doc.read_text().splitlines(), 1):
        spans = re.findall(r"`([^`]+)`", line) + re.findall(r"\]\(([^)\s#]+)", line)
        for span in spans:
            for word in span.split():
                if PLACEHOLDER.search(word):
                    continue
                m = PATH.match(word.strip("'\",;:()"))
                if m:
                    out.append((no, m.group(0).rstrip(".,:;")))
    return out


def resolve(doc: Path, cited_path: str) -> Path:
    """A link relative to its document (../gemmgen/x.py), else a path from the repository."""
    if cited_path.startswith("../"):
        return (doc.parent / cited_path).resolve()
    return ROOT / cited_path


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_cited_repository_paths_exist(doc):
    missing = [f"{doc.relative_to(ROOT)}:{no}: {p}" for no, p in cited(doc)
               if not resolve(doc, p).exists()]
    assert not missing, "\n".join(missing)


def test_the_checker_finds_paths():
    assert len([p for d in DOCS for p in cited(d)]) > 20
