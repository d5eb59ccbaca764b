"""Routing as a Gymnasium environment: one episode carries one input from the root to a leaf.

At each junction the agent observes the router's input — the node's descriptor, the
junction's identity and, with a dynamic k_cpt, the cost (:mod:`~routing_rl.envs.observation`)
— and picks a sink. Reward per step ``-k_cpt × cost`` (MACs, or a measured-latency cost
model's) computed in that step (routers included), plus ``-c_err`` at the leaf, where the episode terminates; an episode's return is
the paper's ``-c_inf`` (:mod:`~routing_rl.envs.traffic`). Episodes never truncate.

``info``: ``macs`` so far, ``label``, ``source`` (``mnist``/``cifar``) and ``k_cpt`` at every
step; at the leaf also ``leaf`` (its name), ``correct`` and ``c_err``.

Training mode (the default, ``train=True``) also trains the feature network on the paths
chosen (:mod:`~routing_rl.envs.joint`); ``env.unwrapped.eval()`` (or ``train=False``) freezes
it, and then equal seeds give equal episodes. Keywords: :mod:`~routing_rl.envs.factory`.

    >>> import gymnasium as gym, routing_rl
    >>> env = gym.make("routing_rl/HybridRouting-v0", k_cpt=4e-9)
    >>> obs, info = env.reset(seed=0)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from routing_rl.envs.factory import make_traffic
from routing_rl.envs.traffic import Finished, TrafficControls


class RoutingEnv(TrafficControls, gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, **kwargs):
        self.traffic = make_traffic(1, **kwargs)
        self.layout = self.traffic.layout
        self.observation_space = self.layout.observation_space
        self.action_space = self.layout.action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.traffic.reset(self.np_random)
        return self.traffic.observe()[0], self.traffic.infos(Finished.none())[0]

    def step(self, action):
        if not self.traffic.waiting:
            raise RuntimeError("the episode has reached a leaf; call reset() before step()")
        finished = self.traffic.move(np.array([action]))
        reward = float(self.traffic.charge(finished)[0])
        observation = self.traffic.observe()[0]
        return observation, reward, bool(finished.slots.size), False, self.traffic.infos(finished)[0]
