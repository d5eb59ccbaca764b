# Sourced by gpu/cuda.sh and gpu/profile.sh on the GPU machine: installs this tree (no
# dependencies: the image has torch) into /tmp/rrl-site, puts the carried pure-Python
# gymnasium and stable-baselines3 of .site/ beside it, and points data at the carried .data/.
OUT=${OUT:-$PWD/out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/rrl-site . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/rrl-site:$PWD/.site PYTHONUNBUFFERED=1
export ROUTING_RL_DATA_DIR=$PWD/.data/datasets ROUTING_RL_CACHE=/tmp/rrl-cache
