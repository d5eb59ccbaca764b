"""Build the learner a :class:`~routing_rl.training.config.TrainConfig` asks for, with its net."""

from __future__ import annotations

import torch

from routing_rl.agents.actor import ActorLearner
from routing_rl.agents.base import Learner
from routing_rl.agents.critic import CriticLearner
from routing_rl.agents.static import StaticLearner
from routing_rl.agents.threshold import ThresholdLearner
from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel
from routing_rl.envs.task import RoutingTask
from routing_rl.nets.multiscale import build
from routing_rl.nets.seeding import seeded_net
from routing_rl.training.acceleration import accelerate
from routing_rl.training.config import TrainConfig


def build_net(config: TrainConfig, task: RoutingTask | int, device: torch.device | str = "cpu") -> RoutedNet:
    """The agent's net, initialised from ``config.seed`` (:func:`~routing_rl.nets.seeding.seeded_net`):
    ``task``'s net called ``config.arch``, or, given a class count, the paper's multiscale net.
    :meth:`TrainConfig.validate` has already checked that the arch suits the agent."""
    if isinstance(task, RoutingTask):
        return task.make_net(config.arch, config.width, config.dynamic_k_cpt, config.seed, device)
    return seeded_net(lambda: build(config.arch, config.width, task, k_cpt_input=config.dynamic_k_cpt),
                      config.seed, device)


def make_learner(config: TrainConfig, task: RoutingTask | int, device: torch.device, cost: CostModel | None = None) -> Learner:
    """A ready-to-train learner for ``config.agent`` (static, actor, pragmatic-critic,
    optimistic-critic, threshold) on a fresh net of ``task`` (or, given a class count, of
    the paper's nets) on ``device``, charging ``cost`` (None: MACs)."""
    learners = {
        "static": StaticLearner,
        "actor": ActorLearner,
        "pragmatic-critic": CriticLearner,
        "optimistic-critic": lambda net, config, device, cost: CriticLearner(net, config, device, cost, optimistic=True),
        "threshold": ThresholdLearner,
    }
    if config.agent not in learners:
        raise ValueError(f"agent {config.agent!r} is not a gradient learner; choose one of {', '.join(learners)}")
    net = accelerate(build_net(config, task, device), config.channels_last, config.compile)
    return learners[config.agent](net, config, device, cost)
