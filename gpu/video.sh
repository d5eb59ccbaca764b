#!/usr/bin/env bash
# Issue 12, video routing: train the learned policies on routing_rl/VideoRouting-v0 (pragmatic
# critic with eps-greedy, actor, SB3 DQN, all through experiments/train_agent.py), compare them
# with the baselines on the same test clips (experiments/video_report.py) and time frames/s of
# the learned policy against always-deep (benchmarks/run.py --only video), on CUDA and CPU.
# Run from the repository root; results (small files) go to $OUT. About 5 minutes on one GPU.
set -euo pipefail
OUT=${OUT:-out}
export ROUTING_RL_DATA_DIR=${ROUTING_RL_DATA_DIR:-$PWD/.data/datasets}
export ROUTING_RL_CACHE=${ROUTING_RL_CACHE:-$PWD/.cache/routing-rl}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
$PY -c "import routing_rl, torch; print(routing_rl.__file__, torch.__version__, torch.cuda.is_available())"
$PY -m routing_rl.data hybrid > "$OUT/data.txt"  # decode once, before the runs start in parallel

COMMON=(--env routing_rl/VideoRouting-v0 --k-cpt 4e-9 --device cuda --download false --logdir "$OUT/runs" --overwrite
        --seed 0 --eval-every 1000 --checkpoint-every 1000)
$PY experiments/train_agent.py "${COMMON[@]}" --run-name critic --agent critic --policy eps-greedy --execution full \
    --iterations 4000 --batch-size 128 --lr 0.1 --lr-half-life 1500 --epsilon 1.0 --epsilon-half-life 400 \
    --k-ure 0.5 > "$OUT/critic.log" 2>&1 &
$PY experiments/train_agent.py "${COMMON[@]}" --run-name actor --agent actor \
    --iterations 4000 --batch-size 128 --lr 0.1 --lr-half-life 1500 --tau 1.0 --tau-half-life 1000 \
    > "$OUT/actor.log" 2>&1 &
$PY experiments/train_agent.py "${COMMON[@]}" --run-name dqn --agent dqn --iterations 300000 --eval-every 50000 \
    --checkpoint-every 100000 --lr-half-life 1500 > "$OUT/dqn.log" 2>&1 &
wait
tail -n 12 "$OUT"/critic.log "$OUT"/actor.log "$OUT"/dqn.log

$PY experiments/video_report.py "$OUT/runs/critic" "$OUT/runs/actor" "$OUT/runs/dqn" --out "$OUT/video" --device cuda
cat "$OUT/video/video.md"
ROUTING_RL_VIDEO_RUN="$OUT/runs/critic" $PY benchmarks/run.py --only video --device cuda --json "$OUT/bench_video_cuda.json"
ROUTING_RL_VIDEO_RUN="$OUT/runs/critic" OMP_NUM_THREADS=4 $PY benchmarks/run.py --only video --device cpu --json "$OUT/bench_video_cpu.json"
# keep what comes back small: drop the SB3 checkpoints and replay-free zips but the final model
rm -rf "$OUT"/runs/*/checkpoints
du -sh "$OUT"
