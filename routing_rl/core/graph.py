"""Routing trees: the data structure every learner, environment and evaluator shares.

A :class:`RoutedNet` is a tree of named :class:`Node` s. A node applies its transform to
the state its parent handed it. A node with two or more sinks is a *junction*: its router
reads the node's descriptor (a ``(B, D)`` feature vector computed from the state) and
scores each sink. A node without sinks is a *leaf*: its transform is a classifier head
and its output is the logits. Nothing here assumes images: a state is any tensor, or any
(nested) list, tuple or dict of tensors whose first dimension is the batch.

A transform may define ``reads(state) -> state``, the part of its parent's state it
actually uses; routed execution then hands a sub-batch only that part, which saves copying
(a head on a pyramid of feature maps reads only the coarsest map).

Running the whole tree on a batch is ``net(x)`` (full evaluation, see
:mod:`routing_rl.core.execution` for routed execution). Per-example MAC counts of each node's
transform and router are measured once, when the net is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from routing_rl.core.macs import MacCounter

State = object  # a tensor, or a list/tuple/dict of states; the batch is dimension 0


def flatten_descriptor(state: torch.Tensor) -> torch.Tensor:
    """Default node descriptor: the state flattened to ``(B, D)``."""
    return state.flatten(1)


def exit_confidence(logits: torch.Tensor) -> torch.Tensor:
    """``(B, 1)``: the log of a head's top softmax probability (nats, in [-ln classes, 0]),
    detached: the signal a confidence threshold routes on, and minus the cross-entropy the
    head would pay if its top class were right. Detached so that it stays a reading:
    routing losses do not make heads more or less confident."""
    return logits.detach().log_softmax(1).amax(1, keepdim=True)


def take(state: State, index: torch.Tensor) -> State:
    """Select examples ``index`` (a 1-D long tensor) from every tensor in ``state``; a
    channels-last tensor stays channels-last."""
    if isinstance(state, torch.Tensor):
        if state.dim() == 4 and not state.is_contiguous() and state.is_contiguous(memory_format=torch.channels_last):
            # gather along the outermost dimension of the memory order, which keeps the layout
            return state.permute(0, 2, 3, 1).index_select(0, index).permute(0, 3, 1, 2)
        return state.index_select(0, index)
    if isinstance(state, (list, tuple)):
        return type(state)(take(s, index) for s in state)
    if isinstance(state, Mapping):
        return {key: take(value, index) for key, value in state.items()}
    raise TypeError(f"cannot select examples from a state of type {type(state).__name__}")


class NodeOutput(NamedTuple):
    """What one node computes: its state (logits at a leaf); at a junction, also the
    descriptor ``(B, D)`` its router read and the scores ``(B, n_sinks)`` it gave."""

    state: State
    descriptor: torch.Tensor | None
    scores: torch.Tensor | None


class Node(nn.Module):
    """One vertex of a routing tree.

    Args:
        transform: maps the parent's state (or the network input, at the root) to this
            node's state; at a leaf, to logits ``(B, classes)``.
        sinks: names of the nodes this node may hand its state to; empty for a leaf.
        router: maps ``(descriptor (B, D), k_cpt)`` to scores ``(B, len(sinks))``;
            required at a junction (two or more sinks), forbidden elsewhere.
        descriptor: maps this node's state to the router's input features ``(B, D)``;
            defaults to flattening the state.

    ``exits`` (set by ``RoutedNet(..., exit_confidence=True)``): the heads among a junction's
    sinks whose :func:`exit_confidence` its router also reads, after the descriptor.
    """

    def __init__(
        self,
        transform: nn.Module,
        sinks: Sequence[str] = (),
        router: nn.Module | None = None,
        descriptor: Callable[[State], torch.Tensor] = flatten_descriptor,
    ):
        super().__init__()
        self.transform = transform
        self.router = router
        self.sinks = list(sinks)
        self.descriptor = descriptor
        self.exits: list[Node] = []
        if len(self.sinks) >= 2 and router is None:
            raise ValueError(f"a junction with {len(self.sinks)} sinks needs a router")
        if len(self.sinks) < 2 and router is not None:
            raise ValueError("a router only belongs at a junction (a node with two or more sinks)")

    def reads(self, parent_state: State) -> State:
        """The part of the parent's state this node's transform uses."""
        reads = getattr(self.transform, "reads", None)
        return parent_state if reads is None else reads(parent_state)

    @property
    def is_leaf(self) -> bool:
        return not self.sinks

    @property
    def is_junction(self) -> bool:
        return len(self.sinks) >= 2

    def forward(self, inputs: State, k_cpt=None) -> NodeOutput:
        """This node's state, and at a junction its descriptor and router scores."""
        state = self.transform(inputs)
        if self.router is None:
            return NodeOutput(state, None, None)
        descriptor = self.router_input(state)
        return NodeOutput(state, descriptor, self.router(descriptor, k_cpt))

    def router_input(self, state: State) -> torch.Tensor:
        """``(B, D)``: the descriptor, then each of :attr:`exits`' confidence on ``state``."""
        descriptor = self.descriptor(state)
        if not self.exits:
            return descriptor
        return torch.cat([descriptor, *(exit_confidence(head(head.reads(state)).state) for head in self.exits)], 1)


@dataclass
class FullOutput:
    """Result of evaluating every node of a net on the whole batch.

    scores: junction name -> router scores ``(B, n_sinks)``.
    descriptors: junction name -> the router's input features ``(B, D)`` (without k_cpt;
        with the exits' confidence when the net reads it).
    logits: leaf name -> head logits ``(B, classes)``.
    """

    scores: dict[str, torch.Tensor]
    descriptors: dict[str, torch.Tensor]
    logits: dict[str, torch.Tensor]


class RoutedNet(nn.Module):
    """A tree of nodes with measured per-example MAC counts.

    Args:
        nodes: name -> :class:`Node`. Names must be valid ``nn.ModuleDict`` keys (no dots).
        root: the name of the node that receives the network input.
        input_shape: the shape of one example, without the batch dimension.
        classes: the number of classes every leaf predicts.
        k_cpt_input: whether routers read k_cpt as an extra input (dynamic k_cpt).
        exit_confidence: whether every junction's router also reads the confidence of each
            head among its sinks (:attr:`Node.exits`); the routers must take those inputs
            (:func:`routing_rl.nets.router.read_exit_confidence` widens a built net's). The
            heads' MACs then count as the junction's router MACs, and again at the leaf
            when an example exits there.

    Attributes (all derived from the structure, fixed after construction):
        order: node names in pre-order (every parent before its sinks).
        parent: name -> parent name (None for the root).
        leaves / junctions: names in pre-order.
        macs: name -> MACs per example of the node's transform.
        router_macs: name -> MACs per example of the node's router (0 if none).
        leaf_macs: ``(n_leaves,)`` int64 tensor, the MACs of the whole path to each leaf
            (``leaf_path_macs``: the same as a list of ints).
        path: leaf name -> [(junction, sink index), ...] decisions that lead to it.
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        root: str,
        input_shape: Sequence[int],
        classes: int,
        k_cpt_input: bool = False,
        exit_confidence: bool = False,
    ):
        super().__init__()
        self.nodes = nn.ModuleDict(nodes)
        self.root = root
        self.input_shape = tuple(int(s) for s in input_shape)
        self.classes = int(classes)
        self.k_cpt_input = bool(k_cpt_input)
        self.exit_confidence = bool(exit_confidence)
        self.order, self.parent = self._walk()
        for name in self.order:
            node = self.nodes[name]
            node.exits = [self.nodes[s] for s in node.sinks if self.exit_confidence and node.is_junction and self.nodes[s].is_leaf]
        self.leaves = [n for n in self.order if self.nodes[n].is_leaf]
        self.junctions = [n for n in self.order if self.nodes[n].is_junction]
        self.leaf_index = {name: i for i, name in enumerate(self.leaves)}
        self.path = {leaf: self._decisions_to(leaf) for leaf in self.leaves}
        self.macs, self.router_macs = self._measure_macs()
        self.leaf_path_macs = [self.path_macs(leaf) for leaf in self.leaves]
        self.register_buffer("leaf_macs", torch.tensor(self.leaf_path_macs, dtype=torch.int64), persistent=False)

    def _walk(self) -> tuple[list[str], dict[str, str | None]]:
        if self.root not in self.nodes:
            raise ValueError(f"root {self.root!r} is not one of the nodes {list(self.nodes)}")
        order: list[str] = []
        parent: dict[str, str | None] = {self.root: None}
        stack = [self.root]
        while stack:
            name = stack.pop()
            order.append(name)
            for sink in reversed(self.nodes[name].sinks):
                if sink not in self.nodes:
                    raise ValueError(f"node {name!r} has sink {sink!r}, which is not a node")
                if sink in parent:
                    raise ValueError(f"node {sink!r} is reached twice; a routing net must be a tree")
                parent[sink] = name
                stack.append(sink)
        unreachable = set(self.nodes) - set(order)
        if unreachable:
            raise ValueError(f"nodes {sorted(unreachable)} cannot be reached from root {self.root!r}")
        return order, parent

    def _decisions_to(self, leaf: str) -> list[tuple[str, int]]:
        decisions = []
        child, node = leaf, self.parent[leaf]
        while node is not None:
            if self.nodes[node].is_junction:
                decisions.append((node, self.nodes[node].sinks.index(child)))
            child, node = node, self.parent[node]
        return decisions[::-1]

    def nodes_to(self, leaf: str) -> list[str]:
        """Names of the nodes from the root down to ``leaf``, both included."""
        names = [leaf]
        while self.parent[names[-1]] is not None:
            names.append(self.parent[names[-1]])
        return names[::-1]

    def path_macs(self, leaf: str) -> int:
        """MACs per example of an input routed to ``leaf``: transforms and routers on its path."""
        return sum(self.macs[n] + self.router_macs[n] for n in self.nodes_to(leaf))

    @property
    def full_macs(self) -> int:
        """MACs per example of full evaluation: every node and router."""
        return sum(self.macs.values()) + sum(self.router_macs.values())

    def check_input(self, x: torch.Tensor) -> None:
        if x.dim() != len(self.input_shape) + 1 or tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"expected input of shape (batch, {', '.join(map(str, self.input_shape))}), "
                f"got {tuple(x.shape)}; resize or reshape the examples to {self.input_shape}"
            )

    def check_k_cpt(self, k_cpt) -> None:
        if self.k_cpt_input and k_cpt is None:
            raise ValueError("this net's routers read k_cpt (built with k_cpt_input=True); pass k_cpt=")

    def forward(self, x: torch.Tensor, k_cpt=None) -> FullOutput:
        """Full evaluation: every node on the whole batch.

        ``k_cpt`` (a float, or a ``(B,)`` tensor of costs per MAC) is read by routers built
        with ``k_cpt_input=True`` and ignored otherwise.
        """
        self.check_input(x)
        self.check_k_cpt(k_cpt)
        states: dict[str, State] = {}
        scores: dict[str, torch.Tensor] = {}
        descriptors: dict[str, torch.Tensor] = {}
        logits: dict[str, torch.Tensor] = {}
        for name in self.order:
            parent = self.parent[name]
            out = self.nodes[name](x if parent is None else states[parent], k_cpt)
            if self.nodes[name].is_leaf:
                logits[name] = out.state
            else:
                states[name] = out.state
            if out.scores is not None:
                scores[name] = out.scores
                descriptors[name] = out.descriptor
        return FullOutput(scores=scores, descriptors=descriptors, logits=logits)

    @torch.no_grad()
    def _measure_macs(self) -> tuple[dict[str, int], dict[str, int]]:
        transform_counters = {n: MacCounter(self.nodes[n].transform) for n in self.order}
        router_counters = {
            n: MacCounter(self.nodes[n].router) for n in self.order if self.nodes[n].router is not None
        }
        counters = [*transform_counters.values(), *router_counters.values()]
        was_training = self.training
        self.eval()
        try:
            for counter in counters:
                counter.__enter__()
            example = torch.zeros(1, *self.input_shape)
            self(example, k_cpt=0.0 if self.k_cpt_input else None)
        finally:
            for counter in counters:
                counter.__exit__(None, None, None)
            self.train(was_training)
        macs = {n: c.macs for n, c in transform_counters.items()}
        router_macs = {n: router_counters[n].macs if n in router_counters else 0 for n in self.order}
        for name in self.order:  # a head read by its junction ran twice: once for its router
            for sink in self.nodes[name].sinks:
                if self.nodes[sink] in self.nodes[name].exits:
                    macs[sink] //= 2
                    router_macs[name] += macs[sink]
        return macs, router_macs


def path_net(net: RoutedNet, leaf: str) -> RoutedNet:
    """The static net an example routed to ``leaf`` runs: the nodes from the root down to
    ``leaf`` (the same modules, weights shared with ``net``), their routers removed, so it
    has no junctions; its one leaf keeps its name."""
    names = net.nodes_to(leaf)
    nodes = {name: Node(net.nodes[name].transform, [sink] if sink else [], None, net.nodes[name].descriptor)
             for name, sink in zip(names, [*names[1:], None])}
    return RoutedNet(nodes, net.root, net.input_shape, net.classes)
