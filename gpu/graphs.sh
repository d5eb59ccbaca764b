#!/usr/bin/env bash
# Issue 45 item 6 on one CUDA GPU, in at most 9 minutes, results in $OUT:
#   1. the CUDA tests of the faster steps (the CUDA-graph step equals the eager one);
#   2. the hybrid figure's 15 runs at 8 runs per GPU, eager and then with --cuda-graphs
#      (--set cuda_graphs=true), $ITERATIONS iterations each: per-run training seconds and
#      grid throughput side by side on the same machine (gpu/grid.sh).
# Needs gymnasium and stable-baselines3 (pure Python) in .site/ and the offline datasets in
# .data/datasets/ (both carried, as for gpu/throughput.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
ITERATIONS=${ITERATIONS:-1500}
source gpu/env.sh
LOGS=/tmp/logs
mkdir -p "$LOGS"
trap 'tar czf "$OUT/logs.tar.gz" -C /tmp logs' EXIT
log() { echo "$(date +%T) $*" | tee -a "$OUT/throughput.log"; }
log "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); $(nproc) cores"
python3 -P -c "import torch, gymnasium, stable_baselines3, routing_rl.agents; print(torch.__version__, torch.cuda.is_available())" 2>&1 | tee -a "$OUT/throughput.log" || exit 1
timeout 120 python3 -P -m routing_rl.data hybrid --no-download > "$LOGS/data.log" 2>&1 || log "data: rc $?"

log "1. CUDA tests"
timeout 120 python3 -P -m pytest -q -p no:cacheprovider -rs tests/test_acceleration.py > "$LOGS/tests.log" 2>&1 || log "tests: rc $?"
tail -n 4 "$LOGS/tests.log" | tee -a "$OUT/throughput.log"

log "2. the hybrid grid at 8 runs per GPU, eager then CUDA graphs"
source gpu/grid.sh
grid eager8 8 170
grid graphs8 8 230 cuda_graphs=true
log "done"
