"""Off-the-shelf SB3 on ``gym.make``, with the RL Zoo hyperparameters in ``hyperparams/``,
against the constant policies (``docs/rl-benchmark.md``).

For each algorithm and seed: ``gym.make(env_id, seed=seed, **env_kwargs)`` (joint training
on, as registered), the SB3 (or sb3-contrib) algorithm built from ``hyperparams/<algo>.yml``
and trained for its ``n_timesteps``; then the net that training left is frozen and the
agent's deterministic policy, "always exit 1" (action 0) and "always the deepest exit" (the
last valid action) each route the same ``--episodes`` episodes of the test split
(``train=False``, same reset seed). One JSON record per run on stdout: mean episode reward,
accuracy and mean MACs per policy, and the wall time; the progress of the training (in
environment steps) and then of the test episodes on stderr, as training runs show theirs (a
bar on a terminal, else a line every ``$ROUTING_RL_PROGRESS_SECONDS``)::

    python experiments/rl_benchmark.py --algos dqn ppo --seeds 0 1 2
    python experiments/rl_benchmark.py --algos dqn --n-timesteps 5000  # a smaller budget
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

import routing_rl  # noqa: F401  (registers the ids)
from routing_rl.app.cli import _int_at_least, _Parser, _positive_int
from routing_rl.agents.sb3 import SB3_MAX_SEED
from routing_rl.training.monitor import Progress

HYPERPARAMS = Path(__file__).resolve().parents[1] / "hyperparams"
ZOO_ONLY = ("n_timesteps", "n_envs", "policy", "env_kwargs", "env_wrapper", "normalize", "frame_stack", "callback")
"""Keys of a Zoo entry that are not the algorithm's constructor keywords (those used here are honoured)."""

Policy = Callable[[np.ndarray, gym.Env], int]


def algorithm(algo: str):
    """The SB3 (dqn, ppo, a2c) or sb3-contrib (qrdqn) class of ``algo``."""
    if algo == "qrdqn":
        from sb3_contrib import QRDQN
        return QRDQN
    import stable_baselines3
    return getattr(stable_baselines3, algo.upper())


def hyperparams(algo: str, env_id: str, folder: Path = HYPERPARAMS) -> dict:
    """The Zoo entry of ``env_id`` in ``folder/<algo>.yml``, its ``policy_kwargs`` string
    evaluated as the Zoo does. Only plain values (no schedules, wrappers or normalisation)."""
    import yaml  # the zoo extra's
    entry = dict(yaml.safe_load((folder / f"{algo}.yml").read_text())[env_id])
    unsupported = sorted(set(entry) & {"env_wrapper", "normalize", "frame_stack", "callback"})
    if unsupported or entry.get("n_envs", 1) != 1:
        raise ValueError(f"{algo}.yml's {env_id} uses {unsupported or 'n_envs > 1'}, which this script does not apply")
    if isinstance(entry.get("policy_kwargs"), str):
        entry["policy_kwargs"] = eval(entry["policy_kwargs"])  # the Zoo's format: "dict(net_arch=[...])"
    return entry


def run_policy(env: gym.Env, policy: Policy, episodes: int, seed: int, progress: Progress | None = None) -> dict:
    """``episodes`` episodes of ``policy`` from ``env.reset(seed=seed)``: mean episode reward,
    accuracy and mean MACs. Every policy given the same seed routes the same inputs.
    ``progress`` counts the episodes."""
    returns, correct, macs = [], [], []
    observation, _ = env.reset(seed=seed)
    total = 0.0
    while len(returns) < episodes:
        observation, reward, terminated, _, info = env.step(policy(observation, env))
        total += reward
        if terminated:
            returns.append(total)
            correct.append(info["correct"])
            macs.append(info["macs"])
            total = 0.0
            if progress is not None:
                progress.update(1, 1)
            observation, _ = env.reset()
    return {"mean_reward": float(np.mean(returns)), "accuracy": float(np.mean(correct)), "macs": float(np.mean(macs))}


def constant_policies(every_exit: bool = False) -> dict[str, Policy]:
    """"Always exit 1" and "always the deepest exit" (the last valid sink at every junction);
    with ``every_exit``, on the chain, also "always exit k" for the exits between."""
    policies = {"exit1": lambda observation, env: 0}
    if every_exit:
        for k in range(2, 8):  # the chain's junction col<k> has sinks (exit<k>, col<k+1>)
            policies[f"exit{k}"] = lambda observation, env, at=f"col{k}": int(at not in env.unwrapped.traffic.waiting)
    policies["deepest"] = lambda observation, env: int(np.flatnonzero(env.unwrapped.action_masks())[-1])
    return policies


class StepProgress(BaseCallback):
    """Steps ``progress`` by the environment steps the algorithm took; each finished episode is
    one image routed."""

    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def _on_step(self) -> bool:
        self.progress.update(self.model.num_timesteps - self.progress.iteration, int(np.sum(self.locals["dones"])))
        return True


def benchmark(algo: str, env_id: str, seed: int, episodes: int, n_timesteps: int | None = None,
              folder: Path = HYPERPARAMS, every_exit: bool = False) -> dict:
    """Train ``algo`` on ``gym.make(env_id)`` with its Zoo hyperparameters, then judge it and
    the constant policies on the frozen net: one record."""
    entry = hyperparams(algo, env_id, folder)
    env_kwargs = entry.get("env_kwargs", {})
    budget = int(entry["n_timesteps"] if n_timesteps is None else n_timesteps)
    kwargs = {key: value for key, value in entry.items() if key not in ZOO_ONLY}
    start = time.perf_counter()
    env = gym.make(env_id, seed=seed, **env_kwargs)
    model = algorithm(algo)(entry.get("policy", "MlpPolicy"), env, seed=seed, **kwargs)
    progress = Progress(budget, description=f"{algo} seed {seed}", unit="step")
    try:
        model.learn(budget, callback=StepProgress(progress))
    finally:
        progress.close()
    trained = time.perf_counter() - start
    frozen = {key: value for key, value in env_kwargs.items() if key not in ("joint", "share", "split")}
    test = gym.make(env_id, split="test", train=False, net=env.unwrapped.net, **frozen)
    policies = {"agent": lambda observation, env: int(model.predict(observation, deterministic=True)[0]),
                **constant_policies(every_exit)}
    judging = Progress(episodes * len(policies), description=f"{algo} seed {seed} test", unit="episode")
    try:
        results = {name: run_policy(test, policy, episodes, seed + 1000, judging) for name, policy in policies.items()}
    finally:
        judging.close()
    return {"algo": algo, "env_id": env_id, "seed": seed, "n_timesteps": budget, "episodes": episodes,
            "feature_updates": env.unwrapped.trainer.updates, "train_seconds": round(trained, 1),
            **{name: {key: round(value, 4) for key, value in result.items()} for name, result in results.items()}}


def _seed(text: str) -> int:
    """A seed SB3 takes (NumPy's legacy generator keeps 32 bits)."""
    value = _int_at_least(0, f"an integer in 0 ... {SB3_MAX_SEED}")(text)
    if value > SB3_MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer in 0 ... {SB3_MAX_SEED}, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl_benchmark.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="routing_rl/HybridRouting-v0")
    parser.add_argument("--algos", nargs="+", default=["dqn", "ppo"], choices=["dqn", "qrdqn", "ppo", "a2c"])
    parser.add_argument("--seeds", nargs="+", type=_seed, default=[0])
    parser.add_argument("--episodes", type=_positive_int, default=2000, help="test episodes per policy")
    parser.add_argument("--n-timesteps", type=_positive_int, help="override the yml's budget")
    parser.add_argument("--every-exit", action="store_true", help="also judge 'always exit k' for every k (chain)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    for algo in args.algos:
        for seed in args.seeds:
            print(json.dumps(benchmark(algo, args.env, seed, args.episodes, args.n_timesteps,
                                       every_exit=args.every_exit)), flush=True)


if __name__ == "__main__":
    main()
