"""Joint training: the environment trains the feature network while the agent routes it.

An agent (SB3's policy, say) replaces the routers, but the columns and heads still have to
learn. The environment records every finished episode (its input image, label, the sink it
took at each junction) and, every ``batch_size`` finished episodes — one iteration, the
budget unit of every learner — takes one SGD step on that batch in train mode. Two
executions (``JointTraining.execution``):

* ``full`` (the default) — every column and every head on the whole batch. Each example's
  loss is a weighted sum of the heads' cross-entropies: the leaf its recorded path reached
  weighs 1 and every other leaf ``uniform_weight`` (TALR and c_mod see a node reached with
  the weight of the leaves below it, at most 1). With the default ``uniform_weight = 1``
  every head weighs 1 whatever the agent does, which is exactly how the confidence threshold
  trains its chain, at the threshold's validated learning rate (``JOINT_LR``, 0.02): the
  features do not depend on the agent's exploration. Why not weigh heads as the agent uses
  them (``uniform_weight`` < 1): the heads an agent avoids then stop learning, and an agent
  that learns from poor heads avoids them — a loop; and a loss spread over the heads by the
  agent's exploration learns a minority source slowly, while the high-lr part of the schedule
  is spent before the agent commits (measured: ``docs/results/suite.md``, "Why the env weighs
  every head alike"). Costs one static-8 step per image, as the actor's full tree does.
* ``sampled`` — the recorded paths replayed with :func:`routing_rl.core.execution.route` (a
  ``decide`` that returns the recorded sinks): each node learns from the examples the agent
  sent there, as in the paper's sampled-decision training.

Why replay rather than keep each in-flight example's autograd graph: examples share batched
transforms with others still in flight, so their graphs would pin every group's
activations until the last member finishes, and batch norm would mix examples that happened
to share a group. Replaying gives a clean train-mode batch.

Rewards are the true cost: the env scores in eval mode, with each batch-norm layer's running
statistics, and a moving average of past batches lags weights that move at lr 0.1 — the
deep heads' charged error reached 10^2-10^4 while their training cross-entropy was 2-9.
So after every step the trainer runs the batch again without gradient, on the same
execution, and makes each layer's running statistics that batch's statistics under the new
weights (:meth:`FeatureTrainer._refresh_statistics`, through
:func:`~routing_rl.training.batchnorm.fresh_statistics`); the env then scores with exactly
the normalisation the network is being trained with. Measured on hybrid, 150 updates at
lr 0.1, episodes at every head: the charged error per head matched the training
cross-entropy per head within 0.2 (full). With ``sampled``, a node the agent reaches with
one or two examples per batch normalises by those examples' own statistics, so its charged
error stays noisy (exits 7-8: 115 against 8 in training).

As in the paper's learners, the optimiser is :class:`~routing_rl.training.sgd.RoutedSGD`
(SGD with momentum, the learning rate halving every ``lr_half_life`` optimiser steps,
usage-weighted c_mod, TALR). Routers get no gradient (the decisions are the agent's), so
only transforms and heads change. The training loss is the task's cross-entropy
(:meth:`RoutingTask.error_cost <routing_rl.envs.task.RoutingTask.error_cost>` of kind
``cross_entropy``); a 0/1 ``error_cost`` changes the agent's reward, not this. A NaN or infinite loss stops training
(:mod:`routing_rl.training.guard`) before the step is taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from routing_rl.core.costs import error_cost
from routing_rl.core.execution import Junction, route
from routing_rl.core.graph import RoutedNet
from routing_rl.training.batchnorm import fresh_statistics
from routing_rl.training.config import EXECUTIONS, JOINT_LR, TrainConfig
from routing_rl.training.guard import check_finite
from routing_rl.training.sgd import RoutedSGD, SGDOptions, leaf_errors


@dataclass(frozen=True)
class JointTraining(SGDOptions):
    """The feature network's own optimiser and schedule: :class:`SGDOptions` (lr halving
    every ``lr_half_life`` optimiser steps) plus

    batch_size: finished episodes per optimiser step. augment: shift and flip training images
    (the paper's augmentation). execution: ``full`` (every head on every image) or
    ``sampled`` (the agent's paths only). uniform_weight: on the full tree, every head's
    weight in each example's loss beside the reached head's 1 (1: every head alike). The
    learning rate defaults to ``JOINT_LR`` (0.02), not the paper's learners' 0.1.
    """

    lr: float = JOINT_LR
    batch_size: int = TrainConfig.batch_size
    augment: bool = True
    execution: str = "full"
    uniform_weight: float = 1.0

    @classmethod
    def from_config(cls, config: TrainConfig, **overrides):
        """As :meth:`SGDOptions.from_config`; ``execution`` is the learner's ``joint_execution``."""
        return super().from_config(config, **{"execution": config.options.joint_execution, **overrides})

    def __post_init__(self) -> None:
        if self.execution not in EXECUTIONS:
            raise ValueError(f"unknown joint-training execution {self.execution!r}; "
                             f"choose one of {', '.join(EXECUTIONS)}")
        if not 0.0 <= self.uniform_weight <= 1.0:
            raise ValueError(f"uniform_weight {self.uniform_weight} is not a weight in [0, 1]; choose one "
                             "(1: every head weighs the same, 0: only the head the agent reached)")


class FeatureTrainer:
    """Replays finished paths through ``net`` and steps its transforms and heads.

    ``state_dict`` / ``load_state_dict`` (optimiser momentum and the step count that drives the
    schedule) let an SB3 model save it in its zip beside the net. ``limit``: the most updates
    it takes (a run's ``iterations``; None: no limit) — one environment step can finish several
    batches of episodes, and a budget of images is not exceeded by them.
    """

    limit: int | None = None

    def __init__(self, net: RoutedNet, options: JointTraining = JointTraining(), error: Callable = error_cost):
        self.net = net
        self.options = options
        self.error = error  # c_err per example of (logits, labels, kind): the task's (RoutingTask.error_cost)
        self.sgd = RoutedSGD(net, options, regularise_routers=False)  # routers get no gradient here
        self.node_index = {name: k for k, name in enumerate(net.order)}
        self.junction_index = {name: j for j, name in enumerate(net.junctions)}
        # (L, N) 1 where a node lies on a leaf's path: a node is reached with the weight of the leaves below it
        self.on_leaf_path = torch.zeros(len(net.leaves), len(net.order), device=net.leaf_macs.device)
        for row, leaf in enumerate(net.leaves):
            for name in net.nodes_to(leaf):
                self.on_leaf_path[row, self.node_index[name]] = 1.0
        self.updates = 0
        self.last = {}  # scalars of the latest update, for logging
        self._pending: list[tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]] = []
        self._count = 0

    def record(self, images: torch.Tensor, labels: torch.Tensor, decisions: np.ndarray, k_cpt: np.ndarray) -> None:
        """Finished episodes: inputs, labels, ``(b, J)`` sink taken at each junction (-1 where
        not reached) and cost per MAC. Trains whenever a batch is complete."""
        self._pending.append((images, labels, decisions, k_cpt))
        self._count += len(labels)
        while self._count >= self.options.batch_size and (self.limit is None or self.updates < self.limit):
            self._update()

    def lr(self) -> float:
        """The learning rate of the next update."""
        return self.sgd.lr(self.updates)

    def _take_batch(self):
        images, labels, decisions, k_cpt = (
            torch.cat([p[0] for p in self._pending]), torch.cat([p[1] for p in self._pending]),
            np.concatenate([p[2] for p in self._pending]), np.concatenate([p[3] for p in self._pending]),
        )
        b = self.options.batch_size
        self._pending = [(images[b:], labels[b:], decisions[b:], k_cpt[b:])] if len(labels) > b else []
        self._count = len(labels) - b
        return images[:b], labels[:b], decisions[:b], k_cpt[:b]

    @torch.enable_grad()
    def _update(self) -> None:
        images, labels, decisions, k_cpt = self._take_batch()
        device = images.device
        recorded = torch.from_numpy(decisions).to(device)

        def replay(junction: Junction) -> torch.Tensor:
            return recorded[junction.index, self.junction_index[junction.name]]

        k_cpt = torch.from_numpy(k_cpt).to(device=device, dtype=images.dtype) if self.net.k_cpt_input else None
        was_training = self.net.training
        self.net.train()
        try:
            if self.options.execution == "full":
                weights = self.leaf_weights(decisions).to(device)
                c_err = (leaf_errors(self.net, self.net(images, k_cpt), labels, error=self.error) * weights).sum(1).mean()
                reach = self.node_reach(weights)
            else:
                routed = route(self.net, images, replay, k_cpt)
                c_err = self.error(routed.logits, labels, "cross_entropy").mean()
                reach = torch.zeros(len(labels), len(self.node_index), device=device)
                for name, index in routed.visits.items():
                    reach[index, self.node_index[name]] = 1.0
            usage = reach.mean(0)
            c_mod = self.sgd.c_mod(usage)
            losses = {"losses/c_err": c_err.item(), "losses/c_mod": c_mod.item()}
            check_finite(sum(losses.values()), "feature network's training loss", self.updates + 1, self.lr())
            lr = self.sgd.step(c_err, self.updates, reach, usage)
            self._refresh_statistics(images, replay, k_cpt)
        finally:
            self.net.train(was_training)
        self.updates += 1
        self.last = {**losses, "charts/lr": lr}

    def leaf_weights(self, decisions: np.ndarray) -> torch.Tensor:
        """``(b, L)`` each leaf's weight in the full-tree loss of the examples whose recorded
        sinks are ``decisions`` ``(b, J)``: 1 for the leaf reached, ``uniform_weight`` for the others."""
        reached = np.ones((len(decisions), len(self.net.leaves)), dtype=bool)
        for column, leaf in enumerate(self.net.leaves):
            for junction, sink in self.net.path[leaf]:
                reached[:, column] &= decisions[:, self.junction_index[junction]] == sink
        others = self.options.uniform_weight
        return (1.0 - others) * torch.from_numpy(reached).to(self.on_leaf_path) + others

    def node_reach(self, weights: torch.Tensor) -> torch.Tensor:
        """``(b, N)`` each node's reach for TALR and c_mod, from leaf weights ``(b, L)``: the
        weight of the leaves below it, at most 1 (a node every head reads is reached once)."""
        return (weights @ self.on_leaf_path).clamp(max=1.0)

    def _refresh_statistics(self, images: torch.Tensor, replay, k_cpt) -> None:
        """Every batch-norm layer's running statistics become those of ``images`` under the
        weights just stepped, on the execution that trained them (a node no replayed path
        reached keeps its own), so the env scores with the network being trained."""
        with fresh_statistics(self.net):
            if self.options.execution == "full":
                self.net(images, k_cpt)
            else:
                route(self.net, images, replay, k_cpt)

    def state_dict(self) -> dict:
        return {"optimizer": self.sgd.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """``strict`` is accepted because SB3 passes it to every saved object."""
        self.sgd.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])

    def pending_state(self) -> dict:
        """The finished episodes waiting for a full batch (numpy arrays as tensors), for an exact resume."""
        return {"pending": [(images, labels, torch.from_numpy(decisions.copy()), torch.from_numpy(k_cpt.copy()))
                            for images, labels, decisions, k_cpt in self._pending], "count": self._count}

    def load_pending_state(self, state: dict) -> None:
        """Restore what :meth:`pending_state` saved."""
        self._pending = [(images, labels, decisions.cpu().numpy(), k_cpt.cpu().numpy()) for images, labels, decisions, k_cpt in state["pending"]]
        self._count = int(state["count"])
