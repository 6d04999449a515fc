"""The README and the docs site: size, set-up commands, no tracker references, generated tables
in sync with benchmarks/results, every page in mkdocs.yml's nav. No GPU, no mkdocs needed."""
import json
import re
from pathlib import Path

import pytest

from gemmgen.tune import tables

ROOT = Path(__file__).resolve().parent.parent
SETUP = ["make install && gemmgen emit --bm 128 --bn 128 --bk 16 --tm 8 --tn 8 --check",
         "make install && make test"]
PAGES = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
DOCS = ["README.md", *(f"docs/{p}" for p in PAGES)]


def test_readme_is_short_and_has_both_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in SETUP:
        assert command in text


@pytest.mark.parametrize("path", DOCS)
def test_no_tracker_references(path):
    found = re.findall(r"issue \d+|\(issue", (ROOT / path).read_text(), re.IGNORECASE)
    assert not found, f"{path} mentions {found}"


def test_tables_in_sync_with_results():
    assert tables.sync(DOCS, root=ROOT, check=True) == []


def _values(doc) -> set[str]:
    """Every number of a JSON document, as written with 1, 2 or 3 decimals."""
    if isinstance(doc, dict):
        return set().union(*map(_values, doc.values())) if doc else set()
    if isinstance(doc, list):
        return set().union(*map(_values, doc)) if doc else set()
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return {f"{doc:.1f}", f"{doc:.2f}", f"{doc:.3f}"}
    return set()


@pytest.mark.parametrize("path", DOCS)
def test_hand_written_figures_come_from_their_results_file(path):
    """A section written by hand after ``<!-- figures: FILE -->`` (up to the next comment or
    heading) quotes only numbers that FILE holds (to 1, 2 or 3 decimals)."""
    text = (ROOT / path).read_text()
    for m in re.finditer(r"<!-- figures: (\S+) -->\n(.*?)(?=<!--|\n#|\Z)", text, re.DOTALL):
        held = _values(json.loads((ROOT / m[1]).read_text()))
        quoted = re.findall(r"(?<![\w.])\d+\.\d+", m[2])
        assert quoted, f"{path}: no figures after the marker for {m[1]}"
        bad = [q for q in quoted if q not in held]
        assert not bad, f"{path}: {bad} are not in {m[1]}"


def test_every_page_in_nav_and_every_nav_entry_a_page():
    nav = re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?(\S+\.md)\s*$",
                     (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert sorted(nav) == PAGES


def _suite(tmp_path) -> Path:
    doc = {"suite": "llm_shapes", "baseline": "torch.matmul", "method": "CUDA events, median",
           "gpu": "NVIDIA H200", "git_commit": "0123456789abcdef", "date": "2026-11-23T10:00:00Z",
           "rows": [{"kernel": "wgmma_tma_store", "dtype": "fp16", "M": 4096, "N": 4096, "K": 4096,
                     "tflops": 700.0, "cublas_tflops": 760.0, "pct_cublas": 92.1, "part": "a"},
                    {"kernel": "wgmma_bf16", "dtype": "bf16", "M": 4096, "N": 4096, "K": 4096,
                     "tflops": 720.0, "cublas_tflops": 780.0, "pct_cublas": 92.3, "part": "b"}]}
    (tmp_path / "llm_shapes_NVIDIA_H200.json").write_text(json.dumps(doc))
    return tmp_path


def test_suite_file_ladder_and_caption(tmp_path):
    root = _suite(tmp_path)
    out = tables.render("file=llm_shapes_NVIDIA_H200.json view=ladder size=4096", root)
    assert "| wgmma_tma_store | fp16 | 700.00 | 760.00 | 92.1% |" in out
    assert "% of baseline" in out
    assert out.splitlines()[-1] == ("*Source: `llm_shapes_NVIDIA_H200.json` (suite llm_shapes), "
                                    "NVIDIA H200, 2026-11-23, commit 0123456; baseline: "
                                    "torch.matmul; method: CUDA events, median.*")


def test_compare_filters(tmp_path):
    root = _suite(tmp_path)
    out = tables.render("file=llm_shapes_NVIDIA_H200.json view=compare part=b", root)
    assert "wgmma_bf16" in out and "wgmma_tma_store" not in out and "0.92x" in out
    out = tables.render("file=llm_shapes_NVIDIA_H200.json view=compare kernel~=tma dtype=fp16",
                        root)
    assert "wgmma_tma_store" in out and "wgmma_bf16" not in out


def test_check_names_the_stale_region(tmp_path, capsys, monkeypatch):
    root = _suite(tmp_path)
    page = root / "page.md"
    page.write_text("<!-- gemmgen-table file=llm_shapes_NVIDIA_H200.json view=ladder -->\n"
                    "stale\n<!-- /gemmgen-table -->\n")
    monkeypatch.chdir(root)
    assert tables.main(["--check", "page.md"]) == 1
    assert "page.md: region 1 (file=llm_shapes_NVIDIA_H200.json view=ladder)" in \
        capsys.readouterr().err
    assert tables.main(["page.md"]) == 0
    assert tables.main(["--check", "page.md"]) == 0
