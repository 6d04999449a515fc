"""A compiled kernel, loaded on each device that runs it, and its launches on device pointers.

A ``Kernel`` holds its cubin; ``module(device)`` loads it into that device's primary context
on first use (``gemmgen.runtime.driver``), so one Kernel serves every GPU of the process and
every thread. ``launches`` describes one call as a ``Recipe`` (the parameter block and where
each operand's address goes); ``launch_raw`` builds and runs it.
"""
from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..compile.nvcc import Resources
from ..model.config import ConfigBase
from ..model.families import fallback_config
from . import driver
from .launch import launch
from .hopper import Fp8Launch, GroupedLaunch, WgmmaLaunch
from .recipe import KernelArgs, Launch, Launcher, Recipe, field_offsets, pack

SIGNATURE = "iiifPiPifPiqqqP"  # M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides, bias
_PARAMS = struct.Struct("@" + SIGNATURE)  # the parameter block, natively aligned as nvcc lays it
_OFFSETS = field_offsets(_PARAMS)
PARAM_NAMES = ("M", "N", "K", "alpha", "A", "lda", "B", "ldb", "beta", "C", "ldc", "stride_a",
               "stride_b", "stride_c", "bias")
"""The argument each field of ``SIGNATURE`` holds (named by ``pack``'s errors)."""


class DirectLaunch(Launcher):
    """The SIMT, WMMA and MMA kernels: one launch of ``SIGNATURE``, a block per BM x BN tile
    (x along N), z the batch entries."""

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        grid_x, grid_y, _ = self.config.grid(args.m, args.n)
        return grid_x, grid_y, args.batch

    def launches(self, args: KernelArgs, dev: int) -> Recipe:
        params, patches = pack(_PARAMS, _OFFSETS, (
            args.m, args.n, args.k, args.alpha, args.a, args.lda, args.b, args.ldb, args.beta,
            args.c, args.ldc, args.stride_a, args.stride_b, args.stride_c, args.bias,
        ), PARAM_NAMES)
        run = Launch(self.function(dev), self.grid(args, 0), (self.config.threads, 1, 1),
                     params, patches)
        return Recipe(dev, [run] if args.m and args.n else [], "direct")


LAUNCHERS = {"wgmma": WgmmaLaunch, "fp8": Fp8Launch, "grouped": GroupedLaunch}
"""The family -> its ``Launcher``, where it is not ``DirectLaunch``: the Hopper kernels' tensor
maps, declared parameter blocks and helper launches."""
LAUNCH_CACHE = 1024
"""Recipes a kernel keeps for ``launch_raw`` (by the whole ``KernelArgs``)."""


@dataclass
class Kernel:
    """A compiled kernel: call it as ``kernel(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None,
    stream=None)`` (see ``gemmgen.runtime.launch.launch``).

    ``config``: its configuration; ``arch``: the target it was compiled for (``sm_90a``);
    ``cubin``: the compiled module; ``resources``: ptxas's report (registers, spills, stack)
    when gemmgen compiled it. ``registers``, ``smem_bytes`` (static) and ``local_bytes`` (per
    thread) come from the loaded function on the current device (``cuFuncGetAttribute``);
    ``last_path`` says what the last call ran (a recipe's ``path``). ``builder`` builds a
    Kernel from a config (``gemmgen.runtime.build.build`` sets itself): ``fallback`` builds
    with it the kernel that takes over where this one's fast path cannot (the Hopper
    kernels' TMA paths).
    """

    config: ConfigBase
    arch: str
    cubin: bytes = field(repr=False)
    resources: Resources | None = None
    source_path: str | None = None
    last_path: str = ""
    builder: Callable[[ConfigBase], Kernel] | None = field(default=None, repr=False)
    call: Callable | None = field(default=None, repr=False)

    def __post_init__(self):
        self._modules: dict[int, driver.Module] = {}
        self._lock = threading.Lock()
        self._fallback = None
        self._recipes: dict[tuple, Recipe] = {}
        self.launcher = LAUNCHERS.get(self.config.family, DirectLaunch)(self)

    @property
    def fallback(self) -> Kernel:
        """The kernel for operands this one's fast path cannot take (for the Hopper kernels,
        the family's ``fallback`` configuration: operands TMA cannot describe, or a C a TMA
        store cannot write), built on first use by ``builder``. Raises ``RuntimeError`` for a
        kernel made without it."""
        if self._fallback is None:
            if self.builder is None:
                raise RuntimeError(f"{self.name}: no fallback kernel (made without a builder)")
            self._fallback = self.builder(fallback_config(self.config))
        return self._fallback

    @property
    def name(self) -> str:
        """The kernel's symbol: the config's name."""
        return self.config.name

    def module(self, device: int | None = None) -> driver.Module:
        """This kernel's module on ``device`` (default: the current context's), loaded on
        first use. Raises ``DriverError``."""
        dev = driver.current_device() if device is None else device
        mod = self._modules.get(dev)
        if mod is None:
            with self._lock:
                mod = self._modules.get(dev) or driver.Module(self.cubin, dev)
                self._modules[dev] = mod
        return mod

    def function(self, device: int | None = None, suffix: str = "") -> driver.Function:
        """The kernel (or its helper ``<name>_<suffix>``) on ``device``."""
        smem = 0 if suffix else self.config.dynamic_smem_bytes
        return self.module(device).function(self.name + (f"_{suffix}" if suffix else ""), smem)

    @property
    def registers(self) -> int:
        """Registers per thread the loaded function uses (at launch, for setmaxnreg kernels)."""
        return self.function().attribute("num_regs")

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block, bytes."""
        return self.function().attribute("shared_size_bytes")

    @property
    def local_bytes(self) -> int:
        """Local memory per thread, bytes (spills or stack; 0 for every preset)."""
        return self.function().attribute("local_size_bytes")

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        """The GEMM launch's grid for ``args`` on a device of ``sms`` SMs (the family's
        ``Launcher``)."""
        return self.launcher.grid(args, sms)

    def launches(self, args: KernelArgs, device: int | None = None) -> Recipe:
        """The ``Recipe`` of one call on ``device`` (default: the current context's): the
        launches, in order, and the path taken. Raises ``OperandError`` naming an argument
        beyond its parameter's C type (or, for the Hopper families, an operand TMA cannot
        describe where no slower path takes it)."""
        dev = driver.current_device() if device is None else device
        return self.launcher.launches(args, dev)

    def launch_raw(self, args: KernelArgs, stream=None) -> None:
        """Enqueue one call on device pointers of the current context's device (no operand
        checks; asynchronous). ``stream``: None (the legacy default stream), a PyCUDA
        ``Stream``, a PyTorch or CuPy stream, or a raw ``CUstream`` handle (int). Recipes are
        cached by the whole ``args``, so a repeated call (the same buffers, or a caching
        allocator's reused ones) is one dict lookup and the launches."""
        dev = driver.current_device()
        key = (args, dev)
        recipe = self._recipes.get(key)
        if recipe is None:
            recipe = self.launches(args, dev)
            if len(self._recipes) >= LAUNCH_CACHE:
                self._recipes.clear()
            self._recipes[key] = recipe
        self.last_path = recipe.path
        recipe.run((), driver.stream_handle(stream))

    def __call__(self, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None, **operands):
        """C = act(alpha * A @ B + beta * C + bias), every family's call; the keywords beyond
        it are the operands its configuration adds:

        - an epilogue tree's operands (wgmma; ``gemmgen.runtime.launch.launch``);
        - ``scale_a``, ``scale_b`` (FP8: numbers, row vectors or block grids;
          ``gemmgen.runtime.calls.call_fp8``);
        - ``offs``, ``counts`` (grouped; ``gemmgen.runtime.calls.call_grouped``).

        ``call`` (set by ``gemmgen.runtime.build`` from the family) takes the call; a Kernel
        made without it runs ``launch``. Raises ``OperandError`` naming a bad argument."""
        call = self.call or launch
        return call(self, A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream, **operands)
