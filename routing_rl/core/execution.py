"""Three ways to run a :class:`~routing_rl.core.graph.RoutedNet` on a batch.

* :func:`full` — every node on the whole batch (``net(x)``): every router's scores and every
  head's logits. Exact expectations over paths (the actor) need it.
* :func:`route` — each example follows one path, chosen junction by junction by a
  ``decide`` function; each node runs only on the examples that reach it (gather the
  sub-batch, run, hand it on), so skipped work is really skipped. :func:`dynamic` is
  ``route`` with argmax decisions, for inference; sampled training passes a sampling
  policy instead.
* :func:`follow` — the same argmax routing read off a :class:`FullOutput` (no recompute).

In eval mode, :func:`dynamic` and :func:`follow` of :func:`full` give identical leaves,
predictions and MACs: batch norm then treats each example on its own.

The first :func:`route` (so :func:`dynamic`) on a CPU tensor applies
:func:`~routing_rl.core.memory.retain_freed_memory`, as the command-line tools do: without it
a large batch spends more time in page faults than in convolutions, and a user's own
inference script would get the slow path (0.68–0.76 of perfect skipping instead of 0.9+).
Set ``ROUTING_RL_RETAIN_FREED_MEMORY=0`` to keep the C allocator's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn

from routing_rl.core.graph import FullOutput, RoutedNet, State, take
from routing_rl.core.memory import retain_by_default

MIN_BATCH_STATISTICS = 2
"""The fewest examples a node learns from in one training batch of :func:`route`. A node
handed fewer is run as at evaluation, by its batch norms' running statistics, and without
gradient: it neither learns from them nor passes them on to the nodes before it. Batch norm
makes a layer's output blind to its weights' scale, so only statistics taken with the
current weights normalise it. A lone example's own statistics have a spread near zero (the
gradient then scales with ``1/sqrt(eps)``), and the running statistics of a node that few
examples reach lag behind its weights, all the further as it learns from those few, until
they blow its outputs up (``docs/results/sampled-critic.md``, "A node a batch reaches with one
example does not learn from it")."""


@dataclass(frozen=True)
class Junction:
    """What a routing policy sees when ``b`` examples stand at one junction.

    name: the junction's node name.
    scores: ``(b, n_sinks)`` the router's scores.
    descriptor: ``(b, D)`` the router's input features (without k_cpt).
    k_cpt: the examples' cost per MAC: None, a float, or a ``(b,)`` tensor.
    index: ``(b,)`` int64 positions of these examples in the batch.
    state: the junction node's state for these examples (what its sinks read), for
        policies that look past the scores, such as early exit on a head's confidence.
    """

    name: str
    scores: torch.Tensor
    descriptor: torch.Tensor
    k_cpt: float | torch.Tensor | None
    index: torch.Tensor
    state: State | None = None


Decide = Callable[[Junction], torch.Tensor]
"""``decide(junction) -> (b,)`` int64: the sink each example at the junction takes."""


@contextmanager
def running_statistics(module: nn.Module) -> Iterator[None]:
    """Inside this block every batch-norm layer of ``module`` normalises with its running
    statistics and leaves them alone (eval mode), whatever the module's mode; gradients flow
    as through any affine layer."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    for norm in norms:
        norm.train(False)
    try:
        yield
    finally:
        for norm in norms:
            norm.train(True)


@contextmanager
def _untrained(module: nn.Module) -> Iterator[None]:
    """A run that neither trains ``module`` nor moves its statistics: no gradient, and batch
    norm by the running statistics (see :data:`MIN_BATCH_STATISTICS`)."""
    with running_statistics(module), torch.no_grad():
        yield


def full(net: RoutedNet, x: torch.Tensor, k_cpt=None) -> FullOutput:
    """Every node on the whole batch; see :meth:`RoutedNet.forward`."""
    return net(x, k_cpt)


@dataclass
class RoutedOutput:
    """Result of routing each example along one path.

    logits: ``(B, classes)`` — the logits of the leaf each example reached.
    leaf: ``(B,)`` int64 — index into ``net.leaves``.
    macs: ``(B,)`` int64 — MACs each example used (transforms and routers on its path).
    visits: node name -> ``(b,)`` int64 indices (into the batch) of the examples that
        reached that node; nodes no example reached are absent.
    scores: junction name -> ``(b, n_sinks)`` router scores of those examples.
    decisions: junction name -> ``(b,)`` int64 sink each of those examples took.
    heads: leaf name -> ``(index (b,), logits (b, classes))``, every head that ran and on
        which examples: the leaf each example reached, and with ``route(..., side_heads=True)``
        also every head hanging off a junction on its path.
    """

    logits: torch.Tensor
    leaf: torch.Tensor
    macs: torch.Tensor
    visits: dict[str, torch.Tensor]
    scores: dict[str, torch.Tensor]
    decisions: dict[str, torch.Tensor]
    heads: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def pred(self) -> torch.Tensor:
        return self.logits.argmax(1)


def argmax_decide(junction: Junction) -> torch.Tensor:
    """The inference routing policy: the highest-scoring sink."""
    return junction.scores.argmax(1)


def _split(
    choice: torch.Tensor, n_sinks: int, global_counts: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> list[tuple[int, torch.Tensor | None, int]]:
    """``[(sink number, positions, count), ...]`` for the sinks some example chose; positions
    are indices into ``choice``, ascending, or None when every example chose that sink; count
    is how many examples chose it. With ``global_counts`` (see :func:`route`), the sinks some
    process's example chose, and their counts over every process: every process gets the same
    sinks in the same order, some with no positions here."""
    if global_counts is None:
        if choice.numel() == 1:
            return [(int(choice), None, 1)]
        counts = torch.bincount(choice, minlength=n_sinks).tolist()
        totals = counts
    else:
        local = torch.bincount(choice, minlength=n_sinks)
        totals = global_counts(local).tolist()
        counts = local.tolist()
    if max(counts) == choice.numel():  # every example here (if any) chose one sink
        whole = counts.index(choice.numel()) if choice.numel() else None
        none_here = choice.new_empty(0)
        return [(k, None if whole in (k, None) else none_here, totals[k]) for k in range(n_sinks) if totals[k] > 0]
    # one stable sort instead of a comparison and a nonzero per sink
    groups = torch.argsort(choice, stable=True).split(counts)
    return [(number, positions, totals[number]) for number, positions in enumerate(groups) if totals[number] > 0]


def route(
    net: RoutedNet,
    x: torch.Tensor,
    decide: Decide,
    k_cpt=None,
    side_heads: bool = False,
    global_counts: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> RoutedOutput:
    """Run each example along the path ``decide`` picks, computing only what is on it.

    Differentiable: gradients reach every transform, router and head an example passed
    through. ``k_cpt`` may be a float or a ``(B,)`` tensor (one cost per example). When
    every example at a junction takes the same sink, its whole state passes on ungathered.

    ``side_heads``: also run, on every example at a junction, each head that is one of the
    junction's sinks (``RoutedOutput.heads``). A head's input is the junction's state, which
    the path computed anyway, so this costs only the heads' own MACs (a linear layer, about
    0.1% of a column's); ``RoutedOutput.macs`` still counts the path alone. Training uses it
    to give every head, and the exit utility of every junction, all the examples whose path
    passed by (see :mod:`routing_rl.agents.critic`).

    ``global_counts`` is for data-parallel training, where ``x`` is one process's shard: it
    maps this shard's ``(n_sinks,)`` example counts at a junction to the counts over every
    process. A sink then runs (possibly on no example) wherever any process sends examples
    to it, so that every process runs the same nodes in the same order and their batch-norm
    statistics are reduced in step; ``visits`` then also holds such empty runs.

    In training mode, a node that a junction hands fewer than :data:`MIN_BATCH_STATISTICS`
    examples (over every process), and each side head it runs, neither learns from them nor
    moves its batch-norm statistics; the root always learns from the batch.
    """
    net.check_input(x)
    net.check_k_cpt(k_cpt)
    if x.device.type == "cpu":
        retain_by_default()
    batch = x.shape[0]
    everyone = torch.arange(batch, device=x.device)
    arrivals: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (leaf number, index, logits)
    visits: dict[str, torch.Tensor] = {}
    scores: dict[str, torch.Tensor] = {}
    decisions: dict[str, torch.Tensor] = {}
    heads: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    pending = [(net.root, x, everyone, k_cpt, None)]  # (node, inputs, index, k_cpt, examples routed here; None: the batch)
    while pending:
        name, inputs, index, node_k_cpt, count = pending.pop()
        node = net.nodes[name]
        visits[name] = index
        few = node.training and count is not None and count < MIN_BATCH_STATISTICS
        with _untrained(node) if few else nullcontext():
            state, descriptor, node_scores = node(inputs, node_k_cpt)
        if node.is_leaf:
            arrivals.append((net.leaf_index[name], index, state))
            heads[name] = (index, state)
            continue
        if node_scores is None:
            pending.append((node.sinks[0], state, index, node_k_cpt, count))
            continue
        choice = decide(Junction(name, node_scores, descriptor, node_k_cpt, index, state))
        scores[name] = node_scores
        decisions[name] = choice
        if side_heads:
            for sink in node.sinks:
                if net.nodes[sink].is_leaf:
                    head = net.nodes[sink]
                    with _untrained(head) if few else nullcontext():
                        heads[sink] = (index, head(head.reads(state), node_k_cpt).state)
        for sink_number, chosen, chosen_count in _split(choice, len(node.sinks), global_counts):
            sink = node.sinks[sink_number]
            if sink in heads:  # a side head: it has run on every example here
                _, logits = heads[sink]
                arrived = (index, logits) if chosen is None else (index[chosen], logits.index_select(0, chosen))
                visits[sink] = arrived[0]
                arrivals.append((net.leaf_index[sink], *arrived))
                continue
            if chosen is None:
                pending.append((sink, state, index, node_k_cpt, chosen_count))
                continue
            sink_k_cpt = node_k_cpt[chosen] if isinstance(node_k_cpt, torch.Tensor) and node_k_cpt.dim() else node_k_cpt
            pending.append((sink, take(net.nodes[sink].reads(state), chosen), index[chosen], sink_k_cpt, chosen_count))
    return _assemble(net, arrivals, batch, visits, scores, decisions, heads)


def _assemble(net: RoutedNet, arrivals, batch: int, visits, scores, decisions, heads) -> RoutedOutput:
    """The batch's logits and leaves, in batch order, from each leaf's sub-batch."""
    if len(arrivals) == 1:
        number, index, logits = arrivals[0]
        leaf = torch.full((batch,), number, dtype=torch.int64, device=index.device)
        macs = torch.full((batch,), net.leaf_path_macs[number], dtype=torch.int64, device=index.device)
        return RoutedOutput(logits, leaf, macs, visits, scores, decisions, heads)
    numbers = [number for number, _, _ in arrivals]
    sizes = [index.numel() for _, index, _ in arrivals]
    index = torch.cat([index for _, index, _ in arrivals])
    arrived = torch.cat([logits for _, _, logits in arrivals])
    logits = arrived.new_empty(batch, arrived.shape[1]).index_copy(0, index, arrived)
    leaf_of_arrival = torch.tensor(numbers, device=index.device).repeat_interleave(torch.tensor(sizes, device=index.device))
    leaf = torch.empty(batch, dtype=torch.int64, device=index.device).index_copy_(0, index, leaf_of_arrival)
    return RoutedOutput(logits, leaf, net.leaf_macs[leaf], visits, scores, decisions, heads)


def dynamic(net: RoutedNet, x: torch.Tensor, k_cpt=None) -> RoutedOutput:
    """Inference: argmax routing, computing only the nodes each example is routed through.

    Runs without gradients (``no_grad``, not ``inference_mode``, so that callers may feed
    the outputs into training); wrap a call in ``torch.inference_mode()`` for a few percent more.
    """
    with torch.no_grad():
        return route(net, x, argmax_decide, k_cpt)


def reach(net: RoutedNet, decisions: dict[str, torch.Tensor], batch_size: int, device=None) -> dict[str, torch.Tensor]:
    """Which examples reach each node, given every junction's decision for the whole batch.

    decisions: junction name -> ``(B,)`` sink index (as if every example stood there).
    Returns node name -> ``(B,)`` bool.
    """
    reached = {net.root: torch.ones(batch_size, dtype=torch.bool, device=device)}
    for name in net.order:
        node = net.nodes[name]
        for sink_number, sink in enumerate(node.sinks):
            if node.is_junction:
                reached[sink] = reached[name] & (decisions[name] == sink_number)
            else:
                reached[sink] = reached[name]
    return reached


def follow(net: RoutedNet, output: FullOutput) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Argmax routing read off a full evaluation: ``(leaf (B,), logits (B, classes), macs (B,))``."""
    first_logits = output.logits[net.leaves[0]]
    decisions = {name: s.argmax(1) for name, s in output.scores.items()}
    reached = reach(net, decisions, first_logits.shape[0], first_logits.device)
    leaf = torch.zeros(first_logits.shape[0], dtype=torch.int64, device=first_logits.device)
    logits = torch.zeros_like(first_logits)
    for i, name in enumerate(net.leaves):
        mask = reached[name]
        leaf = torch.where(mask, i, leaf)
        logits = torch.where(mask.unsqueeze(1), output.logits[name], logits)
    return leaf, logits, net.leaf_macs[leaf]
