"""How many clusters of 1, 2, 3, 4, 6 and 8 CTAs an H100/H200 runs at once, as the CUDA runtime
reports it (``cudaOccupancyMaxActiveClusters``), for CTAs of 256 and 384 threads and the
dynamic shared memory of the wgmma kernels' rings (100 KB to the 227 KB limit): whether the
cluster split-K's slowdown past 64 CTAs (split_cost.py) is a limit on co-resident clusters.
Also times an empty kernel of each cluster size over 32 to 132 CTAs (graph of 20 launches,
median of 7 replays), where the launch itself would show a cluster step.

    python3 benchmarks/investigations/cluster_occupancy.py compile DIR  # CPU: DIR/occupancy (nvcc)
    python3 benchmarks/investigations/cluster_occupancy.py run DIR      # GPU: $OUT/cluster_occupancy_<GPU>.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SOURCE = r"""
#include <cstdio>
#include <cuda_runtime.h>
extern __shared__ char smem[];
__global__ void hold(int* out, long long spin) {
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    if (threadIdx.x == 0 && out) out[blockIdx.x] = smem[threadIdx.x];
}
int main() {
    int sizes[] = {1, 2, 3, 4, 6, 8}, threads[] = {256, 384}, kb[] = {100, 150, 200, 227};
    printf("{\"occupancy\": [");
    bool first = true;
    for (int s : sizes) for (int t : threads) for (int k : kb) {
        int bytes = k * 1024;
        cudaFuncSetAttribute(hold, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        cudaFuncSetAttribute(hold, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = s; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(132 * s); cfg.blockDim = dim3(t); cfg.dynamicSmemBytes = bytes;
        cfg.attrs = attr; cfg.numAttrs = 1;
        int clusters = -1;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, (void*)hold, &cfg);
        printf("%s{\"cluster\": %d, \"threads\": %d, \"smem_kb\": %d, \"max_clusters\": %d, "
               "\"max_ctas\": %d, \"error\": \"%s\"}", first ? "" : ", ", s, t, k, clusters,
               clusters * s, cudaGetErrorString(e));
        first = false;
    }
    printf("], \"spin\": [");
    // CTAs that each hold an SM for ~20 us: a launch of more CTAs than fit at once takes two
    // rounds. The time of one launch per CTA count and cluster size (200 KB, 256 threads).
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    first = true;
    for (int s : sizes) for (int ctas = 32; ctas <= 136; ctas += 8) {
        if (ctas % s) continue;
        int bytes = 200 * 1024;
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = s; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(ctas); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = bytes;
        cfg.attrs = attr; cfg.numAttrs = 1;
        float best = 1e9;
        for (int rep = 0; rep < 7; ++rep) {
            cudaEventRecord(a);
            cudaLaunchKernelEx(&cfg, hold, (int*)nullptr, 40000LL);
            cudaEventRecord(b);
            cudaEventSynchronize(b);
            float ms; cudaEventElapsedTime(&ms, a, b);
            if (ms < best) best = ms;
        }
        printf("%s{\"cluster\": %d, \"ctas\": %d, \"us\": %.2f, \"error\": \"%s\"}",
               first ? "" : ", ", s, ctas, best * 1e3, cudaGetErrorString(cudaGetLastError()));
        first = false;
    }
    printf("]}\n");
    return 0;
}
"""


def compile(folder: str) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    src = Path(folder, "occupancy.cu")
    src.write_text(SOURCE)
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a",
                    "-o", str(Path(folder, "occupancy")), str(src)], check=True)


def run(folder: str) -> None:
    import torch
    gpu = torch.cuda.get_device_name(0)
    got = json.loads(subprocess.run([str(Path(folder, "occupancy"))], check=True,
                                    capture_output=True, text=True).stdout)
    doc = {"investigation": "cluster_occupancy", "gpu": gpu, "method": __doc__,
           "sms": torch.cuda.get_device_properties(0).multi_processor_count, **got}
    name = f"cluster_occupancy_{gpu.replace(' ', '_')}.json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(doc, indent=1))
    for r in got["occupancy"]:
        print(r)


if __name__ == "__main__":
    {"compile": compile, "run": run}[sys.argv[1]](sys.argv[2])
