"""Routing as a Gymnasium environment: one agent routes one episode at a time.

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
    """Route the inputs of a :class:`~routing_rl.envs.task.RoutingTask` through its routed net,
    one junction decision per step.

    ## Description
    An episode carries one input of the task's dataset (or, for a task of sequences, its
    frames one after another) from the net's root to a leaf, which classifies it. At every
    junction the agent picks the sink the input goes on to; the nodes between two junctions
    run without asking. Computation costs ``k_cpt`` per MAC, errors cost c_err: the return
    is the paper's ``-c_inf`` (McGill & Perona 2017, Section 3.2).

    ## Action Space
    ``Discrete(max sinks)``: the sink of the current junction to go to. Where junctions have
    fewer sinks, :meth:`action_masks` marks the valid actions and an invalid one raises
    ValueError (unless ``clip_actions=True``: the last sink). Actions must be whole numbers:
    ``0.7``, NaN, None, strings and arrays of another shape are refused.

    ## Observation Space
    ``Box(float32)``: ``[descriptor | junction one-hot | k_cpt]`` — the junction node's
    descriptor (what its router would read), zero-padded to the largest in the net; a one-hot
    of the junction; and, only with ``k_cpt="dynamic"``, the episode's cost per MAC as a
    router reads it (:func:`~routing_rl.core.k_cpt.router_input`). All zeros (but the cost) at a leaf. A task may observe otherwise
    (:meth:`RoutingTask.observation_layout`).

    ## Rewards
    ``-k_cpt × MACs`` of the nodes and routers computed in the step (the nodes from the root
    to the first junction are charged in the first step), plus ``-c_err`` (the task's error
    cost: cross-entropy in nats, or 0/1; at most ``max_error_cost`` when given) when a leaf
    is reached. Scale and tails, and settings for RL benchmarks: ``docs/rl-benchmark.md``.

    ## Starting State
    A uniformly drawn input of the split (``np_random``), its k_cpt (one of ``K_CPT_VALUES``
    when dynamic), run from the root to the first junction.

    ## Episode End
    Terminates when the input — for a task of sequences, its last frame — reaches a leaf.
    Never truncated (a path is at most the depth of the net).

    ## Arguments
    ``gym.make(id, task=..., split="train", arch=None, width=1, seed=0, k_cpt=4e-9,
    error_cost="cross_entropy", max_error_cost=None, clip_actions=False, train=True,
    joint=None, net=None, device="cpu", **task_keywords)`` — see :mod:`~routing_rl.envs.factory`. ``seed`` fixes the
    net's initial weights; ``reset(seed=...)`` the episodes. With ``train=True`` (default)
    the env also trains the net's transforms and heads on the paths chosen
    (:mod:`~routing_rl.envs.joint`); ``env.unwrapped.eval()`` freezes it.

    ## Info
    ``macs`` so far, ``label``, ``source`` (the task's source name) and ``k_cpt`` at every
    step; at a leaf also ``leaf`` (its name), ``correct``, ``c_err`` (as charged, so bounded
    by ``max_error_cost``; and ``frame`` for sequences).
    """

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
        finished = self.traffic.move(action)
        reward = float(self.traffic.charge(finished)[0])
        info = self.traffic.infos(finished)[0]
        terminated = bool(finished.ended.any())
        if finished.slots.size and not terminated:
            self.traffic.refill(finished, self.np_random)
        return self.traffic.observe()[0], reward, terminated, False, info

    def action_masks(self) -> np.ndarray:
        """``(max sinks,)`` bool: the actions valid at the current junction."""
        return self.traffic.action_masks()[0]
