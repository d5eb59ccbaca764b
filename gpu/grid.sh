# Sourced by the GPU scripts: grid NAME RUNS_PER_GPU SECONDS [FIELD=VALUE...] trains the hybrid
# figure's 15 runs (one seed, $ITERATIONS iterations) at RUNS_PER_GPU runs per GPU for at most
# SECONDS, the FIELD=VALUE pairs added to every run's config (--set), and appends the runs finished, the
# wall time, the runs per hour, each run's training seconds and the GPU's busy share to
# $OUT/throughput.jsonl. Needs $ITERATIONS, $DEVICE, $OUT and $LOGS.
grid() {
  local name=$1 rpg=$2 limit=$3 start end
  shift 3
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 2 > "/tmp/smi-$name.csv" 2>/dev/null &
  local smi=$!
  start=$(date +%s.%N)
  timeout "$limit" python3 -P experiments/reproduce_paper.py --figure hybrid --seeds 5 --preset quick \
    --iterations "$ITERATIONS" --set lr_half_life=200 tau_half_life=100 epsilon_half_life=75 eval_every=200 \
    checkpoint_every=200 "$@" --k-cpts 0 4e-9 1.6e-8 --static 1 2 3 5 8 --widths 1 --static-lr 0.1 --device "$DEVICE" \
    --runs-per-gpu "$rpg" --workers "$rpg" --logdir "/tmp/grid-$name" --figures-dir "/tmp/fig-$name" \
    --report "/tmp/report-$name.md" > "$LOGS/grid-$name.log" 2>&1
  local rc=$?
  end=$(date +%s.%N)
  kill $smi 2>/dev/null
  python3 - "$name" "$rpg" "$start" "$end" "$rc" "$OUT" <<'EOF' | tee -a "$OUT/throughput.log"
import json, pathlib, statistics, sys
name, rpg, start, end, rc = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
runs = {}
for path in sorted(pathlib.Path(f"/tmp/grid-{name}").glob("*/*/metrics.json")):
    metrics = json.loads(path.read_text())
    test = metrics["test"][0] if isinstance(metrics["test"], list) else metrics["test"]
    runs[path.parent.name] = dict(train_seconds=metrics["train_seconds"], accuracy=test["accuracy"])
wall = end - start
busy = [int(line.split(",")[0].split()[0]) for line in open(f"/tmp/smi-{name}.csv") if line.strip()[:1].isdigit()]
row = dict(grid=name, runs_per_gpu=rpg, finished=len(runs), wall_seconds=round(wall, 1), rc=rc,
           runs_per_hour=round(len(runs) * 3600 / wall, 1),
           mean_train_seconds=round(statistics.mean(r["train_seconds"] for r in runs.values()), 1) if runs else None,
           gpu_utilization_percent=round(statistics.mean(busy), 1) if busy else None, runs=runs)
with open(f"{sys.argv[6]}/throughput.jsonl", "a") as out:
    out.write(json.dumps(row) + "\n")
print(json.dumps({k: v for k, v in row.items() if k != "runs"}))
EOF
}
