"""Actor learning (paper Section 4.1): minimise the exact expected cost over the training policy.

The training routing policy at junction j is ``softmax(s_j / tau)`` (floored). With the full
tree evaluated, every leaf's path probability ``P_leaf`` (the product of the decision
probabilities on its path) is known, and

    L_ac = E[c_err + c_cpt] = mean_batch Σ_leaf P_leaf · (c_err(leaf) + k_cpt · cost(leaf))

is computed exactly, without sampling; ``cost(leaf)`` is the path's MACs, or its measured time
in MAC-equivalents (:class:`~routing_rl.core.k_cpt.CostModel`). Gradients reach the heads and columns through
``c_err`` and the routers through ``P``. With ``head_weight`` w > 0 the heads also learn where
the policy does not send images:

    c_heads = w · mean_batch Σ_leaf CE(leaf)

(w = 1: with c_err in cross-entropy, each head's loss is ``(P_leaf + 1) · CE``, the
confidence threshold's all-heads loss plus the routed share). Why: in the paper's actor a head
learns in proportion to the images routed to it, so a head the policy turns away from early
stays weak, and a policy that commits while the heads are young keeps the features it had
(measured: docs/results/suite.md, "The actor on all eight tasks").

c_err may be the 0/1 error instead (``error_cost = zero_one``): the routers then learn the cost
of inference the suite judges, and the heads, which a 0/1 error cannot teach, learn the same
``(P_leaf + w) · CE`` as with c_err in cross-entropy, their routed share moving to c_heads:

    c_heads = mean_batch Σ_leaf (sg(P_leaf) + w) · CE(leaf)

Why: in nats a deeper head keeps paying for confidence on images a shallower one already gets
right, so a router that learns cross-entropy buys columns the 0/1 judge does not count
(docs/results/suite.md, "Keeping the actor exploring", measures it).
Regularisation (Section 4.4) adds

* c_mod = k_L2 · Σ_nodes p̄_node Σ w² (see :mod:`routing_rl.training.sgd`), with p̄ a constant
  as in the paper's experiments; ``c_mod_routing`` lets its gradient reach the routers through
  p̄ (the paper's "regularizing d̂", which it found to discourage deep paths), and
* c_dec = k_dec · mean_batch Σ_j p_j · ‖s_j‖², ``p_j`` the stop-gradient probability of
  reaching junction j: the paper's ``E[k_dec Σ_{j ∈ J(d̂)} ‖s_j‖²]``, which keeps the
  scores small and so keeps the actor exploring.

TALR scales each node's gradient by ``1/sqrt(mean_batch p_node²)``, where a node's ``p`` counts
c_heads' weight too (``min(1, p_node + w)``; as for c_mod's usage).
"""

from __future__ import annotations

import torch

from routing_rl.core.paths import Paths
from routing_rl.agents.base import RouterOptions, SGDLearner
from routing_rl.training.sgd import leaf_correct, leaf_errors, training_policy
from dataclasses import dataclass

from routing_rl.training.config import TrainConfig
from routing_rl.training.learners import JOINT_LR, LR, LearnerSpec, register_learner
from routing_rl.data import Split
from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel, expected_c_cpt


class ActorLearner(SGDLearner):
    """Trains a routed net (chain or tree) by exact expected-cost minimisation."""

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None):
        if not net.junctions:
            raise ValueError("the actor learns routing; its net needs junctions (--arch chain or tree)")
        if config.options.policy != "softmax":
            raise ValueError("the actor's gradients flow through softmax probabilities; use --policy softmax")
        super().__init__(net, config, device, cost)
        self.policy = training_policy(config)
        self.paths = Paths(net)
        self.junction_columns = [self.paths.node_index[j] for j in net.junctions]

    def losses(self, batch: Split, iteration: int) -> dict[str, torch.Tensor]:
        """The loss terms on one batch (differentiable), and ``reach`` ``(B, N)``."""
        k_cpt = self.sample_k_cpt(len(batch))
        out = self.net(batch.images, k_cpt)
        probabilities = {j: self.policy.probabilities(s, iteration) for j, s in out.scores.items()}
        reach = self.paths.reach(probabilities)
        p_leaf = self.paths.leaves(reach)
        cross_entropy = leaf_errors(self.net, out, batch.labels, error=self.error_cost)
        head_share = self.config.options.head_weight  # each head's CE weight in c_heads
        if self.config.error_cost == "cross_entropy":
            c_err = (p_leaf * cross_entropy).sum(1).mean()
        else:  # the routers learn the judged error; the heads keep their routed share of CE
            c_err = (p_leaf * leaf_errors(self.net, out, batch.labels, self.config.error_cost, self.error_cost)).sum(1).mean()
            head_share = head_share + p_leaf.detach()
        c_cpt = expected_c_cpt(p_leaf, k_cpt, self.leaf_cost)
        reach_junction = reach.detach()[:, self.junction_columns]
        decisiveness = torch.stack([out.scores[j].square().sum(1) for j in self.net.junctions], dim=1)
        c_dec = self.config.options.k_dec * (reach_junction * decisiveness).sum(1).mean()
        trained = (reach.detach() + self.config.options.head_weight).clamp(max=1.0)  # how much each node learns per image
        usage = self.batch_mean(trained)
        p_leaf = p_leaf.detach()
        return {
            "c_err": c_err,
            "c_cpt": c_cpt,
            "c_heads": (head_share * cross_entropy).sum(1).mean(),
            "c_mod": self.sgd.c_mod_of_usage(self.batch_mean(reach)) if self.config.options.c_mod_routing else self.c_mod(usage),
            "c_dec": c_dec,
            "reach": reach,
            "trained": trained,
            "usage": usage,
            "accuracy": (p_leaf * leaf_correct(self.net, out, batch.labels)).sum(1).mean(),
            "mean_macs": (p_leaf * self.leaf_macs).sum(1).mean(),
        }

    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        # accuracy and MACs in the report are expectations over the training policy's paths
        heads_apart = self.config.options.head_weight or self.config.error_cost != "cross_entropy"
        names = ("c_err", "c_cpt", "c_heads", "c_mod", "c_dec") if heads_apart else ("c_err", "c_cpt", "c_mod", "c_dec")
        return self.routed_step(self.losses(batch, iteration), names, iteration)


@dataclass
class ActorOptions(RouterOptions):
    """The actor's options: τ 1 (its softmax starts soft), the learning rate ``JOINT_LR`` when
    c_heads trains every head on every image (``head_weight`` > 0), ``LR`` otherwise;
    ``k_dec``, the decisiveness cost's weight; ``c_mod_routing``, c_mod's gradient also
    reaching the routers (the paper's "regularizing d̂")."""

    tau: float | None = 1.0
    lr: float | None = None
    k_dec: float = 0.01
    c_mod_routing: bool = False

    def __post_init__(self) -> None:
        if self.lr is None:
            self.lr = JOINT_LR if self.head_weight else LR


register_learner(LearnerSpec("actor", ActorOptions, policies=("softmax",), builder=ActorLearner,
                             reads=("error_cost",),
                             refuses={"execution": "the actor needs the full tree (exact expectations); "
                                                   "drop --execution=sampled"}))
