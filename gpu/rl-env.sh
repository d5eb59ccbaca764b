#!/usr/bin/env bash
# Issue 10 (helper "rl-env"): the SB3 agents on hybrid at k_cpt 4e-9 with the critic's image
# budget (preset cpu-small: 4,000 iterations x 128 images), at once on the GPU machine, with
# their defaults (usage-weighted full-tree joint training, DQN's side exits and 20,000-
# transition buffer): DQN seeds 0, 1, 2, PPO and A2C. Measured on the H200: eight DQN/A2C
# runs side by side (2 threads each) reached only 1,500-3,250 of the 4,000 iterations in
# 450 s, so five runs may not finish either; runs still going at DEADLINE_S (540 s after the
# start) are stopped, and only their validation histories come back.
#
#   bash gpu/rl-env.sh [PRESET]        (default cpu-small; smoke for a local check)
#
# From the repo root. Data: $ROUTING_RL_DATA_DIR or .data/datasets. Packages python3 lacks
# (gymnasium, stable-baselines3, tensorboard) are installed from .whl/ when it exists.
# Writes ONE tar of every run's metrics.json, validation history (sb3_history.json, kept
# also for a run stopped at the deadline) and log, and the summary, to
# $OUT/rl-env-metrics.tar, and the summary also to $OUT/rl-env-summary.txt.
set -uo pipefail
PRESET=${1:-cpu-small}
OUT=${OUT:-$PWD/out}
LOGDIR=${LOGDIR:-/tmp/rl-env-runs}
DEADLINE_S=${DEADLINE_S:-540}
DEVICE=${DEVICE:-auto}
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" "$LOGDIR"
started=$(date +%s)

if [ -d .whl ] && ! $PYTHON -c "import gymnasium, stable_baselines3, tensorboard" 2>/dev/null; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! $PYTHON -c "import routing_rl.agents.sb3" 2>/dev/null; then
  $PYTHON -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/routing-rl-env . || exit 1
  export PYTHONPATH=/tmp/routing-rl-env${PYTHONPATH:+:$PYTHONPATH}
fi
(cd /tmp && $PYTHON -m routing_rl.data hybrid) > "$LOGDIR/data.log" 2>&1 || { cat "$LOGDIR/data.log"; exit 1; }  # decode once for all runs

RUNS=(
  "dqn-k4e-9-s0  --agent dqn --seed 0"
  "dqn-k4e-9-s1  --agent dqn --seed 1"
  "dqn-k4e-9-s2  --agent dqn --seed 2"
  "ppo-k4e-9-s0  --agent ppo --seed 0"
  "a2c-k4e-9-s0  --agent a2c --seed 0"
)

run_one() {
  local name=$1; shift
  local left=$(( DEADLINE_S - ($(date +%s) - started) ))
  [ "$left" -gt 20 ] || { echo "$name: no time left, not started" > "$LOGDIR/$name.log"; return; }
  timeout "$left" $PYTHON experiments/train_agent.py --preset "$PRESET" --k-cpt 4e-9 --device "$DEVICE" \
    --logdir "$LOGDIR" --run-name "$name" --overwrite "$@" > "$LOGDIR/$name.log" 2>&1
  echo "$(date +%T) $name exit $?"
}
export -f run_one
export PRESET DEVICE LOGDIR DEADLINE_S started PYTHON
printf '%s\n' "${RUNS[@]}" | xargs -P "${#RUNS[@]}" -L 1 bash -c 'run_one $@' _

# one line per finished run: test accuracy, mean MACs, margin over the README's static curve
# (linear between neighbours), mean MACs of digits and CIFAR images, share at each exit
$PYTHON - "$LOGDIR" > "$LOGDIR/summary.txt" <<'PY'
import glob, json, sys
STATIC = [(1.36e6, .8782), (5.27e6, .9157), (7.56e6, .9362), (11.39e6, .9376), (13.46e6, .9483),
          (17.00e6, .9425), (18.19e6, .9420), (20.55e6, .9405)]  # static-1..8, README, cpu-small
def static_at(macs):
    for (m0, a0), (m1, a1) in zip(STATIC, STATIC[1:]):
        if m0 <= macs <= m1:
            return a0 + (a1 - a0) * (macs - m0) / (m1 - m0)
    return STATIC[-1][1] if macs > STATIC[-1][0] else None  # past static-8: static-8's accuracy
print(f"{'run':24s} {'test':>6s} {'MACs':>6s} {'margin':>6s} {'digits':>6s} {'CIFAR':>6s} {'s':>5s}  exits (%)")
for path in sorted(glob.glob(f"{sys.argv[1]}/*/metrics.json")):
    m = json.load(open(path))
    e = m["test"][0]
    at = static_at(e["mean_macs"])
    margin = f"{100 * (e['accuracy'] - at):+6.2f}" if at is not None else "     -"
    by = {}
    for source in ("mnist", "cifar"):
        n = sum(v["by_source"].get(source, 0) for v in e["leaves"].values())
        by[source] = sum(v["by_source"].get(source, 0) * v["macs"] for v in e["leaves"].values()) / max(n, 1)
    exits = " ".join(f"{100 * v['fraction']:.0f}" for v in e["leaves"].values())
    print(f"{path.split('/')[-2]:24s} {100 * e['accuracy']:6.2f} {e['mean_macs'] / 1e6:5.2f}M {margin} "
          f"{by['mnist'] / 1e6:5.2f}M {by['cifar'] / 1e6:5.2f}M {m['train_seconds']:5.0f}  {exits}")
PY
cat "$LOGDIR/summary.txt"
cp "$LOGDIR/summary.txt" "$OUT/rl-env-summary.txt"
cd "$LOGDIR" && tar -cf "$OUT/rl-env-metrics.tar" $(ls -d */metrics.json */sb3_history.json 2>/dev/null) *.log summary.txt
echo "$(ls -d */metrics.json 2>/dev/null | wc -l) of ${#RUNS[@]} runs finished in $(( $(date +%s) - started )) s; wrote $OUT/rl-env-metrics.tar"
