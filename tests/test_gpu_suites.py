"""On a GPU: operands drawn on the device verify in every layout, and a few cases of each suite
run end to end through the command line (verified, timed beside their baseline, written to
<suite>_<GPU>.json)."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from gemmgen.__main__ import main
from gemmgen.model.presets import PRESETS
from gemmgen.runtime.build import build
from gemmgen.tune.bench import Problem, bench_cublas, bench_kernel, device_info
from gemmgen.tune.results import file_stem
from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype, preset", [("fp16", "mma_fp16"), ("bf16", "mma_bf16"),
                                           ("tf32", "mma_tf32")])
@pytest.mark.parametrize("layout", ["rrr", "ccc", "rcr", "crc"])
def test_device_drawn_operands_verify_in_every_layout(dtype, preset, layout):
    pytest.importorskip("cupy")
    cfg = PRESETS[preset].config.replace(layout=layout)
    kernel = build(cfg)
    p = Problem(264, 520, 200, np.random.default_rng(1), device_info()["l2_bytes"], dtype,
                cfg.out, layout, device_data=True)
    assert p.A is None and p.sets > 1
    tol = tolerance(200, dtype, cfg.acc, cfg.out)
    _, err = bench_kernel(kernel, p, 0.01)
    _, cub = bench_cublas(p, 0.01)
    assert err <= tol and cub <= tol, (err, cub, tol)


@pytest.mark.parametrize("suite, args, rows", [
    ("ladder", ["--only", "warptile_tuned"], 1),
    ("odd", ["--only", "16x8192x8192"], 2),
    ("epilogues", ["--only", "bf16 rrr 4096x4096x4096 bias_gelu"], 1),
    ("llm", ["--quick", "--only", "gpt2.c_fc fp16"], 15),
    ("torch", ["--quick", "--only", "gpt2.c_attn fp16"], 9),
])
def test_suites_run_end_to_end(tmp_path, suite, args, rows):
    pytest.importorskip("cupy")
    if suite == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA device")
    out = CliRunner().invoke(main, ["bench", "--suite", suite, *args, "--results-dir",
                                    str(tmp_path)])
    assert out.exit_code == 0, out.output
    gpu = device_info()["gpu"]
    doc = json.loads((tmp_path / f"{suite}_{file_stem(gpu)}.json").read_text())
    assert doc["gpu"] == gpu and len(doc["rows"]) == rows
    for r in doc["rows"]:
        assert r["passed"] and r["tflops"] > 0 and r["cublas_tflops"] > 0, r
        assert r["p20_ms"] <= r["time_ms"] <= r["p80_ms"], r
