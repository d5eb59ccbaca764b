#!/usr/bin/env bash
# Where a training step's time goes on one CUDA GPU (issue 14, item 4), in at most 4 minutes:
# benchmarks/profile_step.py eager, eager with cudnn.benchmark, and --compile, for static-8 and
# the actor chain. Needs gymnasium and stable-baselines3 in .site/ (carried), as gpu/cuda.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/rrl-site . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/rrl-site:$PWD/.site PYTHONUNBUFFERED=1
timeout 60 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 > "$OUT/profile_eager.txt" 2>&1 || echo "eager: rc $?"
timeout 60 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 --cudnn-benchmark > "$OUT/profile_cudnn_benchmark.txt" 2>&1 || echo "cudnn.benchmark: rc $?"
timeout 110 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 --compile > "$OUT/profile_compiled.txt" 2>&1 || echo "compiled: rc $?"
for f in "$OUT"/profile_*.txt; do echo "== $f"; grep -E '"(static8|actor_chain)"|step_seconds|aten_calls|device_seconds' "$f"; done
