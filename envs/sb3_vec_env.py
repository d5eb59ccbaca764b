"""A native Stable-Baselines3 ``VecEnv``: ``num_envs`` episodes in flight, stepped as batches.

Every SB3 algorithm takes it directly; wrap it in ``VecMonitor`` for episode statistics::

    env = VecMonitor(RoutingSB3VecEnv(256, dataset="hybrid", k_cpt=4e-9))
    # or from a registered id, with its keywords:
    env = VecMonitor(RoutingSB3VecEnv.make("routing_rl/HybridRouting-v0", num_envs=256))

``RoutingVecEnv`` is the same class under its earlier name (the README used it).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from routing_rl.envs.factory import check_keywords, make_traffic
from routing_rl.envs.routing_env import RoutingEnv
from routing_rl.envs.task import env_spec
from routing_rl.envs.traffic import Finished, Traffic, TrafficControls
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvStepReturn,
)


class RoutingSB3VecEnv(TrafficControls, VecEnv):
    """:class:`~routing_rl.envs.routing_env.RoutingEnv` ``num_envs`` times over, as one SB3 ``VecEnv``.

    Each sub-environment is one slot of a :class:`~routing_rl.envs.traffic.Traffic`:
    episodes at the same node run through it as one batch, so a step costs a few batched
    transforms, not ``num_envs`` forward passes.

    ## Action Space
    Per sub-environment, as :class:`RoutingEnv`: ``Discrete(max sinks)``; ``step`` takes
    ``(num_envs,)`` integers. :meth:`action_masks` gives ``(num_envs, max sinks)``; SB3's
    ``env_method("action_masks")`` one row per sub-environment (sb3-contrib's ``MaskablePPO``
    trains on the tree without a wrapper). Invalid actions raise ValueError.

    ## Observation Space
    As :class:`RoutingEnv`, batched: ``(num_envs, size)`` float32.

    ## Rewards
    As :class:`RoutingEnv`: ``-k_cpt × MACs`` per step and ``-c_err`` at a leaf; float32.

    ## Starting State
    Every slot draws an episode at ``reset()``, from a generator seeded by ``seed`` (or by
    ``seed(s)`` / the algorithm's ``seed=``, which takes effect at the next ``reset()``).

    ## Episode End
    A slot is done when its episode reaches its (last frame's) leaf; it auto-resets as SB3
    expects: the observation returned is its next episode's first, and
    ``infos[i]["terminal_observation"]`` holds the leaf's. Never truncated.

    ## Arguments
    ``num_envs``: slots in flight; ``seed``: the episodes' generator, and the net's weights
    (``net_seed`` when they should differ); other keywords as :class:`RoutingEnv`
    (:mod:`~routing_rl.envs.factory`). :meth:`make` builds one from a registered id.

    The sub-environments share one net, one task and one random generator, so ``get_attr`` /
    ``set_attr`` / ``env_method`` act on this object and answer the same for every index
    (but ``action_masks``, which answers per slot).
    """

    render_mode = None

    def __init__(self, num_envs: int, seed: int | None = None, net_seed: int | None = None, *,
                 traffic: Traffic | None = None, **kwargs):
        check_keywords({name: value for name, value in (("seed", seed), ("net_seed", net_seed)) if value is not None})
        if traffic is None:
            net_seed = net_seed if net_seed is not None else (seed if seed is not None else 0)
            traffic = make_traffic(num_envs, seed=net_seed, **kwargs)
        elif kwargs:
            raise TypeError(f"keywords {sorted(kwargs)} given beside a traffic")
        self.traffic = traffic
        self.layout = self.traffic.layout
        self.rng = np.random.default_rng(seed)
        self._actions: np.ndarray | None = None
        super().__init__(num_envs, self.layout.observation_space, self.layout.action_space)

    @classmethod
    def make(cls, env_id: str, num_envs: int, seed: int | None = None, **kwargs) -> RoutingSB3VecEnv:
        """The batched version of ``gym.make(env_id, **kwargs)``, ``"module:id"`` included.

        An id registered with :func:`~routing_rl.envs.task.register_task` is built from its
        registered keywords updated by ``kwargs``; any other entry point is called through
        ``gym.make`` and must give a :class:`RoutingEnv`, whose task, net and settings the
        vector env then shares.
        """
        spec = env_spec(env_id)
        if spec.entry_point in (RoutingEnv, "routing_rl.envs.routing_env:RoutingEnv"):
            values = {key: value for key, value in spec.kwargs.items() if key != "share"}
            values.update(kwargs)
            if "seed" in values:  # the registered net seed
                values.setdefault("net_seed", values.pop("seed"))
            return cls(num_envs, seed=seed, **values)
        env = gym.make(env_id, **kwargs)
        if not isinstance(env.unwrapped, RoutingEnv):
            raise TypeError(f"{spec.id!r} makes a {type(env.unwrapped).__name__}, not a RoutingEnv; "
                            "RoutingSB3VecEnv batches routing envs only (register yours with register_task)")
        return cls(num_envs, seed=seed, traffic=env.unwrapped.traffic.with_slots(num_envs))

    def action_masks(self) -> np.ndarray:
        """``(num_envs, max sinks)`` bool: the actions valid at each slot's junction."""
        return self.traffic.action_masks()

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
        done = finished.done
        for slot, terminal in zip(done.tolist(), self.layout.terminal(self.traffic.k_cpt[done])):
            infos[slot]["terminal_observation"] = terminal
        self.traffic.refill(finished, self.rng)
        dones = np.zeros(self.num_envs, dtype=bool)
        dones[done] = True
        return self.traffic.observe(), rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Nothing to release: the examples in flight live in this process's tensors."""

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list:
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value, indices: VecEnvIndices = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list:
        indices = self._get_indices(indices)
        if method_name == "action_masks":
            return list(self.action_masks()[indices])
        return [getattr(self, method_name)(*method_args, **method_kwargs) for _ in indices]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))


RoutingVecEnv = RoutingSB3VecEnv
