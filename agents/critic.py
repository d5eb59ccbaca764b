"""Critic learning (paper Sections 4.2-4.3): routers regress their scores onto utilities.

Each router's score for sink ``i`` of junction ``j`` learns to predict the utility
``u_j^i = -c_inf(ν_j^i)``, minus the cost of inference of the subtree below that sink: its
nodes' computation, ``k_cpt × MACs`` (transforms and routers of the subtree), plus the error
at the leaf the subtree's decisions lead to. The loss is

    L_cr = E[c_err] + E[Σ_{j ∈ J(d̂)} k_ure ‖s_j - u_j‖²] + c_mod,

with the training routing policy ``d̂`` a constant: its probabilities carry no gradient, and
the routers learn only from the regression term c_ure. What "the decisions below the sink"
are makes the two critics:

* pragmatic (``critic``): the current inference policy's — argmax of the scores at every
  junction below;
* optimistic (``optimistic-critic``): the best ones — the minimum cost over the subtree's
  paths, so ``u_j`` does not depend on the routers downstream of ``j``.

Inside the utility the error is cross-entropy, or with ``utility_error = "zero_one"`` the 0/1
classification error (the paper's variant for nonsmooth costs); the heads still learn from
cross-entropy.

Two executions build the targets:

**Full tree** (exact). Every node runs on the whole batch, so every subtree's cost is known
for every example. Going up from the leaves, ``V(leaf) = k_cpt·MACs(leaf) + error(leaf)``,
``V(node) = k_cpt·MACs(node) + V(its sink)``, and at a junction
``Q_j^i = V(sink i)``, ``u_j = -Q_j`` and ``V(j) = k_cpt·MACs(j) + Q_j^{argmax s_j}``
(pragmatic) or ``min_i Q_j^i`` (optimistic). c_ure and c_err are averaged over the training
policy: each junction's term weighted by its reach probability, each leaf's error by its
path probability.

**Sampled decisions.** Each example follows one path drawn from the training policy and only
that path is computed, so below a junction only the cost of the sink that was taken is
observed. The targets are built by the same recursion along the sampled path, from its leaf
up, with every unobserved sink valued at the critic's own estimate ``-s_j^i``:

* at each junction ``j`` on the path the taken sink ``d_j`` gets the target
  ``u_j^{d_j} = -Q̂``, ``Q̂`` the cost observed below it (its subtree's value as computed by
  this recursion); the other sinks get no target (nothing was observed there);
* going up, ``q_i = -s_j^i`` for ``i ≠ d_j`` and ``q_{d_j} = Q̂``, and
  ``V(j) = k_cpt·MACs(j) + q_{argmax s_j}`` (pragmatic: the observed cost when the sampled
  decision was the inference decision, the critic's estimate otherwise) or ``min_i q_i``
  (optimistic: the best of the observed branch and the estimated alternatives).

So sampled pragmatic targets equal the exact ones wherever the sampled path below a junction
is the argmax path (always, with ``--policy greedy``), and both critics fall back on
bootstrapped estimates only where the path left what they would have chosen. c_ure sums the
squared errors of the taken sinks of the junctions on each example's path (a one-sample
estimate of the expectation over ``d̂``), c_err is the sampled leaf's error, c_mod weights each
node by the fraction of the batch whose path went through it, and TALR uses that fraction as
its mean ``p²`` (see :mod:`routing_rl.core.talr`).
"""

from __future__ import annotations

import torch

from routing_rl.core.paths import Paths
from routing_rl.agents.base import SGDLearner
from routing_rl.training.sgd import check_error_cost, leaf_correct, leaf_errors, training_policy
from routing_rl.training.config import TrainConfig
from routing_rl.core.costs import error_cost
from routing_rl.data import Split
from routing_rl.core.execution import RoutedOutput, route
from routing_rl.core.graph import FullOutput, RoutedNet
from routing_rl.core.policies import sample, sample_with


def node_costs(net: RoutedNet) -> dict[str, float]:
    """MACs per example of each node's own transform and router."""
    return {name: float(net.macs[name] + net.router_macs[name]) for name in net.order}


def full_targets(
    net: RoutedNet, output: FullOutput, errors: torch.Tensor, k_cpt: torch.Tensor, optimistic: bool
) -> dict[str, torch.Tensor]:
    """Exact utilities ``u_j`` ``(B, n_sinks)`` of every junction, from a full evaluation.

    errors: ``(B, L)`` each leaf's error cost; k_cpt: ``(B,)``.
    """
    macs = node_costs(net)
    value: dict[str, torch.Tensor] = {}
    targets: dict[str, torch.Tensor] = {}
    for name in reversed(net.order):
        node = net.nodes[name]
        own = k_cpt * macs[name]
        if node.is_leaf:
            value[name] = own + errors[:, net.leaf_index[name]]
        elif node.is_junction:
            q = torch.stack([value[sink] for sink in node.sinks], dim=1)
            targets[name] = -q
            value[name] = own + _subtree_cost(q, output.scores[name].detach(), optimistic)
        else:
            value[name] = own + value[node.sinks[0]]
    return targets


def sampled_targets(
    net: RoutedNet, routed: RoutedOutput, errors: torch.Tensor, k_cpt: torch.Tensor, optimistic: bool
) -> dict[str, torch.Tensor]:
    """Utilities of the sink each example took, ``(b,)`` per junction on the sampled paths
    (aligned with ``routed.visits[j]``); see the module docstring.

    errors: ``(B,)`` the error cost at each example's leaf; k_cpt: ``(B,)``.
    """
    macs = node_costs(net)
    below = torch.zeros_like(errors)  # per example: the cost of its path below the last node processed
    targets: dict[str, torch.Tensor] = {}
    for name in reversed(net.order):  # descendants before ancestors, so each path runs leaf first
        if name not in routed.visits:
            continue
        index = routed.visits[name]
        node = net.nodes[name]
        if node.is_leaf:
            rest = errors[index]
        elif node.is_junction:
            taken, scores, decision = below[index], routed.scores[name].detach(), routed.decisions[name]
            targets[name] = -taken
            q = (-scores).scatter(1, decision[:, None], taken[:, None])
            rest = _subtree_cost(q, scores, optimistic)
        else:
            rest = below[index]
        below[index] = k_cpt[index] * macs[name] + rest
    return targets


def _subtree_cost(q: torch.Tensor, scores: torch.Tensor, optimistic: bool) -> torch.Tensor:
    """The cost below a junction, given each sink's cost ``q`` ``(b, n)``: the best sink's, or
    the one the inference policy (argmax of ``scores``) picks."""
    if optimistic:
        return q.min(1).values
    return q.gather(1, scores.argmax(1, keepdim=True)).squeeze(1)


class CriticLearner(SGDLearner):
    """Trains a routed net with a pragmatic (default) or optimistic critic.

    ``config.resolved_execution`` picks the full tree or sampled decisions;
    ``config.resolved_policy`` the training routing policy (softmax, eps-greedy, greedy).
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, optimistic: bool = False):
        if not net.junctions:
            raise ValueError("a critic learns routing; its net needs junctions (--arch chain or tree)")
        check_error_cost(config)
        super().__init__(net, config, device)
        self.optimistic = optimistic
        self.policy = training_policy(config)
        self.execution = config.resolved_execution
        self.paths = Paths(net)
        self.same_error = config.utility_error == config.error_cost

    def losses(self, batch: Split, iteration: int) -> dict[str, torch.Tensor]:
        """The loss terms on one batch, the critic ``targets``, and node usage ``reach`` ``(B, N)``."""
        k_cpt = self.sample_k_cpt(len(batch))
        if self.execution == "full":
            return self._full_losses(batch, iteration, k_cpt)
        return self._sampled_losses(batch, iteration, k_cpt)

    def _full_losses(self, batch: Split, iteration: int, k_cpt: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(batch.images, k_cpt)
        labels = batch.labels
        with torch.no_grad():
            reach = self.paths.reach({j: self.policy.probabilities(s.detach(), iteration) for j, s in out.scores.items()})
            p_leaf = self.paths.leaves(reach)
        errors = leaf_errors(self.net, out, labels)
        utility_errors = errors.detach() if self.same_error else leaf_errors(self.net, out, labels, self.config.utility_error)
        targets = full_targets(self.net, out, utility_errors, k_cpt, self.optimistic)
        regression = torch.stack(
            [(out.scores[j] - targets[j]).square().sum(1) for j in self.net.junctions], dim=1
        )
        reach_junction = reach[:, [self.paths.node_index[j] for j in self.net.junctions]]
        return {
            "c_err": (p_leaf * errors).sum(1).mean(),
            "c_cpt": (p_leaf * k_cpt[:, None] * self.leaf_macs).sum(1).mean(),
            "c_ure": self.config.k_ure * (reach_junction * regression).sum(1).mean(),
            "c_mod": self.c_mod(self.batch_mean(reach)),
            "reach": reach,
            "targets": targets,
            "accuracy": (p_leaf * leaf_correct(self.net, out, labels)).sum(1).mean(),
            "mean_macs": (p_leaf * self.leaf_macs).sum(1).mean(),
        }

    def _sampled_losses(self, batch: Split, iteration: int, k_cpt: torch.Tensor) -> dict[str, torch.Tensor]:
        k_cpt_input = k_cpt if self.net.k_cpt_input else None
        if self.distributed is None:
            routed = route(self.net, batch.images, sample(self.policy, iteration, self.generator), k_cpt_input)
        else:  # decisions drawn for the global batch, so that they do not depend on the process
            draws = torch.rand(len(self.net.junctions), self.config.batch_size, generator=self.generator,
                               device=self.device)[:, self.shard]
            decide = sample_with(self.policy, iteration, dict(zip(self.net.junctions, draws)))
            routed = route(self.net, batch.images, decide, k_cpt_input, global_counts=self.distributed.sum)
        labels, size = batch.labels, len(batch)
        errors = error_cost(routed.logits, labels, self.config.error_cost)
        utility_errors = errors.detach() if self.same_error else error_cost(routed.logits, labels, self.config.utility_error)
        targets = sampled_targets(self.net, routed, utility_errors, k_cpt, self.optimistic)
        squared = [
            (routed.scores[j].gather(1, routed.decisions[j][:, None]).squeeze(1) - targets[j]).square().sum()
            for j in targets
        ]
        reach = self.paths.visited(routed.visits, size, self.dtype)
        macs = routed.macs.to(self.dtype)
        return {
            "c_err": errors.mean(),
            "c_cpt": (k_cpt * macs).mean(),
            "c_ure": self.config.k_ure * torch.stack(squared).sum() / size,
            "c_mod": self.c_mod(self.batch_mean(reach)),
            "reach": reach,
            "targets": targets,
            "accuracy": (routed.pred == labels).float().mean(),
            "mean_macs": macs.mean(),
        }

    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        # accuracy and MACs in the report: expectations (full tree) or the sampled paths
        return self.routed_step(self.losses(batch, iteration), ("c_err", "c_cpt", "c_ure", "c_mod"), iteration)
