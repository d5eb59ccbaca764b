"""Build the learner a :class:`~routing_rl.training.config.TrainConfig` asks for, with its net."""

from __future__ import annotations

import torch

from routing_rl.agents.actor import ActorLearner
from routing_rl.agents.base import Learner
from routing_rl.agents.critic import CriticLearner
from routing_rl.agents.static import StaticLearner
from routing_rl.agents.threshold import ThresholdLearner
from routing_rl.training.config import TrainConfig
from routing_rl.core.graph import RoutedNet
from routing_rl.nets.multiscale import build


def build_net(config: TrainConfig, classes: int) -> RoutedNet:
    """The agent's net, initialised from ``config.seed`` without touching the global RNG.
    :meth:`TrainConfig.validate` has already checked that the arch suits the agent."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return build(config.arch, config.width, classes, k_cpt_input=config.dynamic_k_cpt)


def make_learner(config: TrainConfig, classes: int, device: torch.device) -> Learner:
    """A ready-to-train learner for ``config.agent`` (static, actor, pragmatic-critic,
    optimistic-critic, threshold) on a fresh net on ``device``."""
    learners = {
        "static": StaticLearner,
        "actor": ActorLearner,
        "pragmatic-critic": CriticLearner,
        "optimistic-critic": lambda net, config, device: CriticLearner(net, config, device, optimistic=True),
        "threshold": ThresholdLearner,
    }
    if config.agent not in learners:
        raise ValueError(f"agent {config.agent!r} is not a gradient learner; choose one of {', '.join(learners)}")
    net = build_net(config, classes).to(device)
    return learners[config.agent](net, config, device)
