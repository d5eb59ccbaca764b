#!/usr/bin/env bash
# The one device run of this session: each helper branch's GPU script, run on a snapshot of
# that branch (.trees/NAME, installed to /tmp/pkg-NAME), in parallel, then quiet-machine timings.
set -uo pipefail
ROOT=$PWD
OUTROOT=${OUT:-$PWD/out}
QUICK=${QUICK:-}           # QUICK=1: smoke presets and short deadlines, for a local check
PRESET=cpu-small; [ -n "$QUICK" ] && PRESET=smoke
A_DEADLINE=${A_DEADLINE:-360}
export ROUTING_RL_DATA_DIR=$ROOT/.data/datasets ROUTING_RL_CACHE=/tmp/rrl-cache PYTHONUNBUFFERED=1
log() { echo "$(date +%T) [$SECONDS s] $*"; }
if [ -d .whl ] && ! python3 -c "import gymnasium, stable_baselines3" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  BASE=/tmp/site
fi
for t in .trees/*/; do
  name=$(basename "$t")
  python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/pkg-$name "$t" > /tmp/install-$name.log 2>&1 || { log "install $name failed"; tail -3 /tmp/install-$name.log; }
  # the source folders would shadow the installed package for `python -m` / `python -` run in the tree
  rm -rf "$t/routing_rl" "$t/envs" "$t/agents"
  mkdir -p "$OUTROOT/$name"
done
log "installed"
with() {  # with NAME command... : run inside .trees/NAME with that tree's package first on the path
  local name=$1; shift
  (cd "$ROOT/.trees/$name" && PYTHONPATH=/tmp/pkg-$name${BASE:+:$BASE} OUT=$OUTROOT/$name "$@")
}
with rl-critic python3 -m routing_rl.data hybrid > "$OUTROOT/data.log" 2>&1; log "data decoded"

# phase A: training, all at once (about 19 processes on 16 cores and one GPU)
with rl-critic env JOBS=7 OMP_NUM_THREADS=1 DEADLINE_S=$A_DEADLINE DEVICE=cuda LOGDIR=/tmp/rl-critic-runs bash gpu/rl-critic.sh $PRESET > "$OUTROOT/rl-critic/log.txt" 2>&1 &
with rl-env taskset -c 0-11 env OMP_NUM_THREADS=1 DEADLINE_S=$A_DEADLINE DEVICE=cuda LOGDIR=/tmp/rl-env-runs bash gpu/rl-env.sh $PRESET > "$OUTROOT/rl-env/log.txt" 2>&1 &
with video taskset -c 0-11 env OMP_NUM_THREADS=1 timeout $((A_DEADLINE + 20)) bash gpu/video.sh > "$OUTROOT/video/log.txt" 2>&1 &
with ddp taskset -c 0-11 env DEVICE=cuda timeout $A_DEADLINE bash gpu/ddp.sh > "$OUTROOT/ddp/log.txt" 2>&1 &
wait
log "phase A done"
pack() { (cd "$OUTROOT" && for d in "$@"; do [ -d "$d" ] && tar czf "$d.tgz" --exclude='*.pt' --exclude='*.zip' --exclude='events.out*' "$d" && rm -rf "$d"; done); }
pack rl-critic rl-env video ddp

# phase B: timings on a quiet machine
with perf timeout 70 bash gpu/perf.sh > "$OUTROOT/perf/log.txt" 2>&1; log "perf done"
with cost env OMP_NUM_THREADS=8 timeout 60 python3 benchmarks/bench_learners.py --only-accelerated --modes compiled bf16_autocast --device cuda --repeats 100 > "$OUTROOT/cost/compiled_cuda.json" 2> "$OUTROOT/cost/compiled_cuda.log"; log "cost done"

pack perf cost
ls -la "$OUTROOT"
