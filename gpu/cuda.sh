#!/usr/bin/env bash
# Issue 14 on one CUDA GPU, in at most 9 minutes (an H100: 8), results in $OUT:
#   1. dynamic execution against perfect skipping per batch size (bench_execution, CUDA);
#   2. eager against --channels-last / --compile / bf16 autocast / CUDA graphs
#      (torch.compile mode="reduce-overhead") training steps of static-8 and the actor
#      chain, with the paper's 80,000 iterations at each step time;
#   3. real static-8 training runs on hybrid (paper preset shortened to $ITERATIONS
#      iterations, one evaluation at the end), eager and --compile, whose train_seconds
#      scale to 80,000;
#   4. the CUDA-only tests.
# Needs gymnasium and stable-baselines3 (pure Python) in .site/ and the offline datasets in
# .data/datasets/ (both git-ignored, carried). DEVICE=cpu ITERATIONS=20 checks the plumbing.
set -uo pipefail
cd "$(dirname "$0")/.."
ITERATIONS=${ITERATIONS:-2000}
source gpu/env.sh
log() { echo "$(date +%T) $*" | tee -a "$OUT/cuda.log"; }
CORES=$(nproc)
log "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); $CORES cores"
python3 -P -c "import torch, gymnasium, stable_baselines3, routing_rl.agents; print(torch.__version__, torch.cuda.is_available())" 2>&1 | tee -a "$OUT/cuda.log" || exit 1

# the hybrid cache is built on the spare cores while the benchmarks hold the GPU
taskset -c $((CORES / 2))-$((CORES - 1)) timeout 150 python3 -P -m routing_rl.data hybrid --no-download > "$OUT/data.log" 2>&1 &
data=$!

log "1. execution"
timeout 90 python3 benchmarks/bench_execution.py --device "$DEVICE" --repeats 7 > "$OUT/execution.json" 2> "$OUT/execution.err" || log "execution: rc $?"
log "2. accelerated steps"
timeout 210 python3 benchmarks/bench_learners.py --only-accelerated --device "$DEVICE" --repeats 30 > "$OUT/learners.json" 2> "$OUT/learners.err" || log "learners: rc $?"
wait $data || log "data: rc $?"

log "3. training runs ($ITERATIONS iterations)"
run() {  # run NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 experiments/train_agent.py --preset paper --iterations "$ITERATIONS" --eval-every "$ITERATIONS" \
    --checkpoint-every "$ITERATIONS" --device "$DEVICE" --download false --logdir /tmp/runs --run-name "$name" --json "$@" \
    > "/tmp/$name.log" 2>&1 || log "$name: rc $?"
}
for name in static8; do
  args=(--agent static --arch static-8 --lr 0.02)
  [ $name = actor ] && args=(--agent actor)
  run "$name-eager" 90 "${args[@]}"
  run "$name-compiled" 120 "${args[@]}" --compile true
done
for f in /tmp/runs/*/metrics.json; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); t=m['test'][0] if isinstance(m['test'],list) else m['test']; print(sys.argv[1].split('/')[3], 'train_seconds', round(m['train_seconds'],1), 'per_iteration_ms', round(1000*m['train_seconds']/$ITERATIONS,2), 'paper_80k_minutes', round(m['train_seconds']/$ITERATIONS*80000/60,2), 'test', round(t['accuracy'],4))" "$f"
done | tee "$OUT/runs.txt"
tail -n 5 /tmp/*-eager.log /tmp/*-compiled.log > "$OUT/runs.log" 2>&1

log "4. CUDA tests"
timeout 60 python3 -P -m pytest -q -p no:cacheprovider tests/test_data_augment.py > "$OUT/tests.log" 2>&1 || log "tests: rc $?"
tail -n 3 "$OUT/tests.log"
log "done"
