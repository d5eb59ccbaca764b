#!/usr/bin/env bash
# Where a training step's time goes on one CUDA GPU (issue 14, item 4), in at most 4 minutes:
# benchmarks/profile_step.py eager, eager with cudnn.benchmark, and --compile, for static-8 and
# the actor chain. Needs gymnasium and stable-baselines3 in .site/ (carried; see gpu/env.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source gpu/env.sh
timeout 60 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 > "$OUT/profile_eager.txt" 2>&1 || echo "eager: rc $?"
timeout 60 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 --cudnn-benchmark > "$OUT/profile_cudnn_benchmark.txt" 2>&1 || echo "cudnn.benchmark: rc $?"
timeout 110 python3 benchmarks/profile_step.py --device "$DEVICE" --steps 50 --compile > "$OUT/profile_compiled.txt" 2>&1 || echo "compiled: rc $?"
for f in "$OUT"/profile_*.txt; do echo "== $f"; grep -E '"(static8|actor_chain)"|step_seconds|aten_calls|device_seconds' "$f"; done
