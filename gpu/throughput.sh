#!/usr/bin/env bash
# Issue 23 on one CUDA GPU, in at most 9.5 minutes, results in $OUT:
#   1. the reproduction sweep's throughput: the hybrid figure's 15 runs (one seed, the
#      reproduction's 600-iteration schedule) at 1, 8 and 4 runs per GPU; at 1, where the
#      grid takes longest, a time window, and the runs finished in it are counted;
#   2. the CUDA-only tests and a DQN smoke run on CUDA;
#   3. the CUDA-graph step (torch.compile mode="reduce-overhead") against eager.
# Needs gymnasium and stable-baselines3 (pure Python) in .site/ and the offline datasets in
# .data/datasets/ (both carried). DEVICE=cpu ITERATIONS=4 WINDOW=20 checks the plumbing.
set -uo pipefail
cd "$(dirname "$0")/.."
ITERATIONS=${ITERATIONS:-600}
WINDOW=${WINDOW:-90}
source gpu/env.sh
LOGS=/tmp/logs
mkdir -p "$LOGS"
trap 'tar czf "$OUT/logs.tar.gz" -C /tmp logs' EXIT  # $OUT takes 8 files: the logs travel as one
log() { echo "$(date +%T) $*" | tee -a "$OUT/throughput.log"; }
log "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); $(nproc) cores"
python3 -P -c "import torch, gymnasium, stable_baselines3, routing_rl.agents; print(torch.__version__, torch.cuda.is_available())" 2>&1 | tee -a "$OUT/throughput.log" || exit 1
timeout 120 python3 -P -m routing_rl.data hybrid --no-download > "$LOGS/data.log" 2>&1 || log "data: rc $?"

source gpu/grid.sh

log "1. throughput"
grid eager1 1 "$WINDOW"
grid eager8 8 170
grid eager4 4 190

log "2. CUDA tests and a DQN run"
timeout 45 python3 -P -m pytest -q -p no:cacheprovider tests/test_data_augment.py > "$LOGS/tests.log" 2>&1 || log "tests: rc $?"
tail -n 2 "$LOGS/tests.log" | tee -a "$OUT/throughput.log"
timeout 45 python3 -P experiments/train_agent.py --agent dqn --preset smoke --device "$DEVICE" --download false \
  --logdir /tmp/dqn > "$LOGS/dqn.log" 2>&1 || log "dqn: rc $?"
tail -n 4 "$LOGS/dqn.log" | tee -a "$OUT/throughput.log"

log "3. CUDA graphs"
timeout 75 python3 benchmarks/bench_learners.py --only-accelerated --device "$DEVICE" --modes cuda_graphs \
  --repeats 20 > "$OUT/graphs.json" 2> "$LOGS/graphs.err" || log "graphs: rc $?"
cat "$OUT/graphs.json" | tee -a "$OUT/throughput.log"
log "done"
