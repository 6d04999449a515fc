#!/usr/bin/env bash
# One device-tool call for the wgmma family: compile, probe, verify, sanitize, bench.
# On the GPU machine, from the repo root:
#   source .whl/install.sh && bash benchmarks/hopper_run.sh [preset ...]
# Each step runs under a time limit, so a kernel that hangs costs its limit, not the call.
# Logs go to $OUT (the device tool brings them back); a summary is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT"
PRESETS=${*:-"wgmma_tma wgmma_ring wgmma_ws wgmma_2c wgmma_persistent wgmma_tma_store wgmma_cluster wgmma_bf16 wgmma_tf32"}
SIZE=${SIZE:-4096}
SANITIZE=${SANITIZE:-"wgmma_tma wgmma_cluster"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader

echo "== compile (parallel, into the cubin cache)"
python3 - $PRESETS <<'EOF' 2>&1 | tee "$OUT/compile.log"
import sys, time
from gemmgen import PRESETS
from gemmgen.compile.cache import compile_many
t = time.time()
names = sys.argv[1:]
for name, res in zip(names, compile_many([PRESETS[n].config for n in names])):
    print(name, "ok" if isinstance(res, tuple) else f"FAIL {res}")
print(f"{time.time() - t:.1f} s")
EOF

passed=""
: > "$OUT/probe.log"; : > "$OUT/verify.log"
for p in $PRESETS; do
    echo "== probe $p" >> "$OUT/probe.log"
    timeout 90 python3 benchmarks/probe.py "$p" >> "$OUT/probe.log" 2>&1
    echo "probe exit $?" >> "$OUT/probe.log"
    echo "== verify $p" >> "$OUT/verify.log"
    timeout 150 python3 -m gemmgen verify --preset "$p" > "$OUT/v.log" 2>&1
    rc=$?
    cat "$OUT/v.log" >> "$OUT/verify.log"
    echo "verify $p: exit $rc, $(tail -n 1 "$OUT/v.log")"
    grep -E "FAIL|rror" "$OUT/v.log" | head -n 4
    [ $rc -eq 0 ] && passed="$passed $p"
done
rm -f "$OUT/v.log"

for p in $SANITIZE; do
    echo "== compute-sanitizer memcheck: probe $p 200x136x100"
    timeout 240 compute-sanitizer --tool memcheck --print-limit 5 python3 benchmarks/probe.py "$p" 200 136 100 \
        > "$OUT/sanitize_$p.log" 2>&1
    echo "exit $?"; grep -E "ERROR SUMMARY|Invalid|illegal|rel error" "$OUT/sanitize_$p.log" | head -n 6
done

if [ -n "$passed" ]; then
    args=""
    for p in $passed; do args="$args --preset $p"; done
    echo "== bench $SIZE:$passed"
    timeout 400 python3 -m gemmgen bench $args --size "$SIZE" --json "$OUT/bench.json" 2>"$OUT/bench.err" | tee "$OUT/bench.log"
    tail -n 5 "$OUT/bench.err"
fi
echo "== probe summary"
grep -E "^== probe|matching|random|probe exit" "$OUT/probe.log"
