#!/usr/bin/env bash
# The learners' runs of issue 10 on the GPU machine, many at once, in at most ~7 minutes.
#
#   bash gpu/rl-critic.sh [PRESET]        (default cpu-small; smoke for a local check)
#
# From the repo root. Data: $ROUTING_RL_DATA_DIR or .data/datasets. Packages python3 lacks
# there (gymnasium, stable-baselines3, tensorboard) are installed from .whl/ when it exists.
# Every run goes to $LOGDIR/<name>; at the end ONE tar of every metrics.json (and each
# run's log) is written to $OUT/rl-critic-metrics.tar. Runs still going at the deadline are
# stopped and left out of the tar (their logs say how far they got).
set -uo pipefail
PRESET=${1:-cpu-small}
QUICK=${PRESET/cpu-small/quick}  # the default preset's runs (smoke stays smoke)
OUT=${OUT:-$PWD/out}
LOGDIR=${LOGDIR:-/tmp/rl-critic-runs}
DEADLINE_S=${DEADLINE_S:-400}
JOBS=${JOBS:-16}
DEVICE=${DEVICE:-auto}
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets}
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" "$LOGDIR"
OUT=$(cd "$OUT" && pwd) LOGDIR=$(cd "$LOGDIR" && pwd)
started=$(date +%s)

if [ -d .whl ] && ! $PYTHON -c "import gymnasium, stable_baselines3, tensorboard" 2>/dev/null; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the package as pip lays it out (agents/ and envs/ inside routing_rl/), where it is not installed;
# helpers run from /tmp so that the repo's own routing_rl/ folder does not shadow it
if ! (cd /tmp && $PYTHON -c "import routing_rl.agents, routing_rl.envs") 2>/dev/null; then
  rm -rf /tmp/rl-critic-package && mkdir -p /tmp/rl-critic-package
  cp -r routing_rl /tmp/rl-critic-package/ && cp -r agents /tmp/rl-critic-package/routing_rl/agents \
    && cp -r envs /tmp/rl-critic-package/routing_rl/envs || exit 1
  export PYTHONPATH=/tmp/rl-critic-package${PYTHONPATH:+:$PYTHONPATH}
fi
(cd /tmp && $PYTHON -m routing_rl.data hybrid) > "$LOGDIR/data.log" 2>&1 || { cat "$LOGDIR/data.log"; exit 1; }  # decode once, cache for all runs

# name, then flags; in order of priority (the first JOBS start at once)
RUNS=(
  "pragmatic-critic-eps-k4e-9-s0     --agent pragmatic-critic --policy eps-greedy --k-cpt 4e-9 --seed 0"
  "pragmatic-critic-eps-k1.6e-8-s0   --agent pragmatic-critic --policy eps-greedy --k-cpt 1.6e-8 --seed 0"
  "optimistic-critic-eps-k4e-9-s0    --agent optimistic-critic --policy eps-greedy --k-cpt 4e-9 --seed 0"
  "pragmatic-critic-eps-k4e-9-s1     --agent pragmatic-critic --policy eps-greedy --k-cpt 4e-9 --seed 1"
  "pragmatic-critic-eps-k4e-9-s2     --agent pragmatic-critic --policy eps-greedy --k-cpt 4e-9 --seed 2"
  "actor-k4e-9-s0                    --agent actor --k-cpt 4e-9 --seed 0"
  "actor-k4e-9-s1                    --agent actor --k-cpt 4e-9 --seed 1"
  "actor-k4e-9-s2                    --agent actor --k-cpt 4e-9 --seed 2"
  "static-5-s0                       --agent static --arch static-5 --lr 0.02 --seed 0"
  "static-5-s1                       --agent static --arch static-5 --lr 0.02 --seed 1"
  "static-5-s2                       --agent static --arch static-5 --lr 0.02 --seed 2"
  "pragmatic-critic-softmax-full-k4e-9-s0   --agent pragmatic-critic --policy softmax --tau 0.1 --execution full --k-cpt 4e-9 --seed 0"
  "optimistic-critic-softmax-full-k4e-9-s0  --agent optimistic-critic --policy softmax --tau 0.1 --execution full --k-cpt 4e-9 --seed 0"
  "pragmatic-critic-softmax-full-01-k4e-9-s0 --agent pragmatic-critic --policy softmax --tau 0.1 --execution full --utility-error zero_one --k-cpt 4e-9 --seed 0"
  "threshold-lr0.02-s0               --agent threshold --lr 0.02 --seed 0"
  "threshold-lr0.05-s0               --agent threshold --lr 0.05 --seed 0"
  "threshold-lr0.01-s0               --agent threshold --lr 0.01 --seed 0"
  "threshold-lr0.1-s0                --agent threshold --lr 0.1 --seed 0"
  "pragmatic-critic-eps-nosides-k4e-9-s0 --agent pragmatic-critic --policy eps-greedy --side-heads false --k-cpt 4e-9 --seed 0"
  # the default preset (quick) and two variants of it, for the default commands' >= 90% target
  "quick-actor                       --preset $QUICK --agent actor"
  "quick-critic                      --preset $QUICK --agent critic --policy eps-greedy"
  "quick-lr1200-actor                --preset $QUICK --agent actor --lr-half-life 1200"
  "quick-lr1200-critic               --preset $QUICK --agent critic --policy eps-greedy --lr-half-life 1200"
  "quick-1600-actor                  --preset $QUICK --agent actor --iterations 1600 --lr-half-life 530 --tau-half-life 270"
  "quick-1600-critic                 --preset $QUICK --agent critic --policy eps-greedy --iterations 1600 --lr-half-life 530 --epsilon-half-life 200"
)

pin() { command -v taskset > /dev/null && echo "taskset -c $1"; }  # run on these cores, where taskset exists
export -f pin

# the two default commands of issue 10's deliverable 5, each on two CPU cores of its own
# (no GPU), timed: `python experiments/train_agent.py` and the headline critic command
default_run() {
  local name=$1 cores=$2; shift 2
  local started_run=$(date +%s)
  OMP_NUM_THREADS=2 timeout $(( DEADLINE_S - 10 )) $(pin "$cores") $PYTHON experiments/train_agent.py --device cpu \
    --logdir "$LOGDIR" --run-name "$name" --overwrite "$@" > "$LOGDIR/$name.log" 2>&1
  local status=$?
  echo "$(date +%T) $name exit $status in $(( $(date +%s) - started_run )) s wall on cores $cores"
}
if [ "$PRESET" = cpu-small ]; then
  default_run default-actor 12,13 &
  default_run default-critic 14,15 --agent=critic --policy=eps-greedy &
  GPU_CORES=0-11 JOBS=$(( JOBS > 12 ? 12 : JOBS ))
else
  GPU_CORES=0-$(( $(getconf _NPROCESSORS_ONLN) - 1 ))
fi

run_one() {
  local name=$1; shift
  local left=$(( DEADLINE_S - ($(date +%s) - started) ))
  [ "$left" -gt 20 ] || { echo "$name: no time left, not started" > "$LOGDIR/$name.log"; return; }
  timeout "$left" $(pin "$GPU_CORES") $PYTHON experiments/train_agent.py --preset "$PRESET" --device "$DEVICE" --logdir "$LOGDIR" \
    --run-name "$name" --overwrite "$@" > "$LOGDIR/$name.log" 2>&1
  local status=$?
  echo "$(date +%T) $name exit $status ($(grep -m1 -o 'test accuracy [^(]*' "$LOGDIR/$name.log"))"
}
export -f run_one
export PRESET DEVICE LOGDIR DEADLINE_S started PYTHON GPU_CORES
printf '%s\n' "${RUNS[@]}" | xargs -P "$JOBS" -L 1 bash -c 'run_one $@' _
wait  # the default runs
for name in default-actor default-critic; do [ -f "$LOGDIR/$name.log" ] && tail -n 22 "$LOGDIR/$name.log"; done

# one line per finished run: test and validation accuracy, MACs, margin over the README's
# static curve, and the mean MACs of the digits' and the CIFAR images' exits
(cd /tmp && $PYTHON - "$LOGDIR") <<'PY'
import glob, json, statistics, sys
from routing_rl.app.report import static_accuracy_at
from routing_rl.app.summary import STATIC_REFERENCE
curve = [(macs, acc) for _, acc, macs in STATIC_REFERENCE]
print(f"{'run':44s} {'test':>7s} {'val':>7s} {'MACs':>7s} {'margin':>7s} {'digits':>7s} {'CIFAR':>7s} {'s':>5s}")
for path in sorted(glob.glob(f"{sys.argv[1]}/*/metrics.json")):
    m = json.load(open(path))
    for e in m["test"]:
        at = static_accuracy_at(curve, e["mean_macs"])
        by = {s: sum(v["by_source"][s] * v["macs"] for v in e["leaves"].values()) / max(1, sum(v["by_source"][s] for v in e["leaves"].values())) for s in ("mnist", "cifar")}
        val = m["history"][-1]["evaluations"][0]["accuracy"] if m["history"] else float("nan")
        name = path.split("/")[-2] + (f"@{e['label']}" if e.get("label") else "")
        margin = f"{100 * (e['accuracy'] - at):+7.2f}" if at is not None else "      -"
        print(f"{name:44s} {100 * e['accuracy']:7.2f} {100 * val:7.2f} {e['mean_macs'] / 1e6:6.2f}M {margin} "
              f"{by['mnist'] / 1e6:6.2f}M {by['cifar'] / 1e6:6.2f}M {m['train_seconds']:5.0f}")
runs = {p.split("/")[-2]: json.load(open(p)) for p in glob.glob(f"{sys.argv[1]}/*/metrics.json")}
for group in ("actor-k4e-9", "pragmatic-critic-eps-k4e-9", "static-5"):
    seeds = [runs[f"{group}-s{s}"] for s in range(3) if f"{group}-s{s}" in runs]
    if len(seeds) >= 2:
        acc = [100 * r["test_accuracy"] for r in seeds]
        macs = [r["test_mean_macs"] / 1e6 for r in seeds]
        print(f"{group}: {len(seeds)} seeds, test accuracy {statistics.mean(acc):.2f} ± {statistics.stdev(acc):.2f}%, "
              f"{statistics.mean(macs):.2f} ± {statistics.stdev(macs):.2f}M MACs")
threshold = {n: r["history"][-1]["evaluations"][0]["accuracy"] for n, r in runs.items() if n.startswith("threshold-lr") and r["history"]}
if threshold:
    print(f"threshold: validation accuracy by lr {threshold}; chosen on validation: {max(threshold, key=threshold.get)}")
PY
cd "$LOGDIR" && tar -cf "$OUT/rl-critic-metrics.tar" $(ls -d */metrics.json 2>/dev/null) *.log
echo "$(ls -d */metrics.json 2>/dev/null | wc -l) of ${#RUNS[@]} runs finished in $(( $(date +%s) - started )) s; wrote $OUT/rl-critic-metrics.tar"
