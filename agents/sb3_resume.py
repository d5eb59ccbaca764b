"""What an SB3 run needs, beyond its checkpoint zip, to continue bit for bit after a signal.

An SB3 zip holds the policy, its optimiser, the feature network, its trainer and SB3's
counters; it does not hold the run's moving parts. A run stopped by Ctrl-C or SIGTERM stops
before an environment step (:class:`~routing_rl.agents.sb3_callbacks.StopBetweenSteps`: the
previous step is stored and trained on, nothing drawn for the next) and saves them beside the
zip as ``<zip name>.state.pt`` (:func:`save_resume_state`, atomically, before the zip):

* the training env's episodes in flight (:meth:`Traffic.state_dict`) and its random
  generator, the feature trainer's episodes waiting for a full batch, VecMonitor's episode
  counters, the validation env's generator (each evaluation draws its episodes from it);
* SB3's last observation and episode starts, the replay buffer (DQN: ``buffer_size`` × two
  float32 observations of the descriptor's size) with the side exits still short of a buffer
  row, the rollout buffer (PPO, A2C: the steps of a rollout the signal cut short, which the
  resumed run completes), and ``EvalCallback``'s best mean reward;
* every random generator SB3 draws from: Python's, NumPy's global one (ε-greedy actions,
  replay sampling, PPO's minibatches), the action space's (random actions) and torch's.

``--resume`` loads the newest zip and, when its state file is there and was saved with it
(same ``num_timesteps``), restores all of it: the run goes on as if never stopped. A zip
without one (the periodic checkpoints, written in the middle of an environment step, or a
run killed with SIGKILL) resumes with an empty replay buffer and fresh episodes.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.vec_env import VecMonitor

from routing_rl.envs.traffic import SideExits
from routing_rl.training.checkpoint import (CheckpointError, load_checkpoint, random_states, restore_random_states,
                                            save_checkpoint)

SUFFIX = ".state.pt"


def state_path(zip_path: Path) -> Path:
    """Where the resume state of checkpoint ``zip_path`` goes."""
    zip_path = Path(zip_path)
    return zip_path.with_name(zip_path.stem + SUFFIX)


def _tensors(value):
    """numpy arrays → tensors (uint32, which torch cannot hold, as int64), in nested containers."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.astype(np.int64) if value.dtype == np.uint32 else value.copy())
    if isinstance(value, dict):
        return {key: _tensors(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_tensors(item) for item in value)
    return value


def _buffer_state(buffer) -> dict:
    arrays = {name: value for name, value in vars(buffer).items() if isinstance(value, np.ndarray)}
    return {"arrays": _tensors(arrays), "pos": buffer.pos, "full": buffer.full}


def _restore_buffer(buffer, state: dict):
    for name, value in state["arrays"].items():
        setattr(buffer, name, value.cpu().numpy().astype(getattr(buffer, name).dtype))
    buffer.pos, buffer.full = int(state["pos"]), bool(state["full"])
    return buffer


def save_resume_state(zip_path: Path, model: BaseAlgorithm, eval_env: VecMonitor, evaluation: EvalCallback) -> None:
    """Write ``model``'s run state beside the checkpoint ``zip_path`` (before the zip itself)."""
    env, monitor = model.env.unwrapped, model.env
    mt_name, keys, position, has_gauss, gauss = np.random.get_state()
    side_exits = getattr(model, "_side_exits", None)
    state = {
        "num_timesteps": model.num_timesteps,
        "traffic": env.traffic.state_dict(),
        "env_rng": env.rng.bit_generator.state,
        "eval_env_rng": eval_env.unwrapped.rng.bit_generator.state,
        "pending": env.trainer.pending_state(),
        "monitor": _tensors({"returns": monitor.episode_returns, "lengths": monitor.episode_lengths,
                             "count": monitor.episode_count}),
        "last_obs": _tensors(model._last_obs),
        "last_episode_starts": _tensors(model._last_episode_starts),
        "replay_buffer": _buffer_state(model.replay_buffer) if getattr(model, "replay_buffer", None) is not None else None,
        "rollout_buffer": _buffer_state(model.rollout_buffer) if getattr(model, "rollout_buffer", None) is not None else None,
        "side_exits": _tensors(vars(side_exits)) if side_exits is not None else None,
        "best_mean_reward": float(evaluation.best_mean_reward),
        "random": {"python": random.getstate(), "numpy": (mt_name, _tensors(keys), position, has_gauss, gauss),
                   "action_space": model.action_space.np_random.bit_generator.state, "torch": random_states()},
    }
    save_checkpoint(state_path(zip_path), state)


def restore_resume_state(zip_path: Path, model: BaseAlgorithm, eval_env: VecMonitor, evaluation: EvalCallback) -> bool:
    """Restore what :func:`save_resume_state` wrote beside ``zip_path`` into ``model`` (loaded from
    that zip), its envs and ``evaluation``; False when there is no such state (nothing changed)."""
    path = state_path(zip_path)
    if not path.is_file():
        return False
    state = load_checkpoint(path, map_location=model.device)
    if state.get("num_timesteps") != model.num_timesteps:
        raise CheckpointError(f"{path} was not saved with {Path(zip_path).name} ({state.get('num_timesteps')} against "
                              f"{model.num_timesteps} environment steps); delete it to resume without it")
    env, monitor = model.env.unwrapped, model.env
    env.traffic.load_state_dict(state["traffic"])
    env.rng.bit_generator.state = state["env_rng"]
    eval_env.unwrapped.rng.bit_generator.state = state["eval_env_rng"]
    env.trainer.load_pending_state(state["pending"])
    monitor.episode_returns = state["monitor"]["returns"].numpy()
    monitor.episode_lengths = state["monitor"]["lengths"].numpy()
    monitor.episode_count = int(state["monitor"]["count"])
    model._last_obs = state["last_obs"].cpu().numpy()
    model._last_episode_starts = state["last_episode_starts"].cpu().numpy()
    if state["replay_buffer"] is not None:
        _restore_buffer(model.replay_buffer, state["replay_buffer"])
    if state.get("rollout_buffer") is not None:  # saved since PPO and A2C stop within a rollout
        buffer = _restore_buffer(model.rollout_buffer, state["rollout_buffer"])
        model.resumed_steps = 0 if buffer.full else buffer.pos
    if state["side_exits"] is not None:
        model._side_exits = SideExits(**{name: value.cpu().numpy() for name, value in state["side_exits"].items()})
    evaluation.best_mean_reward = state["best_mean_reward"]
    saved = state["random"]
    random.setstate(saved["python"])
    mt_name, keys, position, has_gauss, gauss = saved["numpy"]
    np.random.set_state((mt_name, keys.cpu().numpy().astype(np.uint32), position, has_gauss, gauss))
    model.action_space.np_random.bit_generator.state = saved["action_space"]
    restore_random_states(saved["torch"])
    return True
