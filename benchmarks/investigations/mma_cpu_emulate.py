"""CPU emulation of a whole mma-family kernel, for checking it where there is no GPU (g++ 12+).

python3 benchmarks/investigations/mma_cpu_emulate.py PRESET MxNxK [MxNxK ...]
    e.g. mma_epilogue 136x136x64 520x776x328   (about 3 s and 20 s on 2 cores)

The rendered kernel is compiled as host C++ (AddressSanitizer on): one std::thread per CUDA
thread, blocks in turn, __syncthreads a block-wide std::barrier; the inline-PTX helpers are
replaced by emulations: cp.async copies at once (bytes past src_bytes zeroed), ldmatrix.x4
(and .trans) and mma.sync m16n8k16 / m16n8k8 are warp collectives through a per-warp barrier,
with the PTX ISA's fragment layouts. Shared memory starts as 0xff bytes (NaN) in every block,
C as NaN. Compares with a double reference of the same fp16/bf16/tf32-rounded inputs.
Sequentially consistent: it checks index math, bounds, fragment layouts and barrier
placement, not timing (a cp.async landing late cannot happen here).
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's gemmgen
from gemmgen import PRESETS, render

PRELUDE = r'''
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <barrier>
#include <vector>
#include <random>
#include <algorithm>
using std::min; using std::max;
struct alignas(8) float2 { float x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
struct Dim3 { unsigned x, y, z; };
thread_local Dim3 threadIdx, blockIdx; Dim3 gridDim;
std::barrier<>* g_bar; std::barrier<>* g_wbar[32]; unsigned char* g_smem;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(a, b)
#define __restrict__
struct half { uint16_t b; };
struct __nv_bfloat16 { uint16_t b; };
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline half __float2half_rn(float f) { _Float16 h = (_Float16)f; half r; memcpy(&r.b, &h, 2); return r; }
inline float __half2float(half h) { _Float16 x; memcpy(&x, &h.b, 2); return (float)x; }
inline unsigned short __half_as_ushort(half h) { return h.b; }
inline half __ushort_as_half(unsigned short u) { return half{u}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u = __float_as_uint(f); u += 0x7fff + ((u >> 16) & 1); return {(uint16_t)(u >> 16)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((uint32_t)h.b << 16); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
// warp collective scratch
struct WarpScratch { const void* p[32]; uint32_t a[32][4], b[32][2]; float c[32][4]; };
WarpScratch g_ws[32];
'''

HELPERS = r'''
__device__ __forceinline__ uint32_t tf32_bits(float x) { uint32_t u = __float_as_uint(x); u = (u + 0x1000u) & 0xffffe000u; return u; }
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    memcpy(dst, src, src_bytes); memset((char*)dst + src_bytes, 0, 16 - src_bytes);
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
static void ldsm_impl(uint32_t* r, const in_t* p, bool trans) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    auto& s = g_ws[w]; s.p[lane] = p; g_wbar[w]->arrive_and_wait();
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
        uint16_t h[2];
        for (int e = 0; e < 2; ++e) {
            const uint16_t* base;
            if (!trans) { base = (const uint16_t*)s.p[j * 8 + g]; h[e] = base[2 * t + e]; }
            else { base = (const uint16_t*)s.p[j * 8 + 2 * t + e]; h[e] = base[g]; }
        }
        r[j] = h[0] | ((uint32_t)h[1] << 16);
    }
    g_wbar[w]->arrive_and_wait();
}
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const in_t* p) { ldsm_impl(r, p, false); }
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const in_t* p) { ldsm_impl(r, p, true); }
static float elem16(uint32_t reg, int hi) { uint16_t b = hi ? reg >> 16 : reg & 0xffff;
    return DTYPE_BF16 ? __bfloat162float(__nv_bfloat16{b}) : __half2float(half{b}); }
__device__ __forceinline__ void mma(float* d, const uint32_t* a, const uint32_t* b) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    auto& s = g_ws[w];
    for (int q = 0; q < 4; ++q) { s.a[lane][q] = a[q]; s.c[lane][q] = d[q]; }
    s.b[lane][0] = b[0]; s.b[lane][1] = b[1];
    g_wbar[w]->arrive_and_wait();
    const int g = lane / 4, t = lane % 4;
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e / 2) * 8, col = 2 * t + e % 2;
        double acc = s.c[lane][e];
        for (int k = 0; k < MMA_K; ++k) {
            float av, bv;
            if (DTYPE_TF32) {  // m16n8k8: a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4); b0 (t, n) b1 (t+4, n)
                const int at = k % 4, ai = (row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0);
                av = __uint_as_float(s.a[(row % 8) * 4 + at][ai]);
                bv = __uint_as_float(s.b[col * 4 + k % 4][k / 4]);
            } else {  // m16n8k16: a0 (g, 2t..) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..); b0 (2t.., n) b1 (2t+8.., n)
                const int kk = k % 8, at = kk / 2, ai = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
                av = elem16(s.a[(row % 8) * 4 + at][ai], kk % 2);
                bv = elem16(s.b[col * 4 + at][k / 8], kk % 2);
            }
            acc += (double)av * bv;
        }
        out[e] = (float)acc;
    }
    g_wbar[w]->arrive_and_wait();
    for (int e = 0; e < 4; ++e) d[e] = out[e];
}
'''

MAIN = r'''
template <class T> T cvt(float x);
template <> float cvt<float>(float x) { return x; }
template <> half cvt<half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
float back(float x) { return x; } float back(half x) { return __half2float(x); } float back(__nv_bfloat16 x) { return __bfloat162float(x); }
int main(int argc, char** argv) {
    using namespace NS;
    int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    const char* lay = LAYOUT;
    bool ac = lay[0] == 'c', bc = lay[1] == 'c', cc = lay[2] == 'c';
    int lda = ac ? M : K, ldb = bc ? K : N, ldc = cc ? M : N;
    size_t sa = (size_t)lda * (ac ? K : M), sb = (size_t)ldb * (bc ? N : K), sc = (size_t)ldc * (cc ? N : M);
    std::mt19937 g(1); std::normal_distribution<float> d;
    in_t* A = (in_t*)aligned_alloc(16, (sa * sizeof(in_t) + 15) / 16 * 16);
    in_t* B = (in_t*)aligned_alloc(16, (sb * sizeof(in_t) + 15) / 16 * 16);
    out_t* C = (out_t*)aligned_alloc(16, (sc * sizeof(out_t) + 15) / 16 * 16);
    for (size_t i = 0; i < sa; ++i) A[i] = cvt<in_t>(d(g));
    for (size_t i = 0; i < sb; ++i) B[i] = cvt<in_t>(d(g));
    for (size_t i = 0; i < sc; ++i) C[i] = cvt<out_t>(NAN);
    std::vector<unsigned char> smem(SMEM_BYTES);
    int gx = (N + BN - 1) / BN, gy = (M + BM - 1) / BM; gridDim = {(unsigned)gx, (unsigned)gy, 1};
    for (int by = 0; by < gy; ++by) for (int bx = 0; bx < gx; ++bx) {
        for (auto& x : smem) x = 0xff;  // NaN garbage: unwritten shared memory shows
        g_smem = smem.data();
        std::barrier<> bar(THREADS); g_bar = &bar;
        std::vector<std::barrier<>*> wb; for (int w = 0; w < THREADS / 32; ++w) g_wbar[w] = new std::barrier<>(32);
        std::vector<std::thread> ts;
        for (int t = 0; t < THREADS; ++t) ts.emplace_back([&, t] {
            threadIdx = {(unsigned)t, 0, 0}; blockIdx = {(unsigned)bx, (unsigned)by, 0};
            KERNEL(M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, 0, 0, 0, nullptr);
        });
        for (auto& th : ts) th.join();
        for (int w = 0; w < THREADS / 32; ++w) delete g_wbar[w];
    }
    double num = 0, den = 0; int bad = 0, nan = 0;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
            float a = back(A[ac ? (size_t)k * lda + i : (size_t)i * lda + k]);
            float b = back(B[bc ? (size_t)j * ldb + k : (size_t)k * ldb + j]);
            if (DTYPE_TF32) { a = __uint_as_float(tf32_bits(a)); b = __uint_as_float(tf32_bits(b)); }
            acc += (double)a * b;
        }
        double got = back(C[cc ? (size_t)j * ldc + i : (size_t)i * ldc + j]);
        if (!std::isfinite(got)) { if (nan++ < 5) printf("nan at %d %d\n", i, j); continue; }
        double err = std::fabs(got - acc);
        if (err > 0.02 * std::sqrt((double)K) + 0.01 * std::fabs(acc)) { if (bad++ < 10) printf("bad at %d %d got %g want %g\n", i, j, got, acc); }
        num += (got - acc) * (got - acc); den += acc * acc;
    }
    printf("%s rel %.3e bad %d nan %d\n", bad || nan ? "WRONG" : "ok", std::sqrt(num / den), bad, nan);
    return bad || nan;
}
'''

def build(cfg, out_dir):
    src = render(cfg)
    name = cfg.name
    # replace the asm helpers with emulated ones
    src = re.sub(r"// float -> TF32 with round.*?\n}\n", "", src, flags=re.S)
    src = re.sub(r"__device__ __forceinline__ void cp_async16.*?cp_async_wait\(\) \{[^\n]*\n", "", src, flags=re.S)
    src = re.sub(r"__device__ __forceinline__ void ldsm_x4\(.*?\n}\n__device__ __forceinline__ void ldsm_x4_trans.*?\n}\n", "", src, flags=re.S)
    src = re.sub(r"// d \+= a @ b.*?\n}\n", "", src, flags=re.S)
    src = src.replace("}  // namespace " + name + "_cfg", HELPERS + "}  // namespace " + name + "_cfg", 1)
    src = src.replace('extern __shared__ __align__(128) unsigned char smem[];', 'unsigned char* smem = g_smem;')
    src = src.replace('extern "C"', '').replace('#include <cuda_fp16.h>', '').replace('#include <cuda_bf16.h>', '')
    src = src.replace('__cvta_generic_to_shared', 'CVTA')
    code = PRELUDE + src + f'\n#define NS {name}_cfg\n#define KERNEL {name}\n#define LAYOUT "{cfg.layout}"\n' + MAIN
    p = Path(out_dir) / f"{name}.cpp"; p.write_text(code)
    exe = Path(out_dir) / name
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-g", "-fsanitize=address", "-w", "-pthread", str(p), "-o", str(exe)], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-4000:])
    return exe

if __name__ == "__main__":
    name = sys.argv[1]; shapes = sys.argv[2:]
    cfg = PRESETS[name].config
    exe = build(cfg, tempfile.mkdtemp(prefix="gemmgen-mma-emu-"))
    for s in shapes:
        m, n, k = s.split("x")
        r = subprocess.run([str(exe), m, n, k], capture_output=True, text=True, env={"ASAN_OPTIONS": "detect_leaks=0"}, timeout=1200)
        print(name, s, (r.stdout + r.stderr)[-1500:])
