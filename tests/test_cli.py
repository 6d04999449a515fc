"""The command line, through click's CliRunner."""
import json

import pytest
from click.testing import CliRunner

from gemmgen import PRESETS, SimtConfig, config_from_source
from gemmgen.cli.main import main


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args))


def test_emit_writes_generated_name(run, tmp_path):
    result = run("emit", "--bm", "128", "--bn", "128", "--bk", "16", "--tm", "8", "--tn", "8")
    assert result.exit_code == 0, result.output
    files = list((tmp_path / "generated").glob("*.cu"))
    assert [f.name for f in files] == ["gemm_simt_f32_128x128x16_wnone_t8x8_v4_skew4_st2_at_on_mb1.cu"]
    cfg = config_from_source(files[0].read_text())
    assert (cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn, cfg.stages) == (128, 128, 16, 8, 8, 2)


def test_invalid_config_exits_2_lists_every_rule_and_writes_nothing(run, tmp_path):
    result = run("emit", "--bm", "128", "--bn", "128", "--bk", "16", "--tm", "8", "--tn", "7")
    assert result.exit_code == 2
    for rid in ("R14 bn-tn", "R22 a-tile-loads", "R23 b-tile-loads", "R24 tn-vec"):
        assert rid in result.output
    assert "--tn 8" in result.output
    assert list(tmp_path.iterdir()) == []


def test_preset_with_override_and_output_path(run, tmp_path):
    result = run("emit", "--preset", "warptile_db", "--skew", "0", "-o", "k.cu")
    assert result.exit_code == 0, result.output
    cfg = config_from_source((tmp_path / "k.cu").read_text())
    assert cfg == PRESETS["warptile_db"].config.replace(skew=0)


def test_config_json_round_trip(run, tmp_path):
    line = PRESETS["tile1d"].config.to_json()
    result = run("emit", "--config-json", line, "-o", "k.cu")
    assert result.exit_code == 0, result.output
    assert config_from_source((tmp_path / "k.cu").read_text()) == PRESETS["tile1d"].config


def test_check_prints_ptxas_resources(run, nvcc):
    result = run("emit", "--bm", "128", "--bn", "128", "--bk", "16", "--tm", "8", "--tn", "8",
                 "--check")
    assert result.exit_code == 0, result.output
    assert "nvcc sm_90:" in result.output
    assert "0 bytes spill stores, 0 bytes spill loads" in result.output
    assert "bytes static shared memory (model 33792)" in result.output


def test_list_shows_every_preset_with_source(run):
    result = run("list")
    assert result.exit_code == 0
    for p in PRESETS.values():
        assert p.name in result.output and p.source in result.output
    names = run("list", "--names").output.split()
    assert names == list(PRESETS)
    data = json.loads(run("list", "--json").output)
    assert [d["kernel"] for d in data] == [p.config.name for p in PRESETS.values()]


def test_rules_lists_the_tables(run):
    from gemmgen import FAMILIES
    from gemmgen.model.families.simt import SIMT_RULES
    out = run("rules").output.splitlines()
    from gemmgen.model.epilogue_rules import EPILOGUE_RULES
    from gemmgen.model.families.hopper.waiter import WAITER_RULES
    from gemmgen.model.families.hopper.fp8.rules import FP8_A_ROWS_RULES, FP8_WAITER_RULES
    from gemmgen.model.families.hopper.wgmma.rules import (SPLIT_CLUSTER_RULES, STREAM_K_RULES,
                                                           WGMMA_FEATURE_RULES)
    features = (EPILOGUE_RULES, WGMMA_FEATURE_RULES, STREAM_K_RULES, SPLIT_CLUSTER_RULES,
                WAITER_RULES, FP8_WAITER_RULES, FP8_A_ROWS_RULES)
    assert len(out) == sum(len(f.config.rules) + 1 for f in FAMILIES.values()) + sum(
        len(t) + 1 for t in features)
    assert out[-1].split()[:2] == ["F36", "a-rows-fast"]
    tail = len(FP8_A_ROWS_RULES) + len(FP8_WAITER_RULES) + 2
    assert out[-tail - 1].split()[:2] == ["H61", "waiter-one-consumer"]
    assert "H62" in out[-tail - len(WAITER_RULES) - len(SPLIT_CLUSTER_RULES) - 1]
    assert out[22].split()[:2] == ["R22", "a-tile-loads"]
    assert "W08" in out[len(SIMT_RULES) + 9]


def test_emit_wmma_family(run, tmp_path):
    result = run("emit", "--family", "wmma", "--dtype", "tf32", "-o", "k.cu")
    assert result.exit_code == 0, result.output
    cfg = config_from_source((tmp_path / "k.cu").read_text())
    assert (cfg.family, cfg.dtype, cfg.shape, cfg.bk) == ("wmma", "tf32", "m16n16k8", 32)
    assert "dynamic shared memory" in result.output
    bad = run("emit", "--family", "wmma", "--tm", "4")
    assert bad.exit_code == 2 and "--tm does not apply to the wmma family" in bad.output
    invalid = run("emit", "--family", "wmma", "--wm", "48")
    assert invalid.exit_code == 2 and "W13 bm-wm" in invalid.output and "--wm 64" in invalid.output
    assert not (tmp_path / "generated").exists()


def test_check_fails_on_spills_and_writes_nothing(run, tmp_path, nvcc):
    result = run("emit", "--bm", "256", "--bn", "256", "--bk", "8", "--tm", "8", "--tn", "8",
                 "--vec", "2", "--check")
    assert result.exit_code == 1, result.output
    assert "error: ptxas spills to local memory on sm_90" in result.output
    assert "nothing written" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_emit_warns_when_the_register_estimate_exceeds_the_cap(run):
    result = run("emit", "--bm", "256", "--bn", "256", "--bk", "8", "--tm", "8", "--tn", "8",
                 "--vec", "2")
    assert result.exit_code == 0
    assert "warning: about" in result.output and "allow 64: ptxas will likely spill" in result.output
    quiet = run("emit", "--preset", "warptile_tuned")
    assert quiet.exit_code == 0 and "warning" not in quiet.output


def test_suggestions_never_spill_by_the_estimate(run):
    from gemmgen.model.registers import spill_risk
    from gemmgen.model.suggest import nearest
    bad = SimtConfig.unchecked(bm=256, bn=256, bk=8, tm=8, tn=8, skew=4)
    found = nearest(bad)
    assert found and not any(spill_risk(c) for c in found)
    assert all(c.threads * c.min_blocks <= 512 for c in found)  # 1024 threads cap 64 registers
    result = run("emit", "--bm", "256", "--bn", "256", "--bk", "8", "--tm", "8", "--tn", "8")
    assert result.exit_code == 2 and "\n  --vec 2 " not in result.output


def test_emit_limits_and_figures_follow_the_arch(run, tmp_path):
    result = run("emit", "--preset", "wmma_v07", "--arch", "sm_86", "-o", "k.cu")
    assert result.exit_code == 0, result.output
    assert "(threads and shared memory, sm_86)" in result.output
    assert "blocks_per_sm_sm_86" in (tmp_path / "k.cu").read_text()
    big = run("emit", "--family", "wmma", "--arch", "sm_86", "--bm", "256", "--bn", "128",
              "--bk", "64", "--stages", "3")
    assert big.exit_code == 2 and "cannot run on sm_86" in big.output
    assert "sm_90" not in big.output
    assert run("emit", "--family", "wmma", "--bm", "256", "--bn", "128", "--bk", "64",
               "--stages", "3", "-o", "k90.cu").exit_code == 0
