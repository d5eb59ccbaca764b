"""The statically-routed baseline: the first n columns and one head, plain cross-entropy.

Every example passes through every layer, so c_mod is plain L2 on all weights and TALR has
nothing to adjust (every ``p`` is 1).
"""

from __future__ import annotations

import torch

from routing_rl.agents.base import SGDLearner
from routing_rl.training.sgd import scalars
from routing_rl.training.config import TrainConfig
from routing_rl.training.learners import LearnerSpec, register_learner
from routing_rl.data import Split
from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel, c_cpt as c_cpt_of


class StaticLearner(SGDLearner):
    """Trains a net without junctions (``static-N``) on cross-entropy + c_mod."""

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None):
        if net.junctions:
            raise ValueError("the static learner trains nets without junctions; use --arch static-N")
        config.check_error_cost()
        super().__init__(net, config, device, cost)
        (self.leaf,) = net.leaves

    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        logits = self.net(batch.images).logits[self.leaf]
        c_err = self.error_cost(logits, batch.labels).mean()
        c_mod = self.c_mod()
        c_cpt = c_cpt_of(self.sample_k_cpt(1)[0], self.leaf_cost[0])  # constant: no routing to learn
        lr = self.step(c_err + c_mod, iteration)
        return scalars({
            "losses/c_err": c_err,
            "losses/c_cpt": c_cpt,
            "losses/c_mod": c_mod,
            "losses/total": c_err + c_cpt + c_mod,
            "charts/lr": lr,
            "charts/train_accuracy": (logits.argmax(1) == batch.labels).float().mean(),
            "charts/train_mean_macs": self.leaf_macs[0],
        })


register_learner(LearnerSpec("static", builder=StaticLearner, nets="static", routers=False))
