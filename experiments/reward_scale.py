"""The reward's scale and tails on a routing env, for RL users (``docs/rl-benchmark.md``).

Runs the fixed policies ``random``, ``exit1`` (always the first exit) and ``deepest`` (always
on: the last exit) straight on ``gym.make(env_id, **env_kwargs)`` for ``--steps`` steps each,
every policy on its own fresh env, so that with joint training (``train=True``, the default)
each trains its own net on its own paths; then freezes the net the random policy trained
(``env.unwrapped.eval()``) and runs each policy on it for ``--steps`` more steps. Prints one
JSON record per (phase, policy): per-step reward quantiles, c_err quantiles at the leaves and
the mean episode return::

    python experiments/reward_scale.py routing_rl/HybridRouting-v0 --steps 20000
    python experiments/reward_scale.py routing_rl/HybridRouting-v0 --env-kwargs '{"max_error_cost": 5}'
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import routing_rl  # noqa: F401  (registers the ids)
from routing_rl.app.cli import _json_object, _non_negative_int, _Parser, _positive_int

QUANTILES = (0.0, 0.01, 0.5, 0.99, 1.0)
POLICIES = {
    "random": lambda env, rng: int(rng.choice(np.flatnonzero(env.unwrapped.action_masks()))),
    "exit1": lambda env, rng: 0,
    "deepest": lambda env, rng: int(np.flatnonzero(env.unwrapped.action_masks())[-1]),
}


def rollout(env: gym.Env, policy, steps: int, seed: int) -> dict:
    """``steps`` steps of ``policy`` (more if no episode has ended by then: the c_err and return
    statistics need one): the reward and c_err statistics, and the wall time."""
    rng = np.random.default_rng(seed)
    rewards, c_errs, returns, total = [], [], [], 0.0
    env.reset(seed=seed)
    start = time.perf_counter()
    while len(rewards) < steps or not returns:
        _, reward, terminated, _, info = env.step(policy(env, rng))
        rewards.append(reward)
        total += reward
        if terminated:
            c_errs.append(info["c_err"])
            returns.append(total)
            total = 0.0
            env.reset()
    return {
        "reward_quantiles": dict(zip(map(str, QUANTILES), np.quantile(rewards, QUANTILES).round(3).tolist())),
        "c_err_quantiles": dict(zip(map(str, QUANTILES), np.quantile(c_errs, QUANTILES).round(3).tolist())),
        "episodes": len(returns),
        "mean_return": round(float(np.mean(returns)), 4),
        "feature_updates": env.unwrapped.trainer.updates,
        "seconds": round(time.perf_counter() - start, 1),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reward_scale.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id")
    parser.add_argument("--steps", type=_positive_int, default=20_000,
                        help="steps per policy and phase, more if no episode has ended by then (default: 20000)")
    parser.add_argument("--seed", type=_non_negative_int, default=0)
    parser.add_argument("--env-kwargs", type=_json_object, default={}, help="JSON keywords for gym.make")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    trained = None
    for name, policy in POLICIES.items():
        env = gym.make(args.env_id, seed=args.seed, **args.env_kwargs)
        print(json.dumps({"phase": "train=True", "policy": name, **rollout(env, policy, args.steps, args.seed)}), flush=True)
        trained = trained or env
    trained.unwrapped.eval()
    for name, policy in POLICIES.items():
        record = rollout(trained, policy, args.steps, args.seed + 1)
        print(json.dumps({"phase": "train=False on random's net", "policy": name, **record}), flush=True)


if __name__ == "__main__":
    main()
