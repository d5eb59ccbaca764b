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
is always cross-entropy; a 0/1 ``error_cost`` changes the agent's reward, not this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from routing_rl.core.execution import Junction, route
from routing_rl.core.graph import RoutedNet
from routing_rl.training.config import TrainConfig
from routing_rl.training.sgd import RoutedSGD, SGDOptions


@dataclass(frozen=True)
class JointTraining(SGDOptions):
    """The feature network's own optimiser and schedule: :class:`SGDOptions` (lr halving
    every ``lr_half_life`` optimiser steps) plus

    batch_size: finished episodes per optimiser step. augment: shift and flip training images
    (the paper's augmentation).
    """

    batch_size: int = TrainConfig.batch_size
    augment: bool = True


class FeatureTrainer:
    """Replays finished paths through ``net`` and steps its transforms and heads.

    ``state_dict`` / ``load_state_dict`` (optimiser momentum and the step count that drives the
    schedule) let an SB3 model save it in its zip beside the net.
    """

    def __init__(self, net: RoutedNet, options: JointTraining = JointTraining()):
        self.net = net
        self.options = options
        self.sgd = RoutedSGD(net, options, regularise_routers=False)  # routers get no gradient here
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
            routed = route(self.net, images, replay, k_cpt)
            c_err = F.cross_entropy(routed.logits, labels)
            reach = torch.zeros(len(labels), len(self.node_index), device=device)
            for name, index in routed.visits.items():
                reach[index, self.node_index[name]] = 1.0
            c_mod = self.sgd.c_mod(reach.mean(0))
            lr = self.sgd.step(c_err + c_mod, self.updates, reach)
        finally:
            self.net.train(was_training)
        self.updates += 1
        self.last = {"losses/c_err": c_err.item(), "losses/c_mod": c_mod.item(), "charts/lr": lr}

    def state_dict(self) -> dict:
        return {"optimizer": self.sgd.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """``strict`` is accepted because SB3 passes it to every saved object."""
        self.sgd.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
