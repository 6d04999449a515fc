#!/usr/bin/env bash
# Evidence for what holds a preset back (device tool, one command): its SASS instruction mix,
# and ncu metrics for it and for cuBLAS in the same dtype on the same buffers.
# Usage on the GPU machine: source .whl/install.sh && bash benchmarks/investigations/profile.sh [preset]
set -uo pipefail
OUT=${OUT:-/tmp/gemmgen-out}; mkdir -p "$OUT"
preset=${1:-wmma_pipeline}
arch=$(python3 -c "from gemmgen import PRESETS, FAMILIES; print(FAMILIES[PRESETS['$preset'].config.family].arch_for(90))")
python3 -c "import sys; from gemmgen import PRESETS, render; from gemmgen.compile.cache import compile_cached; c = PRESETS[sys.argv[1]].config; open(sys.argv[3], 'wb').write(compile_cached(render(c, sys.argv[2]), sys.argv[2], c.name)[0])" "$preset" "$arch" "$OUT/$preset.cubin" && cuobjdump -sass "$OUT/$preset.cubin" > "$OUT/$preset.sass"
echo "SASS instruction mix of $preset ($arch):"
for op in HGMMA HMMA LDSM LDS STS STSM LDGSTS LDG STG UTMALDG UTMASTG BAR FFMA; do
  printf '  %-7s %5d\n' "$op" "$(grep -cE "^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?$op[ .;]" "$OUT/$preset.sass")"
done
metrics=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
ncu --clock-control none --launch-skip 2 --launch-count 2 --metrics "$metrics" \
    python3 benchmarks/investigations/profile_one.py "$preset" "${SIZE:-4096}" > "$OUT/ncu_$preset.txt" 2>&1
grep -E "gemm|xmma|sm90|Kernel|duration|pct|\.sum|ratio" "$OUT/ncu_$preset.txt" | grep -v "^==PROF==" | head -n 60
