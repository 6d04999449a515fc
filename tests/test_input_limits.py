"""Inputs of absurd size or depth are refused quickly, as errors of their kind, with messages
that quote only a short prefix of what was given."""
import time

import pytest
from click.testing import CliRunner

from gemmgen.__main__ import main
from gemmgen.model.epilogue import MAX_EPILOGUE_CHARS, Epilogue, EpilogueError

LONG_SUM = "+".join(["acc"] * 600)  # 2399 characters: under the size cap, too deep to recurse


def test_a_sum_of_hundreds_of_terms_is_an_epilogue_error_not_a_recursion_error():
    with pytest.raises(EpilogueError, match="nests too deep"):
        Epilogue.parse("+".join(["acc"] * 1000))  # 3999 characters, under the cap


def test_a_recursion_error_while_reading_becomes_an_epilogue_error(monkeypatch):
    def deep(self, e):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr("gemmgen.model.epilogue_parse._Reader.node", deep)
    with pytest.raises(EpilogueError, match="nests too deep"):
        Epilogue.parse("relu(acc) + R + bias")


def test_a_huge_expression_is_refused_before_parsing_and_quoted_short():
    start = time.monotonic()
    with pytest.raises(EpilogueError) as info:
        Epilogue.parse("acc+" * 2_500_000 + "acc")  # 10 MB
    assert time.monotonic() - start < 1.0
    message = str(info.value)
    assert f"at most {MAX_EPILOGUE_CHARS}" in message and len(message) < 300, message[:400]


def test_a_long_unknown_name_is_quoted_short():
    with pytest.raises(EpilogueError) as info:
        Epilogue.parse("x" * 3000)
    assert len(str(info.value)) < 400 and "…" in str(info.value)
    with pytest.raises(EpilogueError) as info:
        Epilogue.parse("y" * 1_000_000)
    assert len(str(info.value)) < 300


def test_gemm_refuses_a_deep_epilogue_as_a_value_error():
    from gemmgen.runtime.epilogue_args import parse_epilogue
    with pytest.raises(ValueError) as info:
        parse_epilogue(LONG_SUM)
    assert not isinstance(info.value, RecursionError) and len(str(info.value)) < 400


@pytest.mark.parametrize("expr", [LONG_SUM, "z" * 1_000_000, "acc+" * 2_500_000 + "acc"])
def test_emit_refuses_huge_or_deep_epilogues_with_exit_2(tmp_path, monkeypatch, expr):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["emit", "--family", "wgmma", "--epilogue", expr])
    assert result.exit_code == 2, result.output[:500]
    assert "Traceback" not in result.output and len(result.output) < 600, result.output[:600]
    assert not list(tmp_path.iterdir())
