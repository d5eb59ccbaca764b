#!/usr/bin/env bash
# Issue 14 items 3 and 4 on the GPU machine (16 cores + one GPU), <= 7 minutes, results in $OUT.
#
#   1. latency profile of the chain on the CPU (2 pinned cores, batch 64): the inference device;
#   2. actor chains on hybrid, --cost macs and --cost latency (that profile) at four k_cpt
#      (k_cpt 0 would train the same net under both costs),
#      trained on the GPU in parallel (8 processes, 2 cores each), preset $PRESET;
#   3. latency report on the CPU (2 pinned cores): accuracy and wall time per example of
#      dynamic execution at batch 1, 64, 256; MAC- vs latency-cost table and figures;
#   4. (meanwhile, on the GPU and the other cores) eager vs --compile training steps of
#      static-8 and the actor chain on CUDA, with the paper's 80,000-iteration time.
# Every part has its own time limit, so the script always ends and keeps what finished.
set -uo pipefail
OUT=${OUT:-out}
PRESET=${PRESET:-cpu-small}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu PRESET=smoke: a dry run of the plumbing
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets}
export ROUTING_RL_CACHE=${ROUTING_RL_CACHE:-$PWD/.cache/routing-rl}
PY=${PY:-python3}
RUNS=$OUT/runs
mkdir -p "$RUNS" "$OUT/logs"
log() { echo "$(date +%T) $*" | tee -a "$OUT/cost.log"; }
CORES=$(nproc)
cpu2() { local first=$(($1 % CORES)); shift; OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 taskset -c "$first-$(((first + 1) % CORES))" "$@"; }

log "machine: $(nproc) cores; $($PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")')"
log "data cache"
timeout 120 $PY -m routing_rl.data hybrid --no-download > "$OUT/logs/data.log" 2>&1 || log "data: failed, see logs/data.log"

log "1. latency profile (CPU, 2 threads, batch 64)"
cpu2 0 timeout 90 $PY experiments/profile_latency.py --arch chain --batch-size 64 --repeats 30 --device cpu \
  --out "$OUT/profile_cpu_b64.json" > "$OUT/logs/profile.log" 2>&1 || log "profile failed"

log "2. training ($PRESET) on the GPU, 8 runs in parallel"
core=0
for cost in macs latency; do
  for k in 2e-9 8e-9 1.6e-8 3.2e-8; do
    extra=()
    [ "$cost" = latency ] && extra=(--cost latency --latency-profile "$OUT/profile_cpu_b64.json")
    cpu2 $core timeout 200 $PY experiments/train_agent.py --agent actor --arch chain --preset "$PRESET" --k-cpt "$k" \
      --eval-every 1000 --device "$DEVICE" --download false --logdir "$RUNS" --run-name "actor-$cost-k$k" "${extra[@]}" \
      > "$OUT/logs/actor-$cost-k$k.log" 2>&1 &
    core=$((core + 2))
  done
done
wait
log "trained: $(ls "$RUNS"/*/metrics.json 2>/dev/null | wc -l) of 8"

log "3. latency report (CPU, cores 0-1) and 4. eager vs compiled on CUDA (cores 8-15)"
finished=$(for f in "$RUNS"/*/metrics.json; do [ -f "$f" ] && dirname "$f"; done)
[ -n "$finished" ] && cpu2 0 timeout 170 $PY experiments/latency_report.py $finished --batch-sizes 1 64 256 --examples 512 --repeats 3 \
  --device cpu --out "$OUT/latency" > "$OUT/logs/latency_report.log" 2>&1 &
report=$!
OMP_NUM_THREADS=8 taskset -c $((8 % CORES))-$((CORES - 1)) timeout 170 $PY benchmarks/bench_learners.py --only-accelerated --modes compiled bf16_autocast --device "$DEVICE" --repeats 100 \
  > "$OUT/compiled_cuda.json" 2> "$OUT/logs/compiled_cuda.log" || log "compiled on CUDA: failed or timed out"
wait $report || log "latency report: failed or timed out"
cat "$OUT/latency/latency.md" 2>/dev/null
cat "$OUT/compiled_cuda.json" 2>/dev/null
rm -f "$RUNS"/*/checkpoint.pt  # the nets are not needed back; metrics, cost.json and logs are
log "done"
