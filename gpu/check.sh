# Early device check: environment works; timings to size the later runs.
cd "$(dirname "$0")/.."
source gpu/setup.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -P -c "import torch, gymnasium, stable_baselines3, routing_rl; print(torch.__version__, gymnasium.__version__, stable_baselines3.__version__, routing_rl.__file__, torch.cuda.is_available(), torch.get_num_threads())" || exit 1
s=$SECONDS; python3 -P -m routing_rl.data hybrid --json > $OUT/hybrid.json; echo "data $((SECONDS-s)) s"
run() { cpus=$1; name=$2; shift 2; s=$SECONDS; OMP_NUM_THREADS=2 taskset -c $cpus python3 experiments/train_agent.py --logdir /tmp/runs --run-name $name --preset cpu-small --iterations 400 --eval-every 400 --checkpoint-every 400 "$@" > /tmp/$name.log 2>&1; echo "$name rc=$? $((SECONDS-s)) s: $(tail -c 300 /tmp/$name.log | tr '\n' ' ')"; }
run 0,1 static8-cuda --agent static --arch static-8 --lr 0.02 --device cuda
run 0,1 actor-cuda --agent actor --device cuda
run 0,1 critic-cuda --agent critic --policy eps-greedy --device cuda
run 2,3 actor-cpu2 --agent actor --device cpu --iterations 100 &
run 4,5 actor-cuda-par --agent actor --device cuda &
run 6,7 static8-cuda-par --agent static --arch static-8 --lr 0.02 --device cuda &
run 8,9 critic-cuda-par --agent critic --policy eps-greedy --device cuda &
wait
tar czf $OUT/check.tgz -C /tmp runs; ls -la $OUT
