"""The same batched stepping as a Gymnasium ``VectorEnv``, for ``gym.make_vec``.

    >>> envs = gym.make_vec("routing_rl/HybridRouting-v0", num_envs=256)
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from routing_rl.envs.factory import make_traffic
from routing_rl.envs.traffic import Finished, Traffic, TrafficControls


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
        "source": traffic.source_names[traffic.source],
        "k_cpt": traffic.k_cpt.copy(),
    }, everyone)


class RoutingGymVectorEnv(TrafficControls, VectorEnv):
    """:class:`~routing_rl.envs.routing_env.RoutingEnv` ``num_envs`` times over, as one Gymnasium ``VectorEnv``.

    What ``gym.make_vec(id, num_envs=N)`` gives for a routing id (its ``vector_entry_point``).
    Each sub-environment is one slot of a :class:`~routing_rl.envs.traffic.Traffic`; episodes
    at the same node run through the net as one batch.

    ## Action Space
    ``MultiDiscrete([max sinks] * num_envs)``: one sink per sub-environment.
    :meth:`action_masks` gives ``(num_envs, max sinks)`` valid actions; invalid actions
    (past a junction's last sink, fractions, NaN, None, strings, other shapes) raise ValueError.

    ## Observation Space
    As :class:`RoutingEnv`, batched: ``Box`` of shape ``(num_envs, size)``, float32.

    ## Rewards
    As :class:`RoutingEnv`: ``-k_cpt × MACs`` per step and ``-c_err`` at a leaf.

    ## Starting State
    Every sub-environment draws an episode at ``reset(seed=...)`` (one generator for all;
    a list of seeds uses its first).

    ## Episode End
    A sub-environment terminates when its episode reaches its (last frame's) leaf. Autoreset
    is same-step (``metadata["autoreset_mode"]``): it returns its next episode's first
    observation, with the leaf's in ``infos["final_obs"]`` and its info in
    ``infos["final_info"]``. Never truncated.

    ## Arguments
    ``num_envs`` and the keywords of :class:`RoutingEnv` (:mod:`~routing_rl.envs.factory`).

    ## Info
    Gymnasium's dict of arrays, each key with a ``_key`` mask: ``macs``, ``label``,
    ``source``, ``k_cpt`` for every sub-environment, and ``leaf``, ``correct``, ``c_err`` in
    ``final_info`` where an episode ended.
    """

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
        done = finished.done
        ended = np.zeros(self.num_envs, dtype=bool)
        ended[done] = True
        infos = {}
        if done.size:
            final_obs = np.full(self.num_envs, None, dtype=object)
            for slot, terminal in zip(done, traffic.layout.terminal(traffic.k_cpt[done])):
                final_obs[slot] = terminal
            final_info = slot_infos(traffic)
            final_info.update(_masked(self._at_leaves(finished), ended))
            infos = {"final_obs": final_obs, "_final_obs": ended, "final_info": final_info, "_final_info": ended}
        traffic.refill(finished, self.np_random)
        infos.update(slot_infos(traffic))
        return traffic.observe(), rewards, ended, np.zeros(self.num_envs, dtype=bool), infos

    def action_masks(self) -> np.ndarray:
        """``(num_envs, max sinks)`` bool: the actions valid at each sub-environment's junction."""
        return self.traffic.action_masks()

    def _at_leaves(self, finished: Finished) -> dict[str, np.ndarray]:
        leaf = np.full(self.num_envs, None, dtype=object)
        leaf[finished.slots] = np.array(self.traffic.net.leaves, dtype=object)[finished.leaf]
        correct = np.zeros(self.num_envs, dtype=bool)
        correct[finished.slots] = finished.correct
        c_err = np.zeros(self.num_envs)
        c_err[finished.slots] = finished.c_err
        return {"leaf": leaf, "correct": correct, "c_err": c_err}
