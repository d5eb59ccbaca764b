"""A native Stable-Baselines3 ``VecEnv``: ``num_envs`` examples in flight, stepped as batches.

Each of the ``num_envs`` sub-environments is one slot of a
:class:`~routing_rl.envs.traffic.Traffic`: examples at the same node run through it as one
batch, so a step costs a few batched transforms, not ``num_envs`` forward passes. Episodes
auto-reset as SB3 expects: the observation returned for a finished slot is its next
episode's first, and ``infos[i]["terminal_observation"]`` holds the leaf's.

Every SB3 algorithm takes it directly; wrap it in ``VecMonitor`` for episode statistics::

    env = VecMonitor(RoutingVecEnv(256, dataset="hybrid", k_cpt=4e-9))
    # or from a registered id, with its keywords:
    env = VecMonitor(RoutingVecEnv.make("routing_rl/HybridRouting-v0", num_envs=256))

The sub-environments share one net, one dataset and one random generator, so
``get_attr`` / ``set_attr`` / ``env_method`` act on this object and answer the same for every
index. ``seed(s)`` (or the algorithm's ``seed=``) takes effect at the next ``reset()``.
Keywords and modes: :mod:`~routing_rl.envs.factory`, :mod:`~routing_rl.envs.routing_env`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from routing_rl.envs.factory import make_traffic
from routing_rl.envs.traffic import Finished, TrafficControls
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvStepReturn,
)


class RoutingVecEnv(TrafficControls, VecEnv):
    render_mode = None

    def __init__(self, num_envs: int, seed: int | None = None, **kwargs):
        self.traffic = make_traffic(num_envs, **kwargs)
        self.layout = self.traffic.layout
        self.rng = np.random.default_rng(seed)
        self._actions: np.ndarray | None = None
        super().__init__(num_envs, self.layout.observation_space, self.layout.action_space)

    @classmethod
    def make(cls, env_id: str, num_envs: int, seed: int | None = None, **kwargs) -> RoutingVecEnv:
        """The batched version of ``gym.make(env_id, **kwargs)`` for a ``routing_rl/`` id."""
        return cls(num_envs, seed=seed, **{**gym.spec(env_id).kwargs, **kwargs})

    def reset(self):
        seed = next((s for s in self._seeds if s is not None), None)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._reset_seeds()
        self._reset_options()
        self.traffic.reset(self.rng)
        self.reset_infos = self.traffic.infos(Finished.none())
        return self.traffic.observe()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        finished = self.traffic.move(self._actions)
        rewards = self.traffic.charge(finished)
        infos = self.traffic.infos(finished)
        for slot, terminal in zip(finished.slots.tolist(), self.layout.terminal(self.traffic.k_cpt[finished.slots])):
            infos[slot]["terminal_observation"] = terminal
        self.traffic.start(finished.slots, self.rng)
        dones = np.zeros(self.num_envs, dtype=bool)
        dones[finished.slots] = True
        return self.traffic.observe(), rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Nothing to release: the examples in flight live in this process's tensors."""

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list:
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value, indices: VecEnvIndices = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list:
        return [getattr(self, method_name)(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))
