#!/usr/bin/env bash
# Issue 13 on a CUDA machine (run from the repo root; about 5 minutes): the safety tests with
# --device auto (= CUDA), the kill-and-resume tests, and the refusals that depend on the
# device (memory estimate from free CUDA memory, the NaN guard) on the real hybrid data.
# Everything lands in $OUT: device.txt, pytest.txt, cli.txt (exactly what the user sees).
set -uo pipefail
export ROUTING_RL_DATA_DIR=$PWD/.data/datasets ROUTING_RL_CACHE=$OUT/cache OMP_NUM_THREADS=1
mkdir -p "$OUT"
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" > "$OUT/device.txt" 2>&1
timeout 240 python3 -m pytest tests/test_safety_units.py tests/test_safety_runs.py -q -p no:cacheprovider \
  > "$OUT/pytest.txt" 2>&1
echo "pytest exit status $?" >> "$OUT/pytest.txt"
train="python3 experiments/train_agent.py --preset smoke --device cuda --logdir $OUT/runs"
for case in "--width 10000" "--batch-size 100000000" "--agent static --arch static-2 --lr 1e6 --iterations 60" \
            "--agent actor --lr 1e6 --iterations 60" "--agent critic --policy eps-greedy --lr 1e6 --iterations 60"; do
  echo "\$ train_agent.py $case" >> "$OUT/cli.txt"
  # shellcheck disable=SC2086
  timeout 90 $train $case --run-name "case$((n = ${n:-0} + 1))" >> "$OUT/cli.txt" 2>&1
  echo "exit status $?" >> "$OUT/cli.txt"
done
