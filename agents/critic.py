"""Critic learning (paper Sections 4.2-4.3): routers regress their scores onto utilities.

Each router's score for sink ``i`` of junction ``j`` learns to predict the utility
``u_j^i = -c_inf(ν_j^i)``, minus the cost of inference of the subtree below that sink: its
nodes' computation, ``k_cpt × cost`` (MACs or measured MAC-equivalents,
:class:`~routing_rl.core.k_cpt.CostModel`), plus the error at the leaf the subtree's decisions
lead to. The loss is

    L_cr = E[c_err] + E[Σ_{j ∈ J(d̂)} k_ure ‖s_j - u_j‖²] + c_mod,

with the training routing policy ``d̂`` a constant: its probabilities carry no gradient, and
the routers learn only from c_ure. The decisions below a sink make the two critics:
pragmatic (``pragmatic-critic``, alias ``critic``) takes the inference policy's argmax at every
junction below; optimistic (``optimistic-critic``) the cheapest of the subtree's paths, so
``u_j`` does not depend on the routers downstream of ``j``.

**Full tree** (``execution="full"``, the default for every policy). Every node runs on the
whole batch, so every target is exact: going up from the leaves, ``V(leaf) = k_cpt·cost(leaf)
+ error(leaf)``, ``V(node) = k_cpt·cost(node) + V(its sink)``, ``Q_j^i = V(sink i)``, ``u_j =
-Q_j`` and ``V(j) = k_cpt·cost(j) + Q_j^{argmax s_j}`` (pragmatic) or ``min_i Q_j^i``
(optimistic); each junction's c_ure weighs its reach probability, each leaf's error its path
probability. It is the default because on a chain sampling saves next to nothing: once every
column learns from every image (deep exploration, below) a sampled path is the whole chain, and
paths that stop early leave the deep columns only the examples sent to them, so the critic
values depth by what its own exploration happened to train.

**Sampled decisions** (``execution="sampled"``, the paper's). Each example follows one path
drawn from the training policy and only that path is computed. The same recursion runs along
it from its leaf up, each unobserved sink valued at the critic's own estimate ``-s_j^i``, so
sampled pragmatic targets are exact wherever the path below a junction is the argmax path;
c_ure sums the squared errors of the observed sinks. A column learns only from the examples
whose paths reach it, and that share sets how good the deep exits get, so two defaults keep the
deep columns from starving: **side heads** (``side_heads``: every exit head whose input the path
computed runs and learns on it, and every junction on the path observes its exit's true cost)
and **deep exploration** (``exploration="deep"``: training paths never take an exit, so each
runs to a deepest exit and every exit it passes is priced by its side head). Every column of
the chain then learns from every image, as on the full tree, and the routers learn every
sink's value off the policy that trains them; on the tree a path computes 8 of the 47 column
instances. The utility and rates are the full tree's (below). Before every evaluation the
batch-norm statistics are recomputed over :data:`CALIBRATION_IMAGES` training images routed
by the training policy at its current ε or τ (:func:`~routing_rl.training.batchnorm.recalibrate`):
in train mode each node normalised the small, shifting sub-batches that policy sent it, so its
weights fit the statistics of that population. The inference policy's population can differ
far from it (under wide exploration a deep column trains on every kind of image, and the
greedy policy then sends it only the hardest kind), and normalising by it misreads the
weights.

**Defaults of a critic on the full tree**, each a flag:

* ``head_weight`` 1, at lr 0.02: ``c_heads = w · mean_batch Σ_leaf CE(leaf)`` joins the loss,
  so every head learns on every image whatever the policy does. A head weighted by its path
  probability alone learns only from what the policy sends it, and the critic then values
  exits by heads its own routing starved. ``--head-weight 0`` at lr 0.1 is the paper's critic.
* ``router_lr_scale`` 100 (:data:`CRITIC_ROUTER_LR_SCALE`): a
  router's only loss is c_ure, weighted by k_ure, so at the columns' rate its scores barely
  leave each sink's mean utility and every image of a task goes to the same exit.
* ``utility_error`` ``zero_one``: in nats a deeper head looks more useful than the 0/1 error it
  is judged by counts; the heads still learn from cross-entropy.
* ``exit_confidence`` off: a new router input whose weights start at zero hardly moves in a
  short run, and one confidence number means different things for different sources.

The measurements behind each default, and what else was tried (``score_start="guess"``,
slower or faster routers, a uniform head share): ``docs/results/suite.md``, "The critics'
defaults: the evidence". TALR and c_mod see the fraction of the batch that reached each node
(:mod:`routing_rl.core.talr`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from routing_rl.core.paths import Paths
from routing_rl.agents.base import RouterOptions, SGDLearner
from routing_rl.training.sgd import leaf_correct, leaf_errors, training_policy
from routing_rl.training.config import EXECUTIONS, POLICIES, TrainConfig
from routing_rl.training.learners import JOINT_LR, LR, LearnerSpec, register_learner
from routing_rl.core.costs import ERROR_COSTS, guess_cost
from routing_rl.data import Split
from routing_rl.core.execution import RoutedOutput, argmax_decide, route
from routing_rl.core.graph import FullOutput, RoutedNet
from routing_rl.core.k_cpt import CostModel, c_cpt, expected_c_cpt
from routing_rl.core.policies import sample, sample_with
from routing_rl.core.seeds import seeded_generator
from routing_rl.training.batchnorm import recalibrate
from routing_rl.training.episodes import frame_examples

CALIBRATION_IMAGES = 4096
"""Training images whose routed statistics replace a sampled critic's batch-norm running
statistics before each evaluation."""


def full_targets(
    net: RoutedNet, output: FullOutput, errors: torch.Tensor, k_cpt: torch.Tensor, optimistic: bool,
    cost: CostModel | None = None,
) -> dict[str, torch.Tensor]:
    """Exact utilities ``u_j`` ``(B, n_sinks)`` of every junction, from a full evaluation.

    errors: ``(B, L)`` each leaf's error cost; k_cpt: ``(B,)``; cost: each node's (None: MACs).
    """
    node_cost = (cost or CostModel.macs(net)).node
    value: dict[str, torch.Tensor] = {}
    targets: dict[str, torch.Tensor] = {}
    for name in reversed(net.order):
        node = net.nodes[name]
        own = c_cpt(k_cpt, node_cost[name])
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
    net: RoutedNet,
    routed: RoutedOutput,
    errors: torch.Tensor,
    k_cpt: torch.Tensor,
    optimistic: bool,
    head_errors: dict[str, torch.Tensor] | None = None,
    cost: CostModel | None = None,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Utilities observed on the sampled paths; see the module docstring.

    errors: ``(B,)`` the error cost at each example's leaf; k_cpt: ``(B,)``.
    head_errors: leaf name -> ``(b,)`` error cost of the side heads that ran on every example
        at their junction (``route(..., side_heads=True)``, aligned with ``routed.heads``);
        None when only the path's own leaf ran.
    cost: each node's (None: MACs).
    Returns junction name -> ``(targets (b, n_sinks), observed (b, n_sinks) bool)``, aligned
    with ``routed.visits[j]``: a target exists where ``observed`` is True.
    """
    node_cost = (cost or CostModel.macs(net)).node
    head_errors = head_errors or {}
    below = torch.zeros_like(errors)  # per example: the cost of its path below the last node processed
    targets: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in reversed(net.order):  # descendants before ancestors, so each path runs leaf first
        if name not in routed.visits:
            continue
        index = routed.visits[name]
        node = net.nodes[name]
        if node.is_leaf:
            rest = errors[index]
        elif node.is_junction:
            scores, decision = routed.scores[name].detach(), routed.decisions[name]
            q = (-scores).scatter(1, decision[:, None], below[index][:, None])
            observed = torch.zeros_like(q, dtype=torch.bool).scatter(1, decision[:, None], True)
            for sink_number, sink in enumerate(node.sinks):
                if sink in head_errors:
                    q[:, sink_number] = c_cpt(k_cpt[index], node_cost[sink]) + head_errors[sink]
                    observed[:, sink_number] = True
            targets[name] = (-q, observed)
            rest = _subtree_cost(q, scores, optimistic)
        else:
            rest = below[index]
        below[index] = c_cpt(k_cpt[index], node_cost[name]) + rest
    return targets


def _subtree_cost(q: torch.Tensor, scores: torch.Tensor, optimistic: bool) -> torch.Tensor:
    """The cost below a junction, given each sink's cost ``q`` ``(b, n)``: the best sink's, or
    the one the inference policy (argmax of ``scores``) picks."""
    if optimistic:
        return q.min(1).values
    return q.gather(1, scores.argmax(1, keepdim=True)).squeeze(1)


class CriticLearner(SGDLearner):
    """Trains a routed net with a pragmatic (default) or optimistic critic.

    Its options (:class:`CriticOptions`, ``config.options``): ``execution`` picks the full tree
    or sampled decisions; ``policy`` the training routing policy (softmax, eps-greedy,
    greedy); ``score_start`` where the scores start (each router's last bias; its weight is 0).
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None,
                 optimistic: bool = False):
        if not net.junctions:
            raise ValueError("a critic learns routing; its net needs junctions (--arch chain or tree)")
        config.check_error_cost()
        super().__init__(net, config, device, cost)
        self.optimistic = optimistic
        self.policy = training_policy(config)
        options = config.options
        self.execution = options.execution
        self.paths = Paths(net)
        self.utility_error = options.utility_error
        self.same_error = self.utility_error == config.error_cost
        self.side_heads = options.side_heads
        self.priors = {"sink": {}, "leaf": self.paths.leaves_below(), "deep": self.paths.continuing_sinks()}[options.exploration]
        if options.score_start == "guess":
            for junction in net.junctions:
                net.nodes[junction].router.start_at(-guess_cost(net.classes, self.utility_error))

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
            reach = self.paths.reach({j: self.policy.probabilities(s.detach(), iteration, self.priors.get(j))
                                      for j, s in out.scores.items()})
            p_leaf = self.paths.leaves(reach)
        errors = leaf_errors(self.net, out, labels, error=self.error_cost)
        utility_errors = errors.detach() if self.same_error else leaf_errors(self.net, out, labels, self.utility_error,
                                                                             self.error_cost)
        targets = full_targets(self.net, out, utility_errors, k_cpt, self.optimistic, self.cost)
        regression = torch.stack(
            [(out.scores[j] - targets[j]).square().sum(1) for j in self.net.junctions], dim=1
        )
        reach_junction = reach[:, [self.paths.node_index[j] for j in self.net.junctions]]
        trained = (reach + self.config.options.head_weight).clamp(max=1.0)  # how much each node learns per image
        usage = self.batch_mean(trained)
        return {
            "c_err": (p_leaf * errors).sum(1).mean(),
            "c_cpt": expected_c_cpt(p_leaf, k_cpt, self.leaf_cost),
            "c_heads": self.config.options.head_weight * errors.sum(1).mean(),
            "c_ure": self.config.options.k_ure * (reach_junction * regression).sum(1).mean(),
            "c_mod": self.c_mod(usage),
            "reach": reach,
            "trained": trained,
            "usage": usage,
            "targets": targets,
            "accuracy": (p_leaf * leaf_correct(self.net, out, labels)).sum(1).mean(),
            "mean_macs": (p_leaf * self.leaf_macs).sum(1).mean(),
        }

    def _sampled_losses(self, batch: Split, iteration: int, k_cpt: torch.Tensor) -> dict[str, torch.Tensor]:
        k_cpt_input = k_cpt if self.net.k_cpt_input else None
        if self.distributed is None:
            decide, global_counts = sample(self.policy, iteration, self.generator, self.priors), None
        else:  # decisions drawn for the global batch, so that they do not depend on the process
            draws = torch.rand(len(self.net.junctions), self.config.batch_size, generator=self.generator,
                               device=self.device)[:, self.shard]
            decide = sample_with(self.policy, iteration, dict(zip(self.net.junctions, draws)), self.priors)
            global_counts = self.distributed.sum
        routed = route(self.net, batch.images, decide, k_cpt_input, self.side_heads, global_counts)
        labels, size = batch.labels, len(batch)
        errors = self.error_cost(routed.logits, labels, self.config.error_cost)
        utility_errors = errors.detach() if self.same_error else self.error_cost(routed.logits, labels, self.utility_error)
        head_losses = {leaf: self.error_cost(logits, labels[index]) for leaf, (index, logits) in routed.heads.items()}
        head_errors = None
        if self.side_heads:
            head_errors = {
                leaf: loss.detach() if self.same_error else self.error_cost(logits, labels[index], self.utility_error)
                for (leaf, (index, logits)), loss in zip(routed.heads.items(), head_losses.values())
            }
        targets = sampled_targets(self.net, routed, utility_errors, k_cpt, self.optimistic, head_errors, self.cost)
        squared = [
            ((routed.scores[j] - target).square() * observed).sum() for j, (target, observed) in targets.items()
        ]
        reach = self.paths.visited(routed.visits, size, self.dtype)
        for leaf, (index, _) in routed.heads.items():
            reach[index, self.paths.node_index[leaf]] = 1.0
        macs = routed.macs.to(self.dtype)
        # every head that ran learns from every example it ran on (the path's leaf alone without side heads)
        c_err = torch.stack([loss.sum() for loss in head_losses.values()]).sum() / size
        usage = self.batch_mean(reach)
        return {
            "c_err": c_err,
            "c_cpt": c_cpt(k_cpt, self.leaf_cost[routed.leaf]).mean(),
            "c_ure": self.config.options.k_ure * torch.stack(squared).sum() / size,
            "c_mod": self.c_mod(usage),
            "reach": reach,
            "usage": usage,
            "targets": targets,
            "accuracy": (routed.pred == labels).float().mean(),
            "mean_macs": macs.mean(),
        }

    def before_evaluation(self, train: Split, iteration: int) -> None:
        """Sampled execution: batch-norm statistics recomputed on :data:`CALIBRATION_IMAGES`
        training images routed by the training policy at ``iteration`` (see the module
        docstring); for a sequence task, frames of training clips with the memory the inference
        policy carried."""
        if self.execution != "sampled":
            return
        images = self.calibration_images(train)
        values = torch.tensor(self.k_cpt.values, dtype=self.dtype, device=self.device)
        k_cpt = values.repeat(len(images) // len(values) + 1)[: len(images)] if self.k_cpt.dynamic else None
        decide = sample(self.policy, iteration, seeded_generator(self.config.seed, self.device), self.priors)
        recalibrate(self.net, images, decide, k_cpt)

    def calibration_images(self, train: Split) -> torch.Tensor:
        """Up to :data:`CALIBRATION_IMAGES` net inputs of ``train`` in a seeded random order, on
        the learner's device (a sequence task's frames are made here and freed on return, so
        that only the picked copy is held while the statistics are recomputed)."""
        train = frame_examples(self.net, self.task, train, argmax_decide, self.eval_k_cpts()[0], CALIBRATION_IMAGES,
                               self.config.seed)
        generator = seeded_generator(self.config.seed)
        pick = torch.randperm(len(train), generator=generator)[:CALIBRATION_IMAGES]
        return train.images[pick.to(train.images.device)].to(self.device)

    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        # accuracy and MACs in the report: expectations (full tree) or the sampled paths
        names = ("c_err", "c_cpt", "c_heads", "c_ure", "c_mod") if self.config.options.head_weight else ("c_err", "c_cpt", "c_ure", "c_mod")
        return self.routed_step(self.losses(batch, iteration), names, iteration)


SCORE_STARTS = ("guess", "zero")
EXPLORATIONS = ("sink", "leaf", "deep")
CRITIC_ROUTER_LR_SCALE = 100.0
"""The routers' learning rate over ``lr`` for critics that train every head on every image: a
critic's router learns only from c_ure, whose weight k_ure (0.001) makes its steps 1,000 times
smaller than the columns'; at 1 its scores barely leave each sink's mean utility in a
``quick`` run."""


@dataclass
class CriticOptions(RouterOptions):
    """A critic's options. ``execution``: every node on every image (``full``) or the sampled
    decisions' paths only. On the full tree every head learns on every image (``head_weight``
    1), the routers regress the 0/1 error (``utility_error``, c_err inside the utilities) at
    :data:`CRITIC_ROUTER_LR_SCALE` × lr, at ``JOINT_LR``. Sampled, the same rates and utility
    with ``deep`` exploration, under which every head a path passes learns on it (with
    ``--side-heads false`` or another exploration, the paper's critic: cross-entropy utilities,
    routers at the columns' rate, ``LR``). ``epsilon``: the ε-greedy policy's ε, halving every
    ``epsilon_half_life`` iterations. ``k_ure``: c_ure's weight. ``score_start``: the paper's zero
    scores, or ``guess``: minus a uniform guess's error cost. ``side_heads``: sampled, also
    train every exit head on a junction the path passed (its input is computed).
    ``exploration``: where the training policy's exploring decisions go: a uniformly random
    sink (the paper's; the full tree's default), or ``leaf``: a sink in proportion to the leaves
    below it, so that full exploration reaches every exit equally often (column k of an L-exit
    chain sees (L − k + 1)/L of the batch, not 2^−(k−1)); or ``deep`` (sampled execution's
    default): only sinks that lead on to a column, for every policy (ε-greedy's argmax too), so
    every training path runs to a deepest exit and its side heads price every exit it passes.
    On the chain every column and head then learns from every image, as on the full tree; on the
    tree a path computes 8 of the 47 column instances, the policy choosing the copies. The
    routers learn the exits' values from the side heads and take them at inference."""

    execution: str = "full"
    head_weight: float | None = None
    utility_error: str | None = None
    router_lr_scale: float | None = None
    lr: float | None = None
    epsilon: float | None = 1.0
    epsilon_half_life: int = 500
    k_ure: float = 0.001
    score_start: str = "zero"
    side_heads: bool = True
    exploration: str | None = None

    def __post_init__(self) -> None:
        if self.exploration is None:
            self.exploration = "deep" if self.execution == "sampled" and self.side_heads else "sink"
        for name, value, choices in (("execution", self.execution, EXECUTIONS), ("score_start", self.score_start, SCORE_STARTS),
                                     ("exploration", self.exploration, EXPLORATIONS),
                                     ("utility_error", self.utility_error, (None, *ERROR_COSTS))):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(c for c in choices if c)}")
        if self.exploration == "deep" and not self.side_heads:
            raise ValueError("--exploration deep never explores an exit, so it prices the exits its paths pass only "
                             "through side heads: drop --side-heads false, or use --exploration leaf")
        if self.head_weight is None:
            self.head_weight = 1.0 if self.execution == "full" else 0.0
        elif self.head_weight and self.execution != "full":
            raise ValueError(f"--head-weight trains every head on every image of the full tree; a critic with "
                             f"--execution {self.execution} does not read it: drop it, or use --execution full")
        every_head = bool(self.head_weight) or self.exploration == "deep"  # deep: every head a path passes learns
        if self.utility_error is None:
            self.utility_error = "zero_one" if every_head else "cross_entropy"
        if self.router_lr_scale is None:
            self.router_lr_scale = CRITIC_ROUTER_LR_SCALE if every_head else 1.0
        if self.lr is None:
            self.lr = JOINT_LR if every_head else LR


for _name, _optimistic in (("pragmatic-critic", False), ("optimistic-critic", True)):
    register_learner(LearnerSpec(_name, CriticOptions, policies=POLICIES,
                                 builder=functools.partial(CriticLearner, optimistic=_optimistic),
                                 aliases=("critic",) if not _optimistic else ()))
