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

grid() {  # grid RUNS_PER_GPU SECONDS: the hybrid figure's runs, the runs finished and the wall time
  local rpg=$1 limit=$2 start end
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 2 > "/tmp/smi$rpg.csv" 2>/dev/null &
  local smi=$!
  start=$(date +%s.%N)
  timeout "$limit" python3 -P experiments/reproduce_paper.py --figure hybrid --seeds 5 --preset quick \
    --iterations "$ITERATIONS" --set lr_half_life=200 tau_half_life=100 epsilon_half_life=75 eval_every=200 \
    checkpoint_every=200 --k-cpts 0 4e-9 1.6e-8 --static 1 2 3 5 8 --widths 1 --static-lr 0.1 --device "$DEVICE" \
    --runs-per-gpu "$rpg" --workers "$rpg" --logdir "/tmp/grid$rpg" --figures-dir "/tmp/fig$rpg" \
    --report "/tmp/report$rpg.md" > "$LOGS/grid$rpg.log" 2>&1
  local rc=$?
  end=$(date +%s.%N)
  kill $smi 2>/dev/null
  python3 - "$rpg" "$start" "$end" "$rc" "$OUT" <<'EOF' | tee -a "$OUT/throughput.log"
import json, pathlib, statistics, sys
rpg, start, end, rc = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
runs = {}
for path in sorted(pathlib.Path(f"/tmp/grid{rpg}").glob("*/*/metrics.json")):
    metrics = json.loads(path.read_text())
    test = metrics["test"][0] if isinstance(metrics["test"], list) else metrics["test"]
    runs[path.parent.name] = dict(train_seconds=metrics["train_seconds"], accuracy=test["accuracy"])
wall = end - start
busy = [int(line.split(",")[0].split()[0]) for line in open(f"/tmp/smi{rpg}.csv") if line.strip()[:1].isdigit()]
row = dict(runs_per_gpu=rpg, finished=len(runs), wall_seconds=round(wall, 1), rc=rc,
           runs_per_hour=round(len(runs) * 3600 / wall, 1),
           mean_train_seconds=round(statistics.mean(r["train_seconds"] for r in runs.values()), 1) if runs else None,
           gpu_utilization_percent=round(statistics.mean(busy), 1) if busy else None, runs=runs)
with open(f"{sys.argv[5]}/throughput.jsonl", "a") as out:
    out.write(json.dumps(row) + "\n")
print(json.dumps({k: v for k, v in row.items() if k != "runs"}))
EOF
}

log "1. throughput"
grid 1 "$WINDOW"
grid 8 170
grid 4 190

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
