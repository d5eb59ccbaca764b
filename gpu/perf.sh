#!/usr/bin/env bash
# Issue 14, items 1-2 (helper "perf"): dynamic execution vs full evaluation vs perfect
# skipping per batch size (1, 8, 64, 256, 1024) and the batch-1 overhead, on CUDA and, on
# this quiet 16-core box, on the CPU (one intra-op thread, as on the shared 2-core machine).
# At most 3 minutes. Needs torch and routing_rl's imports (gymnasium, stable-baselines3
# wheels as for the other GPU scripts). Writes $OUT/perf_execution_{cuda,cpu}.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/perf_gpu_name.txt" || true
timeout 70 python3 benchmarks/bench_execution.py --device cuda --repeats 7 > "$OUT/perf_execution_cuda.json"
timeout 100 python3 benchmarks/bench_execution.py --device cpu --repeats 5 > "$OUT/perf_execution_cpu.json"
