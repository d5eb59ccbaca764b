"""Early exits and routers on a classifier the user brings: :func:`routable`.

``routable(model, exits=["layer1", "layer2", "layer3"], input_shape=(3, 32, 32))`` traces
``model`` with torchvision's feature extraction (torch.fx: the node names are
:func:`~torchvision.models.feature_extraction.get_graph_node_names`'s, and a module's name
stands for its last node), cuts the traced graph at the exits with
:func:`torch.fx.passes.split_module.split_module`, and returns the
:func:`~routing_rl.nets.exits.exit_chain` of its segments: after each exit node, a junction
whose router chooses between a new head (global pool + linear) and the rest of the model; the
model's own output is the last leaf, so routing every example to the deepest exit computes
exactly ``model(x)``. Every learner of the package trains the result, MACs per segment are
counted as for any net (:mod:`routing_rl.core.macs`), and the segments share the model's
modules and weights: load a trained model's ``state_dict`` into ``model`` before wrapping it
(or into the wrapped net afterwards, with :func:`load_backbone`).

Which models it cannot split, each refused with one line naming the problem:

* a model ``torch.fx`` cannot trace (control flow on tensor values, such as a ``for`` over a
  tensor or an ``if x.sum() > 0``), or whose forward differs in training and eval mode
  (Inception's and GoogLeNet's auxiliary classifiers);
* a model whose output is not one ``(B, classes)`` tensor (a dict, a tuple of outputs);
* an exit that is not a node of the traced graph, an exit named twice, or the model's output;
* an exit that is not on the main path, or where a skip connection crosses: the part after an
  exit must read nothing but the exit's output (so an exit inside a residual block, between
  its input and its addition, is refused; after the block's addition it is fine);
* an exit whose output is neither a feature map ``(B, C, H, W)`` nor a vector ``(B, C)``: the
  head averages over the positions after ``C``, and a transformer's tokens ``(B, tokens, D)``
  have no channel axis there (a ViT exits on its class token, after the encoder). A map must
  be channels first: a channels-last ``(B, H, W, C)`` one (Swin's stages) has the same rank,
  so it cannot be told apart and would be pooled over the wrong axes.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping, Sequence

import torch
from torch import fx, nn
from torch.fx.passes.split_module import split_module
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

from routing_rl.core.execution import running_statistics
from routing_rl.core.graph import RoutedNet
from routing_rl.nets.exits import exit_chain

LOGITS = "__logits__"
"""The feature extractor's name for the model's own output."""


class RoutableError(ValueError):
    """The model cannot be cut at these exits; the message says why and what to change."""


class Segment(nn.Module):
    """One part of the traced model between two exits.

    Routed training hands a node whatever sub-batch reached it, sometimes one example, and a
    model's batch norm on 1×1 maps (ResNet-18's last stage on 32×32 images) has no batch
    statistics for it: a lone example in training mode is normalised with the running
    statistics, as the routers' batch norm does (:class:`~routing_rl.nets.router.RouterBatchNorm`).
    """

    def __init__(self, graph: fx.GraphModule):
        super().__init__()
        self.graph = graph
        self._has_norms = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in graph.modules())

    def forward(self, state):
        if not (self.training and isinstance(state, torch.Tensor) and state.shape[0] == 1 and self._has_norms):
            return self.graph(state)
        with running_statistics(self.graph):
            return self.graph(state)


def graph_node_names(model: nn.Module) -> list[str]:
    """The names :func:`routable` takes as exits (eval mode's nodes, in order): refuses a model
    that fx cannot trace, or that traces differently in training and eval mode."""
    was_training = model.training
    try:
        with warnings.catch_warnings():  # torchvision's advice for train/eval differences; refused below instead
            warnings.simplefilter("ignore")
            train_names, eval_names = get_graph_node_names(model)
    except Exception as error:  # fx raises many kinds: TraceError, TypeError, NotImplementedError, ...
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RoutableError(f"torch.fx cannot trace {type(model).__name__} ({message}); routable() needs a model "
                            "without control flow on tensor values") from None
    finally:
        model.train(was_training)
    if train_names != eval_names:
        raise RoutableError(f"{type(model).__name__} runs other operations in training than in eval mode (auxiliary "
                            "outputs?); routable() needs one graph: build it without them (e.g. aux_logits=False)")
    return eval_names


def routable(model: nn.Module, exits: Sequence[str], input_shape: Sequence[int], classes: int | None = None,
             k_cpt_input: bool = False, grid: int = 1) -> RoutedNet:
    """``model`` as a routed chain with an exit after each node of ``exits`` (module docstring).

    Args:
        model: a classifier mapping ``(B, *input_shape)`` to logits ``(B, classes)``.
        exits: node names (:func:`graph_node_names`; a module's name means its last node), in
            any order; the net's exits follow the graph's order: ``exit1`` after the first,
            ..., and ``exit{len(exits) + 1}`` is the model's own output.
        input_shape: one example's shape, without the batch (``(3, 32, 32)`` for CIFAR).
        classes: the number of classes; default: the model's output width.
        k_cpt_input: the routers also read k_cpt (dynamic k_cpt).
        grid: each exit's head reads its map average-pooled over a ``grid × grid`` grid (1: the
            global average; the routers read the global average at every grid); above 1, every
            exit must be a ``(C, H, W)`` map.

    Raises :class:`RoutableError` (a ValueError) for a model or exits it cannot split.
    """
    names = graph_node_names(model)
    exits = list(exits)
    if not exits:
        raise RoutableError("give at least one exit: a node name from get_graph_node_names(model)")
    for name in exits:
        if not any(node == name or node.startswith(name + ".") for node in names):
            raise RoutableError(f"{name!r} is not a node of {type(model).__name__}; pick exits among "
                                "torchvision.models.feature_extraction.get_graph_node_names(model)[1]")
    if len(set(exits)) != len(exits):
        raise RoutableError(f"an exit is named twice in {exits}; name each node once")
    last = names[-1]
    for name in exits:
        if last == name or last.startswith(name + "."):
            raise RoutableError(f"{name!r} is the model's output, where the model's own classifier already exits; "
                                "pick an earlier node")
    was_training = model.training
    model.eval()
    try:
        traced = create_feature_extractor(model, return_nodes={**{name: name for name in exits}, last: LOGITS})
    finally:
        model.train(was_training)
    marks = next(node for node in traced.graph.nodes if node.op == "output").args[0]
    order = {node: i for i, node in enumerate(traced.graph.nodes)}
    if any(name not in marks for name in exits) or len({marks[name] for name in exits}) != len(exits):
        raise RoutableError(f"two of the exits {exits} name the same node; name each node once")
    exits = sorted(exits, key=lambda name: order[marks[name]])
    cuts = [order[marks[name]] for name in exits]
    parts = split_module(traced, model, lambda node: sum(order[node] > cut for cut in cuts), keep_original_order=True)
    graphs = [getattr(parts, f"submod_{i}") for i in range(len(exits) + 1)]
    _read_attributes_inside(parts)
    _check_cuts(graphs, exits, type(model).__name__)
    segments = [Segment(graph) for graph in graphs]
    shapes = _shapes(model, segments, input_shape, exits)
    logits = shapes[-1]
    if len(logits) != 1:
        raise RoutableError(f"{type(model).__name__}'s output is {tuple(logits)} per example, not (classes,); "
                            "routable() wraps classifiers")
    if classes is not None and classes != logits[0]:
        raise RoutableError(f"{type(model).__name__} predicts {logits[0]} classes, not classes={classes}; build it "
                            f"with num_classes={classes} or drop classes=")
    flat = [name for name, shape in zip(exits, shapes[:-1]) if len(shape) != 3]
    if grid != 1 and flat:
        raise RoutableError(f"exit {flat[0]!r} is not a (C, H, W) map, so it has no grid to pool over; use grid=1 or "
                            "pick exits inside the convolutional trunk")
    chain = [(segment, shape[0]) for segment, shape in zip(segments[:-1], shapes[:-1])]
    return exit_chain(chain, logits[0], input_shape, classifier=segments[-1], k_cpt_input=k_cpt_input, grid=grid)


def _read_attributes_inside(parts: fx.GraphModule) -> None:
    """split_module hands each part the tensors the model reads as attributes (a ViT's class
    token and position embedding, ConvNeXt's layer scales) as extra inputs, but a segment is
    called with the state alone: each part holds them itself instead, the model's own tensors."""
    for call in parts.graph.nodes:
        if call.op != "call_module":
            continue
        graph = getattr(parts, call.target)
        placeholders = [node for node in graph.graph.nodes if node.op == "placeholder"]
        first = next(node for node in graph.graph.nodes if node.op != "placeholder")
        for placeholder, arg in zip(placeholders, call.args):
            if not (isinstance(arg, fx.Node) and arg.op == "get_attr"):
                continue
            value = operator.attrgetter(arg.target)(parts)
            if isinstance(value, nn.Parameter):
                graph.register_parameter(placeholder.name, value)
            else:
                graph.register_buffer(placeholder.name, value)
            with graph.graph.inserting_before(first):
                placeholder.replace_all_uses_with(graph.graph.get_attr(placeholder.name))
            graph.graph.erase_node(placeholder)
        graph.recompile()


def _check_cuts(segments: list[fx.GraphModule], exits: list[str], model_name: str) -> None:
    """Each part after an exit reads only that exit's output, and each part hands on one tensor."""
    for i, segment in enumerate(segments):
        inputs = [node for node in segment.graph.nodes if node.op == "placeholder"]
        output = next(node for node in segment.graph.nodes if node.op == "output").args[0]
        if i > 0 and len(inputs) != 1:
            raise RoutableError(f"a skip connection crosses exit {exits[i - 1]!r} of {model_name}: the part after it "
                                f"reads {len(inputs)} values; move the exit past the connection's end (after the "
                                "block's addition)")
        if isinstance(output, (tuple, list)) and len(output) != 1:
            where = f"exit {exits[i]!r}" if i < len(exits) else "its output"
            raise RoutableError(f"{model_name} hands on {len(output)} values at {where}: a skip connection crosses it "
                                "or the exit is not on the main path; pick a node every later operation depends on alone")


def _shapes(model: nn.Module, segments: list[Segment], input_shape: Sequence[int],
            exits: list[str]) -> list[tuple[int, ...]]:
    """Each segment's output shape without the batch, from two random examples, after checking
    that the segments in a row compute what ``model`` does."""
    example = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    modules = [model, *segments]
    was_training = [module.training for module in modules]
    shapes = []
    try:
        with torch.no_grad():
            for module in modules:
                module.eval()
            expected = model(example)
            if not isinstance(expected, torch.Tensor):
                raise RoutableError(f"{type(model).__name__} returns a {type(expected).__name__}, not one logits tensor; "
                                    "routable() wraps classifiers (wrap yours to return the logits alone)")
            state = example
            for i, segment in enumerate(segments):
                state = segment(state)
                if isinstance(state, (tuple, list)):
                    state = state[0]
                if not isinstance(state, torch.Tensor) or state.dim() < 2:
                    where = f"exit {exits[i]!r}" if i < len(exits) else "the model's output"
                    raise RoutableError(f"{where} gives {type(state).__name__}, not a (batch, channels, ...) tensor; "
                                        "pick a node that outputs a feature map")
                if i < len(exits) and state.dim() not in (2, 4):
                    raise RoutableError(f"exit {exits[i]!r} gives {tuple(state.shape[1:])} per example, not a feature map "
                                        "(C, H, W) or a vector (C,) its head can pool (a transformer's tokens have no "
                                        "channel axis first); pick a node with such an output, such as a class token")
                shapes.append(tuple(state.shape[1:]))
            if state.shape != expected.shape or not torch.allclose(state, expected, rtol=1e-4, atol=1e-5):
                raise RoutableError(f"the traced graph of {type(model).__name__} does not compute its output; "
                                    "routable() needs a model whose forward fx traces in full")
    finally:
        for module, training in zip(modules, was_training):
            module.train(training)
    return shapes


def load_backbone(net: RoutedNet, state: Mapping[str, torch.Tensor]) -> list[str]:
    """Load a trained plain net's ``state_dict`` into ``net`` (a routed net whose node names it
    shares: a static ``resnetD`` run's net into ``resnetD-exits``, a ``path_net`` into its
    routed net). Every tensor of ``state`` must name one of ``net``'s, of the same shape;
    returns the names of ``net``'s tensors it did not hold (the new heads and routers)."""
    own = net.state_dict()
    foreign = [key for key in state if key not in own]
    if foreign:
        raise ValueError(f"the checkpoint holds {len(foreign)} tensors this net has not (first: {foreign[0]!r}); "
                         "load a plain model's own state_dict into the model before routable() wraps it")
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[key].shape):
            raise ValueError(f"the checkpoint's {key!r} is {tuple(tensor.shape)}, the net's {tuple(own[key].shape)}: "
                             "another width or number of classes")
    net.load_state_dict(state, strict=False)
    return [key for key in own if key not in state]
