"""CPU emulation of SIMT kernels, for checking them where there is no GPU (g++ 12+, C++20).

python3 benchmarks/investigations/cpu_emulate.py [LABEL ...]   (default: the issue-12 steps, alternatives and
                                                 their layout/epilogue variants)

Each rendered kernel is compiled as host C++ with a small shim: one std::thread per CUDA
thread, blocks run in turn, __syncthreads/__syncwarp are a block-wide std::barrier, __shared__
is a function-static. AddressSanitizer catches reads or writes outside A, B, C and the shared
arrays; UBSan catches misaligned float4/float2 accesses. Each case compares with a double
reference (relative Frobenius error < 1e-5), fails on NaN (C starts as NaN when beta == 0)
and checks that the padding of C past N (or M) is untouched. It checks index math, bounds,
alignment and barrier placement, not timing or warp-synchronous behaviour. Slow: about 5 s
per kernel on 2 cores.
"""
import runpy
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gemmgen
sys.path.insert(0, str(ROOT / "tests"))  # breakers.pairwise_variants

from gemmgen import render

PRELUDE = r'''
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <barrier>
#include <vector>
#include <random>
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct Dim3 { unsigned x, y, z; };
thread_local Dim3 threadIdx, blockIdx;
std::barrier<>* g_bar;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline void __syncwarp() { g_bar->arrive_and_wait(); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(a, b)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__
#define asm(...) (void)0
'''

MAIN = r'''
int main(int argc, char** argv) {
    int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    float alpha = atof(argv[4]), beta = atof(argv[5]);
    int pad = atoi(argv[6]); int batch = atoi(argv[7]);
    const char* lay = LAYOUT;
    bool ac = lay[0] == 'c', bc = lay[1] == 'c', cc = lay[2] == 'c';
    int lda = (ac ? M : K) + pad, ldb = (bc ? K : N) + pad, ldc = (cc ? M : N) + pad;
    long long sa = (long long)lda * (ac ? K : M), sb = (long long)ldb * (bc ? N : K), sc = (long long)ldc * (cc ? N : M);
    std::vector<float> A(sa * batch + 1), B(sb * batch + 1), C(sc * batch + 1), C0, bias(N);
    std::mt19937 g(1); std::normal_distribution<float> d;
    for (auto& x : A) x = d(g); for (auto& x : B) x = d(g); for (auto& x : C) x = d(g); for (auto& x : bias) x = d(g);
    if (beta == 0.f) for (auto& x : C) x = NAN;
    C0 = C;
    // exact-size heap copies so ASan sees the ends
    float* dA = (float*)malloc(sizeof(float) * sa * batch); std::copy(A.begin(), A.begin() + sa * batch, dA);
    float* dB = (float*)malloc(sizeof(float) * sb * batch); std::copy(B.begin(), B.begin() + sb * batch, dB);
    float* dC = (float*)malloc(sizeof(float) * sc * batch); std::copy(C.begin(), C.begin() + sc * batch, dC);
    float* dbias = (float*)malloc(sizeof(float) * N); std::copy(bias.begin(), bias.end(), dbias);
    using namespace NS;
    int gx = (N + BN - 1) / BN, gy = (M + BM - 1) / BM;
    for (int z = 0; z < batch; ++z)
    for (int by = 0; by < gy; ++by) for (int bx = 0; bx < gx; ++bx) {
        std::barrier<> bar(THREADS); g_bar = &bar;
        std::vector<std::thread> ts;
        for (int t = 0; t < THREADS; ++t) ts.emplace_back([&, t] {
            threadIdx = {(unsigned)t, 0, 0}; blockIdx = {(unsigned)bx, (unsigned)by, (unsigned)z};
            KERNEL(M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc, sa, sb, sc, dbias);
        });
        for (auto& th : ts) th.join();
    }
    double num = 0, den = 0; int bad = 0;
    for (int z = 0; z < batch; ++z)
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
            double a = A[z * sa + (ac ? (size_t)k * lda + i : (size_t)i * lda + k)];
            double b = B[z * sb + (bc ? (size_t)j * ldb + k : (size_t)k * ldb + j)];
            acc += a * b;
        }
        size_t ci = z * sc + (cc ? (size_t)j * ldc + i : (size_t)i * ldc + j);
        double ref = alpha * acc + (beta == 0.f ? 0.0 : beta * (double)C0[ci]);
        if (EPI_BIAS) ref += bias[j];
        if (EPI_ACT == 1) ref = ref > 0 ? ref : 0;
        if (EPI_ACT == 2) ref = 0.5 * ref * (1 + std::tanh(0.7978845608028654 * (ref + 0.044715 * ref * ref * ref)));
        double got = dC[ci];
        if (!std::isfinite(got)) { bad++; continue; }
        num += (got - ref) * (got - ref); den += ref * ref;
    }
    // untouched padding must stay as it was
    for (int z = 0; z < batch; ++z)
    for (int i = 0; i < (cc ? N : M); ++i) for (int j = (cc ? M : N); j < ldc; ++j) {
        size_t ci = z * sc + (size_t)i * ldc + j;
        if (!(dC[ci] == C0[ci] || (std::isnan(dC[ci]) && std::isnan(C0[ci])))) bad++;
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    printf("%s rel %.3e bad %d\n", (bad == 0 && rel < 1e-5) ? "ok" : "WRONG", rel, bad);
    return (bad == 0 && rel < 1e-5) ? 0 : 1;
}
'''


def build(cfg, out_dir=None):
    out_dir = out_dir or tempfile.mkdtemp(prefix="gemmgen-emu-")
    src = render(cfg)
    name = cfg.name
    ns = f"{name}_cfg"
    code = PRELUDE + src + f'\n#define NS {ns}\n#define KERNEL {name}\n#define LAYOUT "{cfg.layout}"\n' + MAIN
    p = Path(out_dir) / f"{name}.cpp"
    p.write_text(code)
    exe = Path(out_dir) / name
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-g", "-fsanitize=address,alignment,bounds",
                        "-fno-sanitize-recover=all", "-w", "-pthread", str(p), "-o", str(exe)],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return exe


def run(exe, m, n, k, alpha, beta, pad=0, batch=1):
    r = subprocess.run([str(exe), str(m), str(n), str(k), str(alpha), str(beta), str(pad), str(batch)],
                       capture_output=True, text=True, timeout=600,
                       env={"ASAN_OPTIONS": "detect_leaks=0"})
    return r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1][:300] if (r.stdout + r.stderr).strip() else ""


def main() -> int:
    from breakers import pairwise_variants

    from gemmgen import PRESETS
    pool = runpy.run_path(str(Path(__file__).parent / "explore.py"), run_name="explore")
    cases = [(1, 1, 1, 1.0, 0.0, 0, 1), (512, 256, 64, 1.0, 0.0, 0, 1), (512, 256, 64, 0.5, 2.0, 3, 1),
             (257, 129, 16, 1.0, 1.0, 0, 1), (130, 140, 0, 1.0, 2.0, 0, 1), (130, 140, 20, 0.0, 2.0, 0, 1),
             (65, 129, 33, 1.0, 0.5, 1, 2)]
    targets = {n: PRESETS[n].config for n in ("simt_cs", "simt_best")}
    targets.update(pool["X12_ALTERNATIVES"])
    for n in ("simt_cs", "simt_best", "simt_swizzle"):
        for c in pairwise_variants(PRESETS[n].config):
            if c.layout != "rrr":
                targets[f"{n}_{c.layout}_{c.epilogue}"] = c
    which = sys.argv[1:] or list(targets)
    targets.update({n: p.config for n, p in PRESETS.items() if p.config.family == "simt"})
    failed = 0

    def job(label):
        try:
            exe = build(targets[label])
        except Exception as e:
            return label, [("BUILD", str(e)[:500])]
        res = []
        for case in cases:
            rc, line = run(exe, *case)
            if rc:
                res.append((case, line))
        return label, res
    with ThreadPoolExecutor(2) as ex:
        for label, bad in ex.map(job, which):
            print(label, "ok" if not bad else bad, flush=True)
            failed += bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
