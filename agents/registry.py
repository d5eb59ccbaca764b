"""Build the learner a :class:`~routing_rl.training.config.TrainConfig` asks for, with its net."""

from __future__ import annotations

import dataclasses

import torch

from routing_rl.agents.base import Learner
from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel
from routing_rl.envs.task import RoutingTask
from routing_rl.nets.multiscale import build
from routing_rl.nets.seeding import seeded_net
from routing_rl.training.acceleration import accelerate
from routing_rl.training.config import TrainConfig
from routing_rl.training.evaluate import evaluate
from routing_rl.data import Split


def build_net(config: TrainConfig, task: RoutingTask | int, device: torch.device | str = "cpu") -> RoutedNet:
    """The agent's net, initialised from ``config.seed`` (:func:`~routing_rl.nets.seeding.seeded_net`):
    ``task``'s net called ``config.arch``, or, given a class count, the paper's multiscale net.
    :meth:`TrainConfig.validate` has already checked that the arch suits the agent."""
    if isinstance(task, RoutingTask):
        return task.make_net(config.arch, config.width, config.dynamic_k_cpt, config.seed, device, config.exit_confidence)
    return seeded_net(lambda: build(config.arch, config.width, task, config.dynamic_k_cpt, config.exit_confidence),
                      config.seed, device)


def make_learner(config: TrainConfig, task: RoutingTask | int, device: torch.device, cost: CostModel | None = None) -> Learner:
    """A ready-to-train learner for ``config.agent`` (its LearnerSpec's builder: static,
    actor, the critics, threshold, or a registered learner of another package) on a fresh net
    of ``task`` (or, given a class count, of the paper's nets) on ``device``, charging ``cost``
    (None: MACs)."""
    spec = config.spec
    if spec.trains_through_env:
        raise ValueError(f"agent {config.agent!r} trains through the routing env, not as a gradient learner")
    net = accelerate(build_net(config, task, device), config.channels_last, config.compile, config.cuda_graphs)
    learner = spec.builder(net, config, device, cost)
    learner.task = task if isinstance(task, RoutingTask) else None
    return learner


PREFLIGHT_EXAMPLES = 8
"""Validation examples (clips for a sequence task) that :func:`check_agent` judges an untrained learner on."""


def check_agent(config: TrainConfig, task: RoutingTask, validation: Split) -> None:
    """Raise ValueError now, before anything is written or trained, if ``config.agent`` cannot
    train ``task``'s net or be judged after training: builds the learner on a throwaway net on
    the CPU (a net it cannot train is refused by its constructor) and runs what follows
    training — :meth:`~routing_rl.agents.base.Learner.before_evaluation`, the evaluation
    points, the evaluator — on a few ``validation`` examples. The SB3 agents are checked when
    their environment is made."""
    if config.spec.trains_through_env:
        return
    trial = dataclasses.replace(config, compile=False, channels_last=False, cuda_graphs=False)
    learner = make_learner(trial, task, torch.device("cpu"))
    sample = validation.subset(torch.arange(min(PREFLIGHT_EXAMPLES, len(validation))))
    learner.before_evaluation(sample, 0)
    for _, k_cpt, decide in learner.evaluation_points(sample):
        evaluate(learner.net, sample, k_cpt, decide, classes=task.classes, sources=task.sources, task=task)
