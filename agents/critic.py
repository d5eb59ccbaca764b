"""Critic learning (paper Sections 4.2-4.3): routers regress their scores onto utilities.

Each router's score for sink ``i`` of junction ``j`` learns to predict the utility
``u_j^i = -c_inf(ν_j^i)``, minus the cost of inference of the subtree below that sink: its
nodes' computation, ``k_cpt × cost`` (transforms and routers of the subtree; cost in MACs or
measured MAC-equivalents, :class:`~routing_rl.core.k_cpt.CostModel`), plus the error
at the leaf the subtree's decisions lead to. The loss is

    L_cr = E[c_err] + E[Σ_{j ∈ J(d̂)} k_ure ‖s_j - u_j‖²] + c_mod,

with the training routing policy ``d̂`` a constant: its probabilities carry no gradient, and
the routers learn only from the regression term c_ure. What "the decisions below the sink"
are makes the two critics:

* pragmatic (``pragmatic-critic``, alias ``critic``): the current inference policy's — argmax of the scores at every
  junction below;
* optimistic (``optimistic-critic``): the best ones — the minimum cost over the subtree's
  paths, so ``u_j`` does not depend on the routers downstream of ``j``.

Inside the utility the error is the 0/1 classification error (``utility_error = "zero_one"``,
the paper's variant for nonsmooth costs; the default for critics that train every head on
every image, below) or cross-entropy (the paper's, and the default otherwise); the heads
always learn from cross-entropy.

Two executions build the targets:

**Full tree** (exact). Every node runs on the whole batch, so every subtree's cost is known
for every example. Going up from the leaves, ``V(leaf) = k_cpt·cost(leaf) + error(leaf)``,
``V(node) = k_cpt·cost(node) + V(its sink)``, and at a junction
``Q_j^i = V(sink i)``, ``u_j = -Q_j`` and ``V(j) = k_cpt·cost(j) + Q_j^{argmax s_j}``
(pragmatic) or ``min_i Q_j^i`` (optimistic). c_ure and c_err are averaged over the training
policy: each junction's term weighted by its reach probability, each leaf's error by its
path probability.

**Sampled decisions.** Each example follows one path drawn from the training policy and only
that path is computed, so below a junction only the cost of the sink that was taken is
observed. The targets are built by the same recursion along the sampled path, from its leaf
up, with every unobserved sink valued at the critic's own estimate ``-s_j^i``:

* at each junction ``j`` on the path the taken sink ``d_j`` gets the target
  ``u_j^{d_j} = -Q̂``, ``Q̂`` the cost observed below it (its subtree's value as computed by
  this recursion); with side heads (below) every exit head of ``j`` is observed too and
  gets its own target; the other sinks get none (nothing was observed there);
* going up, ``q_i = -s_j^i`` for the unobserved sinks and the observed cost for the others,
  and ``V(j) = k_cpt·cost(j) + q_{argmax s_j}`` (pragmatic: the observed cost when the
  sampled decision was the inference decision, the critic's estimate otherwise) or
  ``min_i q_i`` (optimistic: the best of the observed branches and the estimated others).

So sampled pragmatic targets equal the exact ones wherever the sampled path below a junction
is the argmax path (always, with ``--policy greedy``), and both critics fall back on
bootstrapped estimates only where the path left what they would have chosen. c_ure sums the
squared errors of the observed sinks of the junctions on each example's path (a one-sample
estimate of the expectation over ``d̂``), c_mod weights each node by the fraction of the
batch whose path went through it, and TALR uses that fraction as its mean ``p²`` (see
:mod:`routing_rl.core.talr`).

**The full tree is every policy's default; why.** With sampled decisions a column, and its
head, learn only from the examples the training policy sends there, so the critic values
depth by what under-trained columns deliver, and is right to: what it learns depends on how
its exploration happened to train the features. On hybrid the zero-initialised scores (an
unobserved continuation looks free) kept sending images deep long enough for column 2 to
train; on the task suite's ``hybrid-hard-digits``, where depth pays for the digits, the same
optimism sent every image to exit 8 for a while and the run ended at exit 1, 3.3 points
under the static frontier, and with the test-mix validation split (2,090 more CIFAR training
images) the same command on hybrid fell from 91.6% to 85.4%. Removing the optimism
(``score_start="guess"``: scores start at minus a uniform guess's cost), or letting the routers
track their targets faster (``router_lr_scale`` 10-30; 100 diverges), makes every image exit at
column 1 on both tasks (81-86% on hybrid): the critic then values the starved deep columns
correctly. On the full tree every column trains on every image (its head weighted by the
training policy's path probability) and every target is exact; the same ε-greedy critic,
with nothing else changed, reaches 90.16% at 2.74M MACs on hybrid (digits at exit 1, CIFAR
at exit 2) and 77.63% on hybrid-hard-digits, 10 points above its static frontier
(``quick``, seed 0; ``docs/suite.md`` has the runs, seeds and commands). A full-tree step
costs a static-8 step per image, as the actor's does. Each head's error weighs its path
probability alone: spreading a share of it evenly over the heads, as the env's joint training
does for the SB3 agents, cost 1.2-23 points against the static frontier in four runs on
hybrid and two variants (``docs/suite.md``): it pulls the shared columns away from the heads
in use. That was at lr 0.1, where eight heads' gradients summed overwhelm the first columns
(the threshold's all-heads chain fails there too).

**Every head learns on every image: the full-tree default since the task suite.**
``head_weight`` w adds ``c_heads = w · mean_batch Σ_leaf CE(leaf)`` to the loss (the routers
still learn only from c_ure; TALR and c_mod see every node reached); its default on the full
tree is 1, with lr 0.02, the threshold's validated rate (``TrainConfig.resolved_lr``). Why: a
head weighted by its path probability alone learns from the images the policy sends it, so
the critic values exits by heads its own routing starved; on cifar10 the best head of the
previous default (w = 0, lr 0.1) stayed 4.7 points under static-3 and the critic ended 0.82
points under the static frontier. With w = 1 at lr 0.02, ``quick``, seed 0, k_cpt 4e-9, it is
within 0.5 point of the frontier or above it on every suite task measured (cifar10 −0.05,
hybrid +1.34, hard-digits +15.2, hybrid-even +0.59, swap +2.00, cifar5 −0.18) and its cost of
inference is lower than before on hybrid, hard-digits, hybrid-even and cifar10, the same on
swap and higher on cifar5, where it stops at exit 2 and exit 1 alone costs less
(``docs/suite.md``, "Heads that learn on every image"). ``--head-weight 0`` is the paper's
critic. ``--execution sampled`` keeps the paper's sampled decisions (heads learn where the
paths go; ``head_weight`` is refused there), whose defaults follow.

**Routers that learn per image: the 0/1 utility at 100× the rate (the default with
head_weight > 0).** With those heads the critic still routed every image of a task to one
exit, and at k_cpt 1.6e-8 to a costly one (hybrid: exit 3, cost 0.210, where exit 1 alone
costs 0.206). Two things did it, measured on its own nets:

* *The routers barely learned.* A router's only loss is c_ure, weighted by k_ure = 0.001, so
  at the columns' rate it steps a thousand times less than they do. On the test split the
  difference between a junction's two scores varied by at most ±0.046 between images while the
  true utility difference varied by ±0.13-0.55, with correlation ≈ 0; on hybrid-hard-digits
  the routers did not even learn the sources' means (digits +0.014, CIFAR +0.023, where
  continuing was worth +0.48 and +0.05 at column 1). ``router_lr_scale`` defaults to 100
  (:data:`~routing_rl.training.config.CRITIC_ROUTER_LR_SCALE`: routers at lr 2, which is
  0.002 on the squared error): the score differences then vary by ±0.14 between images and
  follow the targets (correlation 0.39 at column 1), and hard-digits sends every digit to
  exit 5 and the CIFAR images mostly to exit 3.
* *Utilities in nats value depth at two to three times what it buys.* Between a net's exits 1
  and 3 the mean cross-entropy falls by 0.25-0.32 nats where the 0/1 error falls by 0.09-0.10
  (hybrid, hybrid-train-mix), so a router regressing cross-entropy pays for depth the judge
  (0/1 error + k_cpt × MACs) does not count; ``utility_error`` defaults to ``zero_one`` (the
  heads still learn from cross-entropy). Alone, with slow routers, it is no default: it finds
  the exit that is cheapest on the *training* mix (86% CIFAR), which on hybrid-hard-digits at
  1.6e-8 is exit 1 (cost 0.487 on the 1:1 test split, against 0.367 in nats).

Together (``quick``, seed 0): hybrid-hard-digits 85.38% at 10.97M MACs, cost 0.190 at k_cpt
4e-9 (in nats, slow routers: 0.217; the fitted threshold 0.217) and 0.301 at 1.6e-8 (0.367);
hybrid at 1.6e-8 91.67% at 5.37M, cost 0.169 (0.210; the threshold 0.176), digits at exit 3
and 70% of the CIFAR images at exit 1. The suite-wide table, the seeds and what it costs on
hybrid at 4e-9: ``docs/suite.md``, "Routers that learn per image". Weighting the regression
by source to the test split's mix instead (slow routers) did not help (hard-digits 0.283).

``exit_confidence`` stays off. With routers this fast the critic does learn from its exits'
confidence (``--exit-confidence true``): its routing beats its net's cheapest single exit by
more on five suite tasks at 4e-9 and hybrid costs 0.093 (the default 0.117, the fitted
threshold 0.107; 0.104 at seed 1 against 0.115), but it costs more on hybrid-hard-digits at
both prices and in both seeds run (0.283 and 0.255 against 0.190 and 0.216 at 4e-9: weaker
heads on the digits, and at seed 0 the digits stopped a column early, likely because one
confidence number means different things for the two sources and 93% of the training images
are photos) and on hybrid-swap at 1.6e-8 it ends 1.65 points under the frontier
(``docs/suite.md``, "The critic with routers that learn per image").

**What makes sampled learning work (the defaults for ``--execution sampled``).** Sampled
decisions starve the deep part of the net: a column, and its head, learn only from the
examples the training policy sends there. With ε 0.1 from the start, the first head is the
only well-trained one, its exit looks cheapest, fewer examples go deeper, and the critic
collapses to "exit at column 1" (issue 10). Two defaults fix it, at no extra column MACs:

* **Side heads** (``side_heads``, on by default). A path that passes column ``k`` has
  computed the inputs of the exit heads of columns ``1..k``; those heads are a linear layer
  each (about 0.1% of a column's MACs), so :func:`~routing_rl.core.execution.route` runs them
  on every example at their junction. c_err is the sum of every head's cross-entropy over
  the examples it ran on (the path's own leaf alone without side heads), and every junction
  on the path observes its exit's true cost, not only the taken sink's.
* **ε from 1, annealed** (``epsilon`` defaults to 1.0 for critics, halving every
  ``epsilon_half_life``), as SB3's DQN explores: early on every column is reached by a
  share of every batch (half of the examples pass each junction), so the deep columns and
  heads train before the critic commits, and the critic's own argmax takes over as ε falls.

Measured on hybrid, chain, k_cpt 4e-9, seed 0, 800 iterations of batch 128, lr 0.1 (halving
every 200 iterations in the first two rows, every 2,000 in the others), ε halving every 100
iterations, on the CPU; test split, accuracy of digits / CIFAR images:

=====================================  =========  =========  ===============  =====  ========
configuration                          test acc   mean MACs  digits / CIFAR   exits  BN recal
=====================================  =========  =========  ===============  =====  ========
ε 0.1, path head only (lr h.-l. 200)   58.77%     2.26M      —                1-4    no
ε 0.1, side heads (lr h.-l. 200)       61.99%     1.72M      48.0 / 75.5 %    1      no
ε 0.1, side heads                      79.48%     1.40M      82.4 / 76.6 %    1      no
ε from 1, path head only               79.14%     1.49M      80.5 / 77.8 %    1      yes
ε from 1, side heads                   87.82%     4.12M      93.6 / 82.0 %    1-2    no
ε from 1, side heads                   88.60%     4.50M      94.4 / 82.7 %    1-2    yes
=====================================  =========  =========  ===============  =====  ========

Either change alone leaves the critic at "exit 1"; together they train column 2 well enough
that the critic sends the digits and about 60% of the CIFAR images there (on hybrid: not on
every task, above). With both, on the
full ``cpu-small`` schedule (4,000 iterations; the README's reproduction table), the sampled
pragmatic critic lies above the static nets' accuracy/MAC curve in three seeds out of three at
k_cpt 4e-9 (92.70 ± 0.83% test accuracy at 5.04 ± 0.88M MACs, +1.37 ± 0.31 points over the
curve) and at 1.6e-8 (91.18% at 2.31M, +2.45), with digits leaving earlier than CIFAR images
in every run.

**Batch norm.** In train mode a node normalises by the statistics of the sub-batch that
reached it, and its running statistics are a moving average of those small, shifting
sub-batches. Before every validation and the final test evaluation a sampled critic
recomputes them (:func:`~routing_rl.training.batchnorm.recalibrate`) as exact averages over
:data:`CALIBRATION_IMAGES` training images routed by the inference policy, so evaluation
normalises each node's inputs by the statistics of the examples that really reach it (+0.8
test points above). The 8-12 point gap between validation and test that issue 10 saw is
mostly not batch norm: validation keeps train's mix (14% digits), test is half digits, and a
starved critic classifies digits worst (48% against 75.5% for CIFAR in the second row).

**What the routers read.** ``--exit-confidence true`` lets every router also read its exit
heads' log top softmax probability, the confidence threshold's signal. It stays off for the
critics: their routers learn only from c_ure, weighted by k_ure, and a new input whose
weights start at zero barely moved in a ``quick`` run (hybrid, seed 0: every image still at
exit 2, cost 0.121 against 0.119 without it); a scratch version that added the confidence
straight to each exit's score made routing worse (cost 0.142), because unconfident untrained
heads made early exits look costly and the full tree then trained those heads less
(``docs/suite.md``, "Routers that read their exits' confidence").
"""

from __future__ import annotations

import torch

from routing_rl.core.paths import Paths
from routing_rl.agents.base import SGDLearner
from routing_rl.training.sgd import leaf_correct, leaf_errors, training_policy
from routing_rl.training.config import TrainConfig
from routing_rl.core.costs import error_cost, guess_cost
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

    ``config.execution`` picks the full tree or sampled decisions;
    ``config.resolved_policy`` the training routing policy (softmax, eps-greedy, greedy);
    ``config.score_start`` where the scores start (each router's last bias; its weight is 0).
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None,
                 optimistic: bool = False):
        if not net.junctions:
            raise ValueError("a critic learns routing; its net needs junctions (--arch chain or tree)")
        config.check_error_cost()
        super().__init__(net, config, device, cost)
        self.optimistic = optimistic
        self.policy = training_policy(config)
        self.execution = config.execution
        self.paths = Paths(net)
        self.utility_error = config.resolved_utility_error
        self.same_error = self.utility_error == config.error_cost
        self.side_heads = config.side_heads
        if config.score_start == "guess":
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
            reach = self.paths.reach({j: self.policy.probabilities(s.detach(), iteration) for j, s in out.scores.items()})
            p_leaf = self.paths.leaves(reach)
        errors = leaf_errors(self.net, out, labels)
        utility_errors = errors.detach() if self.same_error else leaf_errors(self.net, out, labels, self.utility_error)
        targets = full_targets(self.net, out, utility_errors, k_cpt, self.optimistic, self.cost)
        regression = torch.stack(
            [(out.scores[j] - targets[j]).square().sum(1) for j in self.net.junctions], dim=1
        )
        reach_junction = reach[:, [self.paths.node_index[j] for j in self.net.junctions]]
        trained = (reach + self.config.resolved_head_weight).clamp(max=1.0)  # how much each node learns per image
        usage = self.batch_mean(trained)
        return {
            "c_err": (p_leaf * errors).sum(1).mean(),
            "c_cpt": expected_c_cpt(p_leaf, k_cpt, self.leaf_cost),
            "c_heads": self.config.resolved_head_weight * errors.sum(1).mean(),
            "c_ure": self.config.k_ure * (reach_junction * regression).sum(1).mean(),
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
            decide, global_counts = sample(self.policy, iteration, self.generator), None
        else:  # decisions drawn for the global batch, so that they do not depend on the process
            draws = torch.rand(len(self.net.junctions), self.config.batch_size, generator=self.generator,
                               device=self.device)[:, self.shard]
            decide = sample_with(self.policy, iteration, dict(zip(self.net.junctions, draws)))
            global_counts = self.distributed.sum
        routed = route(self.net, batch.images, decide, k_cpt_input, self.side_heads, global_counts)
        labels, size = batch.labels, len(batch)
        errors = error_cost(routed.logits, labels, self.config.error_cost)
        utility_errors = errors.detach() if self.same_error else error_cost(routed.logits, labels, self.utility_error)
        head_losses = {leaf: error_cost(logits, labels[index]) for leaf, (index, logits) in routed.heads.items()}
        head_errors = None
        if self.side_heads:
            head_errors = {
                leaf: loss.detach() if self.same_error else error_cost(logits, labels[index], self.utility_error)
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
            "c_ure": self.config.k_ure * torch.stack(squared).sum() / size,
            "c_mod": self.c_mod(usage),
            "reach": reach,
            "usage": usage,
            "targets": targets,
            "accuracy": (routed.pred == labels).float().mean(),
            "mean_macs": macs.mean(),
        }

    def before_evaluation(self, train: Split) -> None:
        """Sampled execution: batch-norm statistics recomputed on :data:`CALIBRATION_IMAGES`
        training images routed by the inference policy (see the module docstring); for a
        sequence task, frames of training clips with the memory that policy carried."""
        if self.execution != "sampled":
            return
        images = self.calibration_images(train)
        values = torch.tensor(self.k_cpt.values, dtype=self.dtype, device=self.device)
        k_cpt = values.repeat(len(images) // len(values) + 1)[: len(images)] if self.k_cpt.dynamic else None
        recalibrate(self.net, images, argmax_decide, k_cpt)

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
        names = ("c_err", "c_cpt", "c_heads", "c_ure", "c_mod") if self.config.resolved_head_weight else ("c_err", "c_cpt", "c_ure", "c_mod")
        return self.routed_step(self.losses(batch, iteration), names, iteration)
