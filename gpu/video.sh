#!/usr/bin/env bash
# Issue 12, video routing, on one GPU in about 7 minutes: train learned policies on
# routing_rl/VideoRouting-v0 through experiments/train_agent.py (the pragmatic critic with
# eps-greedy, with cross-entropy and with 0/1 utilities; the actor; SB3 DQN), compare each with
# the baselines on the same test clips and net (experiments/video_report.py: video.md, video.json,
# video.png), and time frames/s of the learned policy against always-deep (benchmarks/run.py
# --only video) on CUDA and on 4 CPU threads. Run from the repository root; small files go to $OUT.
set -euo pipefail
OUT=${OUT:-out}
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets}
export ROUTING_RL_CACHE=${ROUTING_RL_CACHE:-$PWD/.cache/routing-rl}
export PYTHONPATH=$PWD:${PYTHONPATH:-}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
start=$(date +%s)
$PY -c "import routing_rl, torch; print(routing_rl.__file__, torch.__version__, torch.cuda.is_available())"
$PY -m routing_rl.data hybrid > "$OUT/data.txt"  # decode once, before the runs start in parallel
echo "data ready after $(( $(date +%s) - start )) s"

COMMON=(--env routing_rl/VideoRouting-v0 --k-cpt 4e-9 --device cuda --download false --logdir "$OUT/runs" --overwrite
        --seed 0 --eval-every 1000 --checkpoint-every 1000 --batch-size 128 --lr 0.1 --lr-half-life 1500)
CRITIC=(--agent critic --policy eps-greedy --execution full --head-weight 0 --iterations 6000 --lr-half-life 3000 --epsilon 1.0 --epsilon-half-life 600 --k-ure 0.5)
timeout 300 $PY experiments/train_agent.py "${COMMON[@]}" "${CRITIC[@]}" --utility-error zero_one --run-name critic-01 > "$OUT/critic-01.log" 2>&1 &
timeout 300 $PY experiments/train_agent.py "${COMMON[@]}" "${CRITIC[@]}" --utility-error cross_entropy --run-name critic-ce > "$OUT/critic-ce.log" 2>&1 &
timeout 300 $PY experiments/train_agent.py "${COMMON[@]}" --agent actor --iterations 3000 --tau 1.0 --tau-half-life 3000 \
    --run-name actor > "$OUT/actor.log" 2>&1 &
timeout 300 $PY experiments/train_agent.py "${COMMON[@]}" --agent dqn --iterations 3000 --error-cost zero_one \
    --run-name dqn > "$OUT/dqn.log" 2>&1 &
wait
echo "training done after $(( $(date +%s) - start )) s"
tail -n 9 "$OUT"/*.log

RUNS=()
for run in critic-01 critic-ce actor dqn; do
    if [ -f "$OUT/runs/$run/metrics.json" ]; then RUNS+=("$OUT/runs/$run"); else echo "run $run did not finish"; fi
done
$PY experiments/video_report.py "${RUNS[@]}" --out "$OUT/video-ce" --device cuda
$PY experiments/video_report.py "${RUNS[@]}" --out "$OUT/video" --device cuda --error-cost zero_one
cat "$OUT/video-ce/video.md" "$OUT/video/video.md"
BEST=$($PY - "$OUT/video/video.json" <<'PYTHON'
import json, sys
summaries = json.load(open(sys.argv[1]))
best = min(summaries, key=lambda s: next(r["mean_cost"] for n, r in s["policies"].items() if n.startswith("learned")))
print(best["run"])
PYTHON
)
echo "benchmarking $BEST"
ROUTING_RL_VIDEO_RUN="$BEST" $PY benchmarks/run.py --only video --device cuda --json "$OUT/bench_video_cuda.json"
ROUTING_RL_VIDEO_RUN="$BEST" OMP_NUM_THREADS=4 $PY benchmarks/run.py --only video --device cpu --json "$OUT/bench_video_cpu.json"
rm -rf "$OUT"/runs/*/checkpoints  # SB3's intermediate zips; model.zip and checkpoint.pt stay
echo "all done after $(( $(date +%s) - start )) s"
du -sh "$OUT"
