"""What a consumer's wait for a full stage costs beside m64nN wgmmas: one CTA, its warpgroups
issuing 64-deep K stages (4 x wgmma.m64nNk16, bf16, both operands in 128-byte-swizzled shared
memory) as the wgmma kernel's consumer does (fence, the stage's wgmmas, commit, wait_group 1),
with and without shared-memory traffic of its own between stages:

- ``none``: no poll, the wgmmas alone;
- ``mbarrier``: one thread arrives on an mbarrier and every thread waits on a completed phase
  (``mbarrier.try_wait.parity``), as the consumer releases a stage and waits for the next;
- ``arrive``: the arrival only; ``try_wait``: the wait only;
- ``test_wait``: the arrival and a ``mbarrier.test_wait`` loop;
- ``ld_shared``: the arrival and a loop on a ``ld.volatile.shared`` flag.
- ``waiter``: the arrival, then the warpgroup meets a fifth warp at a named barrier
  (``bar.sync``); that warp, which issues no wgmma, polls the mbarrier before each meeting, so
  the consumer itself reads no shared memory to learn that a stage is full;
- ``named_bar``: the same meeting with a warp that does not poll (the barrier's own cost).

Each kernel also runs with two warpgroups taking the stages in turn, with two stages a
commit group (one wait for both), and with wait_group 0 in place of 1 (a warpgroup then holds
only the stage its wgmmas read). Cycles per stage are clock64 over 4096 stages, CTA 0 of a
1-CTA launch; the wgmmas' own floor is N/2 x 4 cycles (1024 bf16 FMA a cycle an SM) or the
shared-memory reads at 128 bytes a cycle, whichever is more.

    python3 benchmarks/investigations/smem_poll.py compile DIR   # CPU: DIR/smem_poll (nvcc)
    python3 benchmarks/investigations/smem_poll.py run DIR       # GPU: $OUT/smem_poll_<GPU>.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

POLLS = ("none", "mbarrier", "arrive", "try_wait", "test_wait", "ld_shared", "waiter",
         "named_bar")
CASES = [(n, 1, 1, p, 1) for n in (32, 64, 128) for p in POLLS] + [
    (n, wgs, g, "mbarrier", 1) for n in (32, 64, 128) for wgs in (1, 2) for g in (1, 2)
    if (wgs, g) != (1, 1)] + [(n, wgs, 1, "mbarrier", 0) for n in (32, 64, 128) for wgs in (1, 2)] + [
    (n, 1, 2, p, 1) for n in (32, 64, 128) for p in ("waiter", "named_bar")]
"""(wgmma N, warpgroups, stages a commit group, poll, wgmma groups left in flight at the wait:
1 as the kernel's consumer, or 0, where a warpgroup releases its stage as soon as its own
wgmmas are done and so holds one stage, not two). ``waiter`` and ``named_bar`` need the fifth
warp, so run with one consumer warpgroup only."""
STAGES_TIMED = 4096

HEAD = r"""#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
__device__ __forceinline__ uint64_t desc(uint32_t addr) {  // K-major, 128-byte swizzle
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32
           | (uint64_t)1 << 62;
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int W> __device__ __forceinline__ void wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(W) : "memory");
}
__device__ __forceinline__ bool poll(int mode, uint32_t bar, uint32_t parity, uint32_t flag) {
    uint32_t done = 0;
    if (mode == 4)
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    else if (mode == 5)
        asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(done) : "r"(flag) : "memory");
    else
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
"""

KERNEL = r"""
template <int N, int WGS, int G, int MODE, int W>
__global__ void __launch_bounds__(256, 1) stages(int count, long long* cyc, float* out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t base = (raw + 1023) & ~1023u;  // A and B from a 1024-byte swizzle atom
    __nv_bfloat16* operands = (__nv_bfloat16*)(smem + (base - raw));
    for (int i = threadIdx.x; i < 32768; i += blockDim.x) {  // random bf16 A and B
        unsigned h = i * 2654435761u + 12345u; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        operands[i] = __float2bfloat16((h & 0xffff) / 65536.f - 0.5f);
    }
    __shared__ __align__(8) unsigned long long bars[10];
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(bars);
    if (threadIdx.x == 0) {
        for (int i = 0; i < 9; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar0 + 8 * i));
        ((volatile uint32_t*)bars)[18] = 1;  // the ld_shared flag, set
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar0 + 64) : "memory");
    __syncthreads();
    const int wg = threadIdx.x / 128;
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
    const long long t0 = clock64();
    if (wg < WGS) {
        for (int it = wg * G; it < count; it += WGS * G) {
            if (MODE != 0) {
                const uint32_t bar = bar0 + 8 * ((it / G) & 7);
                if (MODE != 3 && threadIdx.x % 128 == 0)
                    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
                if (MODE >= 6)  // a warp outside the warpgroup polled; meet it
                    asm volatile("bar.sync 1, 160;" ::: "memory");
                else
#pragma unroll
                for (int g = 0; g < G; ++g)
                    if (MODE != 2)
                        while (!poll(MODE, MODE == 3 ? bar0 + 64 : bar,
                                     MODE == 3 ? 0 : ((it / G) >> 3) & 1, bar0 + 72)) {}
            }
            fence();
#pragma unroll
            for (int kk = 0; kk < 4 * G; ++kk)
                WGMMA(d, desc(base + (it & 3) * 8192 + kk * 32), desc(base + 32768 + kk * 32));
            commit();
            wait_group<W>();
        }
        wait_group<0>();
#pragma unroll
        for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
    }
    else if (MODE >= 6 && threadIdx.x / 32 == 4) {  // the waiter warp: one meeting per group
        for (int it = 0; it < count; it += G) {
            if (MODE == 6)
#pragma unroll
                for (int g = 0; g < G; ++g)
                    while (!poll(0, bar0 + 64, 0, bar0 + 72)) {}
            asm volatile("bar.sync 1, 160;" ::: "memory");
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) s += d[i];
    out[threadIdx.x] = s;
    if (threadIdx.x == 0) *cyc = t1 - t0;
}
"""


def wgmma(n: int) -> str:
    """An overload of WGMMA(d, desc_a, desc_b) for m64n``n``k16, accumulating."""
    a = n // 2
    regs = ", ".join(f"%{i}" for i in range(a))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(a))
    return (f"__device__ __forceinline__ void WGMMA(float (&d)[{a}], uint64_t da, uint64_t db) "
            f'{{\n    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 '
            f'{{{regs}}}, %{a}, %{a + 1}, 1, 1, 1, 0, 0;"\n    : {cons} : "l"(da), "l"(db));\n}}\n')


def source() -> str:
    runs = "".join(
        f"    run(stages<{n}, {wgs}, {g}, {POLLS.index(p)}, {w}>, {n}, {wgs}, {g}, \"{p}\", {w});\n"
        for n, wgs, g, p, w in CASES)
    main = (r"""
template <typename K>
void run(K kernel, int n, int wgs, int g, const char* poll, int w) {
    static long long* cyc = nullptr; static float* out = nullptr;
    if (!cyc) { cudaMalloc(&cyc, 8); cudaMalloc(&out, 1024); }
    const int smem = 200 * 1024;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kernel<<<1, 256, smem>>>(64, cyc, out);
    kernel<<<1, 256, smem>>>(STAGES_TIMED, cyc, out);
    cudaError_t e = cudaDeviceSynchronize();
    long long c = 0; cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
    printf("{\"N\": %d, \"warpgroups\": %d, \"group_stages\": %d, \"poll\": \"%s\", "
           "\"wait_group\": %d, \"cycles_per_stage\": %.1f, \"error\": \"%s\"}\n", n, wgs, g, poll, w,
           (double)c / STAGES_TIMED, e == cudaSuccess ? "" : cudaGetErrorString(e));
}
int main() {
    cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
    printf("{\"gpu\": \"%s\"}\n", prop.name);
""".replace("STAGES_TIMED", str(STAGES_TIMED)) + runs + "    return 0;\n}\n")
    return HEAD + "".join(wgmma(n) for n in (32, 64, 128)) + KERNEL + main


def compile_all(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    src = Path(folder, "smem_poll.cu")
    src.write_text(source())
    subprocess.run(["nvcc", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a",
                    "-o", str(Path(folder, "smem_poll")), str(src)], check=True)


def run(folder: str) -> None:
    lines = subprocess.run([str(Path(folder, "smem_poll"))], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    gpu = json.loads(lines[0])["gpu"]
    rows = [json.loads(line) for line in lines[1:]]
    for r in rows:
        print(r)
    doc = {"investigation": "smem_poll", "gpu": gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"),
           "timing": "clock64 in the kernel, one CTA, 4096 stages after a warm-up launch",
           "method": __doc__, "rows": rows}
    Path(os.environ.get("OUT", "."), f"smem_poll_{gpu.replace(' ', '_')}.json").write_text(
        json.dumps(doc, indent=1))


if __name__ == "__main__":
    {"compile": compile_all, "run": run}[sys.argv[1]](sys.argv[2])
