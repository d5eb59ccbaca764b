"""Joint training: the environment trains the feature network on the paths the agent chose.

An agent (SB3's policy, say) replaces the routers, but the columns and heads still have to
learn — on the examples that actually reach them, as in the paper's sampled-decision
training. The environment records every finished episode (its input image, label, the sink
it took at each junction) and, every ``batch_size`` finished episodes, replays those paths
with :func:`routing_rl.core.execution.route` (a ``decide`` that returns the recorded sinks) in
train mode and takes one SGD step on the mean cross-entropy at the leaves.

Why replay rather than keep each in-flight example's autograd graph: examples share batched
transforms with others still in flight, so their graphs would pin every group's
activations until the last member finishes, and batch norm would mix examples that happened
to share a group. Replaying costs one more forward on the chosen paths only (about the MACs
the agent was charged) and gives a clean train-mode batch.

As in the paper's learners (:mod:`routing_rl.training.sgd`): SGD with momentum, the learning
rate halving continuously every ``lr_half_life`` optimiser steps, c_mod = k_L2 × Σ_nodes
(fraction of the batch through the node) × Σ w² over the node's weights, and TALR
(:mod:`routing_rl.core.talr`) with the sampled paths' indicators. Routers get no gradient (the
decisions are replayed, not scored), so only transforms and heads change. The training loss
is always cross-entropy; a 0/1 ``error_cost`` changes the agent's reward, not this. A NaN or
infinite loss stops training (:mod:`routing_rl.training.guard`) before the step is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from routing_rl.core.execution import Junction, route
from routing_rl.core.graph import RoutedNet
from routing_rl.core.policies import halving
from routing_rl.core.talr import NodeGradients, talr_scales
from routing_rl.training.guard import check_finite


@dataclass(frozen=True)
class JointTraining:
    """The feature network's own optimiser and schedule.

    batch_size: finished episodes per optimiser step. lr, momentum: SGD's; lr halves every
    ``lr_half_life`` optimiser steps. k_l2: weight of c_mod. talr: throughput-adjusted
    learning rates. augment: shift and flip training images (the paper's augmentation).
    """

    batch_size: int = 128
    lr: float = 0.1
    lr_half_life: float = 500
    momentum: float = 0.9
    k_l2: float = 1e-4
    talr: bool = True
    probability_floor: float = 1e-6
    augment: bool = True

    @classmethod
    def from_config(cls, config) -> JointTraining:
        """The options of a :class:`~routing_rl.training.config.TrainConfig` (iterations = optimiser steps)."""
        return cls(config.batch_size, config.lr, config.lr_half_life, config.momentum, config.k_l2,
                   config.talr, config.probability_floor)


class FeatureTrainer:
    """Replays finished paths through ``net`` and steps its transforms and heads.

    ``state_dict`` / ``load_state_dict`` (optimiser momentum and the step count that drives the
    schedule) let an SB3 model save it in its zip beside the net.
    """

    def __init__(self, net: RoutedNet, options: JointTraining = JointTraining()):
        self.net = net
        self.options = options
        self.optimizer = torch.optim.SGD(net.parameters(), lr=options.lr, momentum=options.momentum)
        self.gradients = NodeGradients(net)
        self.weights = [[p for p in net.nodes[name].transform.parameters() if p.ndim >= 2] for name in net.order]
        self.node_index = {name: k for k, name in enumerate(net.order)}
        self.junction_index = {name: j for j, name in enumerate(net.junctions)}
        self.updates = 0
        self.last = {}  # scalars of the latest update, for logging
        self._pending: list[tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]] = []
        self._count = 0

    def record(self, images: torch.Tensor, labels: torch.Tensor, decisions: np.ndarray, k_cpt: np.ndarray) -> None:
        """Finished episodes: inputs, labels, ``(b, J)`` sink taken at each junction (-1 where
        not reached) and cost per MAC. Trains whenever a batch is complete."""
        self._pending.append((images, labels, decisions, k_cpt))
        self._count += len(labels)
        while self._count >= self.options.batch_size:
            self._update()

    def lr(self) -> float:
        return halving(self.options.lr, self.updates, self.options.lr_half_life)

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
            routed = route(self.net, images, replay, k_cpt)
            c_err = F.cross_entropy(routed.logits, labels)
            reach = torch.zeros(len(labels), len(self.node_index), device=device)
            for name, index in routed.visits.items():
                reach[index, self.node_index[name]] = 1.0
            zero = torch.zeros((), device=device)
            squares = torch.stack([sum((w.square().sum() for w in weights), zero) for weights in self.weights])
            c_mod = self.options.k_l2 * (squares * reach.mean(0)).sum()
            losses = {"losses/c_err": c_err.item(), "losses/c_mod": c_mod.item()}
            check_finite(sum(losses.values()), "feature network's training loss", self.updates + 1, self.lr())
            self.optimizer.zero_grad(set_to_none=True)
            (c_err + c_mod).backward()
            if self.options.talr:
                self.gradients.scale(talr_scales(reach, self.options.probability_floor))
            lr = self.lr()
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
        finally:
            self.net.train(was_training)
        self.updates += 1
        self.last = {**losses, "charts/lr": lr}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """``strict`` is accepted because SB3 passes it to every saved object."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
