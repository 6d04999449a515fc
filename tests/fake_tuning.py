"""Stand-ins for the GPU side of tuning: a compile function and a runner with made-up speeds."""
import dataclasses
import zlib

from gemmgen.compile.nvcc import BuildError
from gemmgen.model.space import DeviceLimits

DEVICE = DeviceLimits.from_arch("sm_90", 132, "FakeGPU")


def fake_compile(source: str, arch: str, name: str, timeout: float):
    if int(name.split("_")[3].split("x")[2]) == 32:  # BK = 32: "nvcc fails"
        raise BuildError(f"/tmp/{name}.cu", "error: pretend ptxas ran out of registers")
    return b"cubin:" + name.encode(), {"registers": 100, "spill_stores": 0, "spill_loads": 0,
                                       "smem_bytes": 0, "stack_bytes": 0, "arch": arch}


def fake_speed(name: str) -> float:
    return 10 + zlib.crc32(name.encode()) % 4000 / 100


class FakeRunner:
    """Measures instantly: configs with skew 0 are 'wrong' (and the fastest, to prove a wrong
    kernel is never chosen); the rest get a speed from a hash of their name, or from
    ``speed(name)`` where given. ``swaps`` records each submitted name's swap flag."""

    def __init__(self, speed=None):
        self.info = {"gpu": "FakeGPU", "arch": "sm_90", "limits": dataclasses.asdict(DEVICE),
                     "cublas_tflops": 50.0}
        self.rows, self.submitted, self.swaps = [], [], {}
        self.speed = speed or fake_speed

    def submit(self, name, cfg, cubin, ptxas, swap=False):
        assert cubin == b"cubin:" + cfg.name.encode()
        self.submitted.append(name)
        self.swaps[name] = swap
        if getattr(cfg, "skew", 1) == 0:
            row = {"status": "wrong", "reason": "pretend error 1e-1", "rel_error": 0.1}
        else:
            speed = self.speed(name)
            row = {"status": "ok", "tflops": speed, "time_ms": round(1e3 / speed, 4),
                   "rel_error": 1e-6, "registers": 100}
        self.rows.append((name, row))

    def poll(self, timeout):
        rows, self.rows = self.rows, []
        return rows

    def head_to_head(self, items):
        """The side-by-side timing: ``rematch(name)`` TFLOP/s where given, else the speed."""
        self.rematched = [name for name, *_ in items]
        speed = getattr(self, "rematch", None) or self.speed
        return {name: round(1e3 / speed(name), 5) for name, *_ in items}


def spilling_compile(source: str, arch: str, name: str, timeout: float):
    """fake_compile, but ptxas "spills" the double-buffered skew-4 configurations."""
    cubin, res = fake_compile(source, arch, name, timeout)
    if "_skew4_" in name and "_st2_" in name:
        res = {**res, "spill_stores": 96, "spill_loads": 128, "stack_bytes": 104}
    return cubin, res
