# Source me on the GPU machine: installs the carried wheels and this tree, points data at .data.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/site . || exit 1
export ROUTING_RL_DATA_DIR=$PWD/.data/datasets ROUTING_RL_CACHE=/tmp/rrl-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT"
