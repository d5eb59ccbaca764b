#!/usr/bin/env bash
# torchrun on the GPU machine (issue 13, "Beyond one machine"): the NCCL path starts, trains,
# resumes, and takes the same steps as a plain one-GPU run; gloo with 2 CPU processes too.
#
#   bash gpu/ddp.sh        (from the repo root; about 2 minutes; results in $OUT/ddp/)
#
# Only one GPU exists there, so NCCL runs with --nproc_per_node=1 (two processes cannot share
# one GPU under NCCL); the 2-process run uses gloo on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/ddp"
if [ -d .whl ] && ! python3 -c "import gymnasium, stable_baselines3, tensorboard" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! python3 -P -c "import routing_rl.agents" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/routing-rl . || exit 1
  export PYTHONPATH=/tmp/routing-rl${PYTHONPATH:+:$PYTHONPATH}
fi
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets} ROUTING_RL_CACHE=${ROUTING_RL_CACHE:-/tmp/rrl-cache}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
LOGDIR=/tmp/ddp-runs
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu checks this script where there is no GPU (gloo throughout)
rm -rf "$LOGDIR"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/ddp/gpu.txt"

SMOKE=(--preset smoke --logdir "$LOGDIR")
run() {  # run NAME PROCESSES(0 = no torchrun) ARGS...: a smoke run in $LOGDIR/NAME (ARGS alone with --resume)
  local name=$1 processes=$2; shift 2
  local s=$SECONDS
  local args=("$@")
  [ "$1" = --resume ] || args=("${SMOKE[@]}" --run-name "$name" "$@")
  if [ "$processes" = 0 ]; then
    python3 -P experiments/train_agent.py "${args[@]}" > "$OUT/ddp/$name.log" 2>&1
  else
    python3 -P -m torch.distributed.run --standalone --nproc_per_node="$processes" \
      experiments/train_agent.py "${args[@]}" > "$OUT/ddp/$name.log" 2>&1
  fi
  echo "$name rc=$? $((SECONDS - s)) s" | tee -a "$OUT/ddp/summary.txt"
}

# the same 3 steps: plain one-GPU run, then NCCL with one process
run actor-plain 0 --agent actor --device "$DEVICE" --iterations 3 --eval-every 3
run actor-nccl 1 --agent actor --device "$DEVICE" --iterations 3 --eval-every 3
# routed sampled critic: route(global_counts=) all-reduces int64 counts over NCCL
run critic-nccl 1 --agent critic --policy eps-greedy --device "$DEVICE"
run critic-tree-nccl 1 --agent optimistic-critic --arch tree --policy eps-greedy --device "$DEVICE"
run static-nccl 1 --agent static --arch static-3 --device "$DEVICE"
run threshold-nccl 1 --agent threshold --device "$DEVICE"
# resume under torchrun: the same critic killed at iteration 13 (after the checkpoint at 10), then resumed
cat > /tmp/kill_at.py <<'EOF'
import os, sys
from routing_rl.agents.critic import CriticLearner
from routing_rl.app.cli import main
kill_at, step = int(sys.argv[1]), CriticLearner.train_step
def killed(self, batch, iteration):
    if iteration == kill_at:
        os._exit(9)  # as under SIGKILL: nothing is saved
    return step(self, batch, iteration)
CriticLearner.train_step = killed
sys.exit(main(sys.argv[2:]))
EOF
s=$SECONDS
python3 -P -m torch.distributed.run --standalone --nproc_per_node=1 /tmp/kill_at.py 13 "${SMOKE[@]}" \
  --agent critic --policy eps-greedy --device "$DEVICE" --run-name critic-nccl-resumed > "$OUT/ddp/critic-nccl-killed.log" 2>&1
echo "critic-nccl-killed rc=$? (non-zero expected) $((SECONDS - s)) s" | tee -a "$OUT/ddp/summary.txt"
run critic-nccl-resume 1 --resume "$LOGDIR/critic-nccl-resumed"
# speed of one step, plain vs torchrun with one process (the synchronisation's overhead)
TIMED=(--preset quick --iterations 200 --eval-every 200 --checkpoint-every 200 --eval-examples 500 --device "$DEVICE")
run actor-plain-timed 0 --agent actor "${TIMED[@]}"
run actor-nccl-timed 1 --agent actor "${TIMED[@]}"
run critic-plain-timed 0 --agent critic --policy eps-greedy "${TIMED[@]}"
run critic-nccl-timed 1 --agent critic --policy eps-greedy "${TIMED[@]}"
# gloo: two CPU processes, and the SB3 refusal
run actor-gloo2 2 --agent actor --device cpu
run ppo-refused 2 --agent ppo --device cpu

python3 - "$LOGDIR" <<'EOF' | tee -a "$OUT/ddp/summary.txt"
import glob, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
logdir = sys.argv[1]

def scalars(run):
    found = {}
    for path in sorted(glob.glob(f"{logdir}/{run}/events*")):
        events = EventAccumulator(path)
        events.Reload()
        for tag in events.Tags()["scalars"]:
            found[tag] = {s.step: s.value for s in events.Scalars(tag)}
    return found

a, b = scalars("actor-plain"), scalars("actor-nccl")
for tag in sorted(t for t in a if t.startswith("losses/") or t.startswith("charts/train")):
    x, y = a[tag][3], b[tag][3]
    print(f"{tag} at step 3: plain {x:.7g} torchrun {y:.7g} relative difference {abs(x - y) / max(abs(x), 1e-12):.2e}")
for learner in ("actor", "critic"):
    speeds = []
    for how in ("plain", "nccl"):
        rates = sorted(scalars(f"{learner}-{how}-timed").get("charts/examples_per_second", {}).values())[1:]
        speeds.append(rates[len(rates) // 2] if rates else float("nan"))
    print(f"{learner} examples/s (median of logging windows after the first), plain {speeds[0]:.0f}, "
          f"torchrun 1 process {speeds[1]:.0f}, ratio {speeds[1] / speeds[0]:.3f}")
for run in ("actor-plain", "actor-nccl", "critic-nccl", "critic-tree-nccl", "static-nccl", "threshold-nccl",
            "critic-nccl-resumed", "actor-gloo2"):
    try:
        metrics = json.load(open(f"{logdir}/{run}/metrics.json"))
        print(run, "test accuracy", metrics["test_accuracy"], "mean MACs", metrics["test_mean_macs"])
    except OSError as error:
        print(run, "no metrics:", error)
original, resumed = (json.load(open(f"{logdir}/{r}/metrics.json")) for r in ("critic-nccl", "critic-nccl-resumed"))
print("killed and resumed critic equals the uninterrupted one:",
      original["test"] == resumed["test"] and original["history"] == resumed["history"])
EOF
grep -h "train_agent.py: error" "$OUT/ddp/ppo-refused.log" | head -n 2 >> "$OUT/ddp/summary.txt"
tar czf "$OUT/ddp/runs.tgz" -C /tmp ddp-runs
cat "$OUT/ddp/summary.txt"
