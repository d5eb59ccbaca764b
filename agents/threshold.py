"""Confidence-threshold early exit: an extra baseline beside the paper's learners.

One chain is trained with a head at every column and the cross-entropies of all heads summed,
every head but the deepest weighed by ``exit_weight``, and only ``trunk_gradient`` of each early
head's gradient passed on to the layers before it (no routing is learned; the routers are
never used). At inference an example leaves at the
first head whose **maximum softmax probability** reaches that head's threshold; the last head
takes everyone left.

Thresholds are chosen on a validation split for a cost budget (MACs, or MAC-equivalents under
a measured-latency :class:`~routing_rl.core.k_cpt.CostModel`), following MSDNet's
budgeted-batch protocol (Huang et al., 2018): for a parameter ``q`` the fraction of examples
meant to exit at head ``k`` is ``q^k / Σ_i q^i``; walking down the chain, head ``k``'s threshold
is set so that exactly that fraction of the validation split (among examples still present)
exits there. ``q`` is then searched (bisection on ``log q``) for the most expensive
thresholds whose mean validation cost stays within the budget.

Beside the budgets, one point is fitted to the run's own k_cpt: starting from the budget
whose validation cost (0/1 error + k_cpt × cost) is lowest, each head's threshold in turn is
moved to the value among quantiles of its validation confidence that lowers that cost most,
until a sweep changes nothing. The geometric fractions tie every head's exit share to one
number ``q``; freeing them lowers the test cost on the suite's tasks (``docs/results/suite.md``,
"A stronger threshold"), so a learner compared with "the tuned threshold" is compared with this one too.

Costs are counted by the shared evaluator, like every other learner: the MACs of the path to
the exit, which includes the routers on the way (unused here) but not the earlier heads the
rule evaluates to read their confidence. On the paper's chain each router costs a little more
than the head beside it, so the count is a slight overestimate — under 0.5% of the chain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from routing_rl.agents.base import SGDLearner
from routing_rl.training.episodes import frame_examples
from routing_rl.training.sgd import leaf_errors, scalars
from routing_rl.training.config import TrainConfig
from routing_rl.training.learners import LearnerOptions, LearnerSpec, register_learner
from routing_rl.data import Split
from routing_rl.core.execution import Decide, Junction
from routing_rl.core.graph import RoutedNet, State
from routing_rl.core.k_cpt import CostModel

LOG_Q_RANGE = (-20.0, 20.0)
"""Bisection range of log q: from (nearly) everyone at the first head to everyone at the last."""
BISECTION_STEPS = 50
EVALUATION_BUDGETS = 3
FITTED_CANDIDATES = 64
"""Thresholds tried per head when fitting to the validation cost: that many quantiles of the
head's validation confidence, and +inf (nobody exits there)."""
FITTED_SWEEPS = 10


def geometric_fractions(q: float, heads: int) -> torch.Tensor:
    """``(K,)`` the share of examples meant to exit at each head: ``q^k``, normalised."""
    log_shares = torch.arange(1, heads + 1, dtype=torch.float64) * math.log(q)
    return torch.softmax(log_shares, 0)


def thresholds_for_fractions(confidence: torch.Tensor, fractions: torch.Tensor) -> torch.Tensor:
    """``(K-1,)`` thresholds under which ``fractions[k]`` of the examples exit at head ``k``.

    confidence: ``(N, K)`` each head's max softmax probability, heads in depth order.
    Each threshold lies halfway between the confidence of the last example meant to exit and
    the next one, so that an example's exit does not hinge on rounding. Ties at a threshold
    all exit; a head where nobody should exit gets +inf.
    """
    n, heads = confidence.shape
    remaining = torch.ones(n, dtype=torch.bool, device=confidence.device)
    out_by = torch.round(n * fractions.cumsum(0)).long().tolist()  # rounding the running total keeps the counts summing to n
    thresholds = []
    for k in range(heads - 1):
        leaving = max(0, min(out_by[k] - (n - int(remaining.sum())), int(remaining.sum())))
        present = confidence[:, k].masked_fill(~remaining, -math.inf)
        if leaving == 0:
            threshold = math.inf
        else:
            top = present.topk(min(leaving + 1, n)).values.tolist()
            last_out, first_in = top[leaving - 1], (top[leaving] if leaving < len(top) else -math.inf)
            threshold = last_out if first_in == -math.inf else (last_out + first_in) / 2
        thresholds.append(threshold)
        remaining &= present < threshold
    return torch.tensor(thresholds, dtype=torch.float64)


def exit_positions(confidence: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """``(N,)`` the head each example exits at: the first whose confidence reaches its threshold."""
    bar = torch.cat([thresholds.to(confidence), confidence.new_full((1,), -math.inf)])
    return (confidence >= bar).int().argmax(1)


def budgeted_thresholds(confidence: torch.Tensor, head_cost: torch.Tensor, budget: float) -> torch.Tensor:
    """``(K-1,)`` MSDNet's budgeted-batch thresholds: those of the geometric exit shares
    (:func:`geometric_fractions`) with the largest ``q`` whose mean cost over the examples of
    ``confidence`` ``(N, K)`` stays within ``budget``; ``head_cost`` ``(K,)`` is each head's
    cost, heads in depth order. It reads only confidences, so any trained chain's heads can be
    routed by it, not only this learner's."""
    def fitted(log_q: float) -> torch.Tensor:
        return thresholds_for_fractions(confidence, geometric_fractions(math.exp(log_q), confidence.shape[1]))

    low, high = LOG_Q_RANGE
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        within = float(head_cost[exit_positions(confidence, fitted(middle))].mean()) <= budget
        low, high = (middle, high) if within else (low, middle)
    return fitted(low)


class _ScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, share: float, *tensors: torch.Tensor):
        ctx.share = share
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):
        return (None, *(None if g is None else g * ctx.share for g in grads))


def scale_gradient(state: State, share: float) -> State:
    """``state`` unchanged going forward; going back, ``share`` of the gradient through it.

    Before an early head this sets how hard the head pulls the shared layers towards its own
    features (Gradient Equilibrium, Li et al., 2019, scales gradients at a chain's branches in
    the same place), while the head's own weights still learn from its whole loss — unlike
    ``exit_weight``, which slows both."""
    if isinstance(state, torch.Tensor):
        return _ScaleGradient.apply(share, state)[0]
    if isinstance(state, (list, tuple)):
        return type(state)(scale_gradient(s, share) for s in state)
    if isinstance(state, dict):
        return {key: scale_gradient(value, share) for key, value in state.items()}
    raise TypeError(f"cannot scale the gradient through a state of type {type(state).__name__}")


@dataclass
class ThresholdOptions(LearnerOptions):
    """``exit_weight``: the weight of every head but the deepest in the training loss, beside
    the deepest head's 1. At 1 every head counts alike (MSDNet's sum). Each early head's
    gradient reaches only the stages before it, so the shared early stages learn for every
    head at once; below 1 they lean towards the features the deepest head needs, as the
    smaller weights Shallow-Deep Networks give their early heads do. ``trunk_gradient`` leans
    them the same way without slowing the early heads' own weights (:func:`scale_gradient`)."""

    exit_weight: float = field(default=1.0, metadata={"help": "weight of every head but the deepest in the training loss "
                                                              "(1: all alike; below 1 favours the deepest head)"})
    trunk_gradient: float = field(default=1.0, metadata={
        "help": "share of each early head's gradient passed on to the layers before it; the head itself learns at "
                "full rate (1: all; 0: the trunk learns for the deepest head alone)"})

    def __post_init__(self) -> None:
        for name, value in (("exit-weight", self.exit_weight), ("trunk-gradient", self.trunk_gradient)):
            if not 0 <= value <= 1:
                raise ValueError(f"--{name} must lie in [0, 1] (a share of an early head's pull on the net beside "
                                 f"the deepest head's 1), got {value!r}")


class ThresholdLearner(SGDLearner):
    """Trains every head of a chain and exits early on confidence thresholds.

    The thresholds start at +inf (everyone runs to the last head) until
    :meth:`fit_thresholds` sets them for a cost budget; :meth:`decide` routes with the current
    ones, :meth:`threshold_decide` with any.
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None):
        config.check_error_cost()
        self.chain_leaves, self.exit_sink = _chain_leaves(net)
        super().__init__(net, config, device, cost, regularise_routers=False)
        indices = [net.leaf_index[leaf] for leaf in self.chain_leaves]
        self.chain_leaf_macs = net.leaf_macs[indices].double().cpu()
        self.chain_leaf_cost = self.cost.leaf[indices]
        self.junction_position = {name: k for k, name in enumerate(net.junctions)}
        self.thresholds = torch.full((len(net.junctions),), math.inf, dtype=torch.float64)
        weights = torch.ones(len(net.leaves))
        weights[indices[:-1]] = config.options.exit_weight
        self.head_weights = weights.to(device)  # (leaves,): each head's weight in c_err
        share = config.options.trunk_gradient
        if share != 1:
            for leaf in self.chain_leaves[:-1]:
                net.nodes[leaf].transform.register_forward_pre_hook(lambda _, args: (scale_gradient(args[0], share), *args[1:]))

    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        out = self.net(batch.images)
        errors = leaf_errors(self.net, out, batch.labels, error=self.error_cost)
        c_err = (errors * self.head_weights).sum(1).mean()
        c_mod = self.c_mod()
        lr = self.step(c_err + c_mod, iteration)
        last = out.logits[self.chain_leaves[-1]]
        return scalars({
            "losses/c_err": c_err,
            "losses/c_mod": c_mod,
            "losses/total": c_err + c_mod,
            "charts/lr": lr,
            "charts/train_accuracy": (last.argmax(1) == batch.labels).float().mean(),  # the last head's
        })

    @torch.no_grad()
    def confidences(self, split: Split, batch_size: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, K)`` each head's max softmax probability and whether it is right, heads in depth
        order. For a sequence task, ``N`` counts frames, each with the memory that taking the
        last head at every frame carries (the routing before any threshold is set)."""
        deepest = self.threshold_decide(torch.full_like(self.thresholds, math.inf))
        split = frame_examples(self.net, self.task, split, deepest, self.config.k_cpt)
        was_training = self.net.training
        self.net.eval()
        confidence, correct = [], []
        try:
            for start in range(0, len(split), batch_size):
                x = split.images[start : start + batch_size].to(self.device)
                y = split.labels[start : start + batch_size].to(self.device)
                out = self.net(x)
                logits = torch.stack([out.logits[leaf] for leaf in self.chain_leaves], dim=1)
                confidence.append(F.softmax(logits, -1).amax(-1).double().cpu())
                correct.append((logits.argmax(-1) == y[:, None]).cpu())
        finally:
            self.net.train(was_training)
        return torch.cat(confidence), torch.cat(correct)

    def fit_thresholds(self, validation: Split, budget: float) -> torch.Tensor:
        """Choose (and keep) thresholds whose mean cost on ``validation`` stays within
        ``budget``; returns them ``(K-1,)``, one per junction in ``net.junctions``."""
        (result,) = self.calibrate(validation, [budget])
        self.thresholds = torch.tensor(result["thresholds"], dtype=torch.float64)
        return self.thresholds

    def calibrate(self, validation: Split, budgets: Sequence[float], measured: tuple | None = None) -> list[dict]:
        """For each cost budget: ``budget``, ``thresholds``, and the ``accuracy``, ``mean_cost``
        and ``mean_macs`` they give on ``validation``. Does not change :attr:`thresholds`.
        ``measured``: :meth:`confidences` of ``validation``, when already computed."""
        confidence, correct = measured if measured is not None else self.confidences(validation)
        results = []
        for budget in budgets:
            thresholds = budgeted_thresholds(confidence, self.chain_leaf_cost, budget)
            results.append(self._outcome(float(budget), thresholds, exit_positions(confidence, thresholds), correct))
        return results

    def fit_to_cost(self, validation: Split, k_cpt: float, start: torch.Tensor, measured: tuple | None = None) -> dict:
        """Thresholds that lower the mean cost on ``validation``, 0/1 error + ``k_cpt`` × cost,
        by coordinate descent from ``start`` ``(K-1,)``: fields as :meth:`calibrate`'s, with
        ``budget`` the mean cost they spend. Never costlier on ``validation`` than ``start``.
        ``measured``: :meth:`confidences` of ``validation``, when already computed."""
        confidence, correct = measured if measured is not None else self.confidences(validation)
        error = 1.0 - correct.double()
        leaf_cost = self.chain_leaf_cost.double().cpu()

        def cost_of(thresholds: torch.Tensor) -> float:
            position = exit_positions(confidence, thresholds)
            return float((error.gather(1, position[:, None]).squeeze(1) + k_cpt * leaf_cost[position]).mean())

        levels = torch.linspace(0, 1, FITTED_CANDIDATES, dtype=torch.float64)
        candidates = [torch.cat([confidence[:, k].quantile(levels), torch.tensor([math.inf], dtype=torch.float64)])
                      for k in range(confidence.shape[1] - 1)]
        thresholds, best = start.clone().double(), cost_of(start.double())
        for _ in range(FITTED_SWEEPS):
            moved = False
            for k, values in enumerate(candidates):
                for value in values.tolist():
                    trial = thresholds.clone()
                    trial[k] = value
                    trial_cost = cost_of(trial)
                    if trial_cost < best - 1e-12:
                        thresholds, best, moved = trial, trial_cost, True
            if not moved:
                break
        position = exit_positions(confidence, thresholds)
        return self._outcome(float(leaf_cost[position].mean()), thresholds, position, correct)

    def _outcome(self, budget: float, thresholds: torch.Tensor, position: torch.Tensor, correct: torch.Tensor) -> dict:
        """What ``thresholds`` give on the examples that exit at ``position`` ``(N,)``."""
        return {"budget": budget, "thresholds": thresholds.tolist(),
                "accuracy": float(correct.gather(1, position[:, None]).double().mean()),
                "mean_cost": float(self.chain_leaf_cost[position].mean()),
                "mean_macs": float(self.chain_leaf_macs[position].mean())}

    def budget_grid(self, points: int = 8) -> list[float]:
        """Cost budgets spaced geometrically from the first head's cost to the last's."""
        low, high = float(self.chain_leaf_cost[0]), float(self.chain_leaf_cost[-1])
        return torch.logspace(math.log10(low), math.log10(high), points, dtype=torch.float64).tolist()

    def threshold_decide(self, thresholds: torch.Tensor) -> Decide:
        """Exit at a junction's head when its max softmax probability reaches the threshold."""
        thresholds = thresholds.tolist()

        def decide(junction: Junction) -> torch.Tensor:
            exit_sink = self.exit_sink[junction.name]
            head = self.net.nodes[self.net.nodes[junction.name].sinks[exit_sink]]
            confidence = F.softmax(head(head.reads(junction.state)).state, 1).amax(1)
            leave = confidence >= thresholds[self.junction_position[junction.name]]
            return torch.where(leave, exit_sink, 1 - exit_sink)

        return decide

    def evaluation_points(self, validation: Split) -> list[tuple[dict, float, Decide]]:
        """Three cost budgets between the first and the last head's cost, thresholds fitted on
        ``validation`` for each: the baseline's accuracy/cost curve; then the thresholds fitted
        to the validation cost at the run's k_cpt (:meth:`fit_to_cost`, from the cheapest
        budget there). Each point's fields hold its ``validation_accuracy`` and
        ``validation_mean_macs``, to choose a point on."""
        k_cpt = float(self.config.k_cpt)
        measured = self.confidences(validation)
        results = self.calibrate(validation, self.budget_grid(EVALUATION_BUDGETS + 2)[1:-1], measured)
        cheapest = min(results, key=lambda r: 1.0 - r["accuracy"] + k_cpt * r["mean_cost"])
        fitted = self.fit_to_cost(validation, k_cpt, torch.tensor(cheapest["thresholds"], dtype=torch.float64), measured)
        points = []
        for result in [*results, fitted]:
            budget = result["budget"]
            self.thresholds = torch.tensor(result["thresholds"], dtype=torch.float64)
            label = (f"fitted to the validation cost at k_cpt {k_cpt:g}" if result is fitted
                     else f"budget {budget:.3g} {self.cost.unit}")
            fields = {"budget": budget, "budget_unit": self.cost.unit, "label": label,
                      "validation_accuracy": result["accuracy"], "validation_mean_macs": result["mean_macs"]}
            points.append((fields, k_cpt, self.threshold_decide(self.thresholds)))
        return points

    def decide(self, k_cpt: float | None) -> Decide:
        return self.threshold_decide(self.thresholds)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "thresholds": self.thresholds}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.thresholds = state["thresholds"].cpu()


def _chain_leaves(net: RoutedNet) -> tuple[list[str], dict[str, int]]:
    """The heads of a chain in depth order, and each junction's exit sink number.

    A chain here: every junction has two sinks, one a leaf (its exit), and the deepest leaf's
    path passes through every junction.
    """
    exits, exit_sink = [], {}
    for name in net.junctions:
        sinks = net.nodes[name].sinks
        leaves = [i for i, sink in enumerate(sinks) if net.nodes[sink].is_leaf]
        if len(sinks) != 2 or len(leaves) != 1:
            raise ValueError("threshold early exit needs a chain (each junction: exit or continue); use --arch chain")
        exit_sink[name] = leaves[0]
        exits.append(sinks[leaves[0]])
    last = [leaf for leaf in net.leaves if leaf not in exits]
    if len(last) != 1 or [j for j, _ in net.path[last[0]]] != net.junctions:
        raise ValueError("threshold early exit needs a chain (each junction: exit or continue); use --arch chain")
    return exits + last, exit_sink


register_learner(LearnerSpec("threshold", options=ThresholdOptions, builder=ThresholdLearner, nets="chain", routers=False))
