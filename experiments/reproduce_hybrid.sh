#!/usr/bin/env bash
# The reproduction table of issue 4: static nets 1..8, actor chains at three k_cpt, a
# dynamic-k_cpt actor, pragmatic and optimistic critics, and the confidence-threshold
# baseline, all on hybrid with one preset and seed; then figures/<logdir>/report.md.
#
#   bash experiments/reproduce_hybrid.sh [LOGDIR] [PRESET]      (defaults: runs/repro cpu-small)
#
# The static nets' learning rate is chosen on the validation split (static-8 trained for
# LRSEL_ITERATIONS, default 400, at each candidate; routing_rl.app.sweep.select_static_lr),
# never on the test split. Finished runs are skipped and interrupted ones resumed, so the
# script can be rerun after a stop.
set -euo pipefail
LOGDIR=${1:-runs/repro}
PRESET=${2:-cpu-small}
LRSEL_ITERATIONS=${LRSEL_ITERATIONS:-400}
TRAIN=(python experiments/train_agent.py --preset "$PRESET" --seed 0 --logdir "$LOGDIR" --eval-every 500)

run() {
  local name=$1; shift
  if [ -f "$LOGDIR/$name/metrics.json" ]; then echo "done already: $name"; return; fi
  local command=("${TRAIN[@]}" --run-name "$name" "$@")
  if [ -f "$LOGDIR/$name/checkpoint.pt" ]; then command=(python experiments/train_agent.py --resume "$LOGDIR/$name"); fi
  echo "$(date +%T) training $name"
  "${command[@]}" > "$LOGDIR/$name.log" 2>&1 || { echo "$name failed, see $LOGDIR/$name.log"; exit 1; }
}
mkdir -p "$LOGDIR"

LR=$(python experiments/sweep.py --select-static-lr --lr-iterations "$LRSEL_ITERATIONS" --preset "$PRESET" \
  --seeds 0 --logdir "$LOGDIR")
echo "static learning rate chosen on validation: $LR"

run actor-k4e-9 --agent actor --k-cpt 4e-9
for n in 8 1 2 3; do run "static-$n" --agent static --arch "static-$n" --lr "$LR"; done
run actor-k1.6e-8 --agent actor --k-cpt 1.6e-8
run actor-k0 --agent actor --k-cpt 0
for n in 4 5 6 7; do run "static-$n" --agent static --arch "static-$n" --lr "$LR"; done
run actor-dynamic --agent actor --k-cpt dynamic
run critic-k4e-9 --agent critic --policy eps-greedy --k-cpt 4e-9
run optimistic-critic-k4e-9 --agent optimistic-critic --policy eps-greedy --k-cpt 4e-9
run threshold --agent threshold

python experiments/figures.py $(ls -d "$LOGDIR"/*/ | grep -v /lrsel-) --out "figures/$(basename "$LOGDIR")" --title "hybrid, $PRESET"
cat "figures/$(basename "$LOGDIR")/report.md"
