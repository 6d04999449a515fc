#!/usr/bin/env bash
# Suites of two checkouts alternated on the GPUs of one machine, several runs a side, each row
# compared by its median ratio to its same-run baseline (before_after.py --before ... --after).
#
#   bash benchmarks/investigations/no_regression.sh BEFORE_DIR RUNS SUITE...
#
# BEFORE_DIR: the older checkout (made on the workstation with
#   mkdir .before && git archive <sha> | tar -x -C .before, carried to the GPU machine);
# this checkout is the newer one. RUNS: runs a side, spread over the visible GPUs (each GPU
# alternates the two sides, starting with a different one). Writes $OUT/<suite>_compare.json
# and $OUT/raw.tar.gz (every run's results file); kernels compile into $GEMMGEN_CACHE_DIR
# (default /tmp/gemmgen-no-regression). BEFORE_COMMIT and AFTER_COMMIT (default GEMMGEN_COMMIT)
# name the two sides in the results, where the checkouts' git cannot (a copy without .git, or a
# stale one on the GPU machine). ONLY: the rows whose label contains it (run.py --only), e.g.
#   ONLY="fp16 rrr 1024x1024x1024" bash ... .before 12 square   (one row, 12 runs a side).
set -u
BEFORE=$(cd "$1" && pwd); RUNS=$2; shift 2
ROOT=$(pwd); OUT=${OUT:-$ROOT/no-regression}; RAW=$(mktemp -d)
export GEMMGEN_CACHE_DIR=${GEMMGEN_CACHE_DIR:-/tmp/gemmgen-no-regression}
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
mkdir -p "$OUT"
one() {  # side run suite gpu
  local dir=$ROOT commit=${AFTER_COMMIT:-${GEMMGEN_COMMIT:-}}
  [ "$1" = b ] && dir=$BEFORE commit=${BEFORE_COMMIT:-}
  (cd "$dir" && GEMMGEN_GIT_COMMIT=$commit CUDA_VISIBLE_DEVICES=$4 timeout 900 python3 benchmarks/run.py "$3" \
     ${ONLY:+--only "$ONLY"} --results-dir "$RAW/$3/$1$2" > "$RAW/$3.$1$2.log" 2>&1)
  echo "$3 $1$2 gpu$4 rc=$? $(date +%T)"
}
for suite in "$@"; do
  for ((g = 0; g < GPUS; g++)); do
    (for ((i = g; i < 2 * RUNS; i += GPUS)); do
       side=$([ $(( (i / GPUS + g) % 2 )) = 0 ] && echo b || echo a)
       one "$side" "$i" "$suite" "$g"
     done) &
  done
  wait
  python3 benchmarks/investigations/before_after.py --before "$RAW/$suite"/b*/*.json \
    --after "$RAW/$suite"/a*/*.json --label "$suite" --rows > "$OUT/${suite}_compare.json"
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print({k: v for k, v in d.items() if k != 'rows_below'})" "$OUT/${suite}_compare.json"
done
tar -czf "$OUT/raw.tar.gz" -C "$RAW" .
