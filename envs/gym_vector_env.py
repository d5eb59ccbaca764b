"""The same batched stepping as a Gymnasium ``VectorEnv``, for ``gym.make_vec``.

    >>> envs = gym.make_vec("routing_rl/HybridRouting-v0", num_envs=256)

Autoreset is same-step (``metadata["autoreset_mode"]``): a finished sub-environment returns
its next episode's first observation, with the leaf's in ``infos["final_obs"]`` and its info
in ``infos["final_info"]``. Infos are Gymnasium's dict of arrays, each key with a ``_key``
mask: ``macs``, ``label``, ``source``, ``k_cpt`` for every sub-environment, and ``leaf``,
``correct``, ``c_err`` in ``final_info`` where an episode ended.
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from routing_rl.envs.factory import make_traffic
from routing_rl.envs.traffic import Finished, Traffic, TrafficControls

from routing_rl.data import SOURCES


def _masked(values: dict[str, np.ndarray], mask: np.ndarray) -> dict:
    out = {}
    for key, value in values.items():
        out[key], out[f"_{key}"] = value, mask
    return out


def slot_infos(traffic: Traffic) -> dict[str, np.ndarray]:
    everyone = np.ones(traffic.n, dtype=bool)
    return _masked({
        "macs": traffic.macs.copy(),
        "label": traffic.label,
        "source": np.array(SOURCES, dtype=object)[traffic.source],
        "k_cpt": traffic.k_cpt.copy(),
    }, everyone)


class RoutingVectorEnv(TrafficControls, VectorEnv):
    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, **kwargs):
        self.traffic = make_traffic(num_envs, **kwargs)
        self.num_envs = num_envs
        self.single_observation_space = self.traffic.layout.observation_space
        self.single_action_space = self.traffic.layout.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        super().reset(seed=seed[0] if isinstance(seed, (list, tuple)) else seed)
        self.traffic.reset(self.np_random)
        return self.traffic.observe(), slot_infos(self.traffic)

    def step(self, actions):
        traffic = self.traffic
        finished = traffic.move(actions)
        rewards = traffic.charge(finished)
        ended = np.zeros(self.num_envs, dtype=bool)
        ended[finished.slots] = True
        infos = {}
        if finished.slots.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for slot, terminal in zip(finished.slots, traffic.layout.terminal(traffic.k_cpt[finished.slots])):
                final_obs[slot] = terminal
            final_info = slot_infos(traffic)
            final_info.update(_masked(self._at_leaves(finished), ended))
            infos = {"final_obs": final_obs, "_final_obs": ended, "final_info": final_info, "_final_info": ended}
            traffic.start(finished.slots, self.np_random)
        infos.update(slot_infos(traffic))
        return traffic.observe(), rewards, ended, np.zeros(self.num_envs, dtype=bool), infos

    def _at_leaves(self, finished: Finished) -> dict[str, np.ndarray]:
        leaf = np.full(self.num_envs, None, dtype=object)
        leaf[finished.slots] = np.array(self.traffic.net.leaves, dtype=object)[finished.leaf]
        correct = np.zeros(self.num_envs, dtype=bool)
        correct[finished.slots] = finished.correct
        c_err = np.zeros(self.num_envs)
        c_err[finished.slots] = finished.c_err
        return {"leaf": leaf, "correct": correct, "c_err": c_err}
