"""Raw-stream launches without a GPU: the parameter block gemmgen.runtime.kernel packs for cuLaunchKernel
sits at the offsets the compiled kernel declares, and stream objects become raw handles."""
import struct

import pytest

from gemmgen import PRESETS
from gemmgen.codegen.render import render
from gemmgen.compile.cache import compile_cached
from gemmgen.runtime.driver import stream_handle
from gemmgen.runtime.kernel import _PARAMS, SIGNATURE
from gemmgen.runtime.tma import param_layout


def _native_offsets(fmt: str) -> list[int]:
    return [struct.calcsize("@" + fmt[:i + 1]) - struct.calcsize("@" + fmt[i]) for i in
            range(len(fmt))]


@pytest.mark.parametrize("preset", ["warptile_tuned", "wmma_pipeline"])
def test_packed_parameters_sit_at_the_cubins_offsets(nvcc, preset):
    cfg = PRESETS[preset].config
    cubin, _ = compile_cached(render(cfg, "sm_80"), "sm_80", cfg.name)
    layout = param_layout(cubin, cfg.name)
    assert list(layout.offsets) == _native_offsets(SIGNATURE)
    assert list(layout.sizes) == [struct.calcsize(c) for c in SIGNATURE]
    assert _PARAMS.size == layout.total


class _TorchLike:
    cuda_stream = 0x7F00


class _CupyLike:
    ptr = 0x7E00


def test_stream_handles():
    assert stream_handle(None) is None
    assert stream_handle(0) == 0 and stream_handle(12345) == 12345
    assert stream_handle(_TorchLike()) == 0x7F00 and stream_handle(_CupyLike()) == 0x7E00
    with pytest.raises(TypeError, match="stream: expected"):
        stream_handle("default")
    with pytest.raises(TypeError, match="stream: expected"):
        stream_handle(True)


def test_pdl_launch_passes_programmatic_stream_serialization(monkeypatch):
    """A launch with ``pdl`` goes through cuLaunchKernelEx with one attribute,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 1, and the grid, block, shared
    memory and stream of the call, laid out as cuda.h's CUlaunchConfig (56 bytes, the
    attribute 72); a launch without it stays a plain cuLaunchKernel."""
    import ctypes

    from gemmgen.runtime import driver
    assert ctypes.sizeof(driver._LaunchAttribute) == 72
    assert ctypes.sizeof(driver._LaunchConfig) == 56
    assert driver._LaunchConfig.stream.offset == 32 and driver._LaunchConfig.attrs.offset == 40
    seen = []

    class Lib:
        def cuLaunchKernelEx(self, cfg, function, params, extra):
            c = cfg._obj
            attr = c.attrs[0]
            seen.append(("ex", function, tuple(c.grid), tuple(c.block), c.smem, c.stream,
                         c.num_attrs, attr.id, attr.value))
            return 0

        def cuLaunchKernel(self, function, *rest):
            seen.append(("plain", function))
            return 0
    monkeypatch.setattr(driver, "_lib", lambda: Lib())
    driver.launch(0xF00, (3, 2, 1), (384, 1, 1), 4096, b"\0" * 8, 0x5000, pdl=True)
    driver.launch(0xF00, (3, 2, 1), (384, 1, 1), 4096, b"\0" * 8, 0x5000)
    assert seen == [("ex", 0xF00, (3, 2, 1), (384, 1, 1), 4096, 0x5000, 1, 6, 1),
                    ("plain", 0xF00)]
