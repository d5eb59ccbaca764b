"""The paper's multiscale convolutional architecture (Fig. 3) and its routed variants.

A column turns a pyramid of feature maps (finest scale first) into a new pyramid. The
first column reads a pyramid of the 32×32 input at scales 32, 16, 8 and 4; each later
column reads the previous column's pyramid, keeping only its coarsest scales. Every node's
descriptor (what its router reads) and every head read the coarsest map, 4×4×C.

Builders: :func:`static` (the first n columns, one head), :func:`chain` (exit-or-continue
after every column), :func:`tree` (the release's branching tree), and :func:`build`, which
takes an arch name (``static-N``, ``chain``, ``tree``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.folding import Foldable, norm_affine, norm_tensors, use_folded
from routing_rl.nets.router import BN_EPS, BN_MOMENTUM, Router, read_exit_confidence

INPUT_SHAPE = (3, 32, 32)
PYRAMID_LEVELS = 4
COARSEST_SIDE = 4
COLUMN_CHANNELS = (
    (16, 16, 16, 16),
    (16, 16, 16, 16),
    (32, 32, 32),
    (32, 32, 32),
    (64, 64),
    (64, 64),
    (128,),
    (128,),
)
"""Output channels of the 8 columns at width 1, finest scale first."""

TREE_BRANCHING_COLUMNS = 3
"""In :func:`tree`, columns 1..3 end in 3-way junctions (exit, or one of two copies of the
next column); later columns in 2-way exit-or-continue junctions."""


def image_pyramid(x: torch.Tensor, levels: int = PYRAMID_LEVELS) -> list[torch.Tensor]:
    """``[x, x/2, x/4, ...]``: halving by 2×2 averaging, which is exactly bilinear halving."""
    pyramid = [x]
    for _ in range(levels - 1):
        pyramid.append(F.avg_pool2d(pyramid[-1], 2))
    return pyramid


def max_pool_halve(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)`` for inference and compiled training: on a batch of maps with
    even sides, two pairwise maxima give the same values without the pooling kernel's index
    bookkeeping, about ten times faster on channels-last maps on the CPU. (A lone example
    keeps the single call.) Their gradient differs only where two maxima tie exactly: it is
    split between them, where max pooling gives it all to the first."""
    if x.shape[0] == 1 or x.shape[-1] % 2 or x.shape[-2] % 2:
        return F.max_pool2d(x, 2)
    rows = torch.maximum(x[:, :, 0::2], x[:, :, 1::2])
    return torch.maximum(rows[:, :, :, 0::2], rows[:, :, :, 1::2])


def coarsest(state: Sequence[torch.Tensor]) -> torch.Tensor:
    """A column's descriptor: its coarsest feature map, flattened to ``(B, 16·C)``."""
    return state[-1].flatten(1)


class Column(Foldable):
    """One column: ``out[i] = ReLU(BN(conv(in[i]) + conv(maxpool(out[i-1]))))``.

    Args:
        in_channels: channels of the input pyramid, finest first. The column reads its
            ``len(out_channels)`` coarsest scales.
        out_channels: output channels per scale, finest first.
        image_input: the column receives an image ``(B, C, H, W)`` and builds the input
            pyramid itself (the first column).
    """

    def __init__(self, in_channels: Sequence[int], out_channels: Sequence[int], image_input: bool = False):
        super().__init__()
        if len(out_channels) > len(in_channels):
            raise ValueError(f"a column with {len(out_channels)} scales needs that many input scales, got {len(in_channels)}")
        self.image_input = image_input
        self.levels_in = len(in_channels)
        used = list(in_channels)[len(in_channels) - len(out_channels):]
        self.convs = nn.ModuleList(nn.Conv2d(c_in, c_out, 3, padding=1) for c_in, c_out in zip(used, out_channels))
        self.links = nn.ModuleList(
            nn.Conv2d(c_prev, c_out, 3, padding=1, bias=False) for c_prev, c_out in zip(out_channels, out_channels[1:])
        )
        self.norms = nn.ModuleList(nn.BatchNorm2d(c, eps=BN_EPS, momentum=BN_MOMENTUM) for c in out_channels)
        for conv in [*self.convs, *self.links]:
            nn.init.xavier_uniform_(conv.weight)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        self._layers = [*self.convs, *self.links, *self.norms]  # watched for hooks by use_folded

    def reads(self, inputs):
        """The scales of the parent's pyramid this column uses (all of an image input)."""
        return inputs if self.image_input else inputs[len(inputs) - len(self.convs):]

    def forward(self, inputs) -> list[torch.Tensor]:
        on_cpu = (inputs if self.image_input else inputs[0]).device.type == "cpu"
        # oneDNN's convolutions and max pooling run several times faster on channels-last
        # maps; pooling keeps the layout, and so does the column (a gather does not)
        layout = torch.channels_last if on_cpu else torch.contiguous_format
        if self.image_input:
            pyramid = image_pyramid(inputs.contiguous(memory_format=layout), self.levels_in)
        else:
            pyramid = [scale.contiguous(memory_format=layout) for scale in inputs]
        pyramid = pyramid[len(pyramid) - len(self.convs):]
        if use_folded(self, self._layers):
            return self._folded_forward(pyramid)
        # inductor fuses two pairwise maxima (and their gradient) with the neighbouring
        # kernels; its max_pool2d-with-indices kernels ran slower than eager ones on the CPU
        compiling = torch.compiler.is_compiling()
        outputs: list[torch.Tensor] = []
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            z = conv(pyramid[i])
            if i > 0:
                finer = outputs[-1]
                z = z + self.links[i - 1](max_pool_halve(finer) if compiling else F.max_pool2d(finer, 2))
            outputs.append(F.relu(norm(z), inplace=True))
        return outputs

    def _folded_forward(self, pyramid: list[torch.Tensor]) -> list[torch.Tensor]:
        """The same column with each batch norm folded into the convolutions before it."""
        convs, links = self._folded()
        outputs: list[torch.Tensor] = []
        for i, (weight, bias) in enumerate(convs):
            z = F.conv2d(pyramid[i], weight, bias, padding=1)
            if i > 0:
                z += F.conv2d(max_pool_halve(outputs[-1]), links[i - 1], padding=1)
            outputs.append(z.relu_())
        return outputs

    def _fold_sources(self) -> list[torch.Tensor]:
        sources = []
        for conv, norm in zip(self.convs, self.norms):
            sources += [conv._parameters["weight"], conv._parameters["bias"], *norm_tensors(norm)]
        return sources + [link._parameters["weight"] for link in self.links]

    def _fold(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor]]:
        convs, links = [], []
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            scale, shift = norm_affine(norm)
            convs.append((conv.weight * scale.view(-1, 1, 1, 1), conv.bias * scale + shift))
            if i > 0:
                links.append(self.links[i - 1].weight * scale.view(-1, 1, 1, 1))
        return convs, links


class Head(nn.Module):
    """Classifier on a column's coarsest map: flatten, one linear layer to the logits."""

    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(channels * COARSEST_SIDE * COARSEST_SIDE, classes)
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def reads(self, state: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [state[-1]]

    def forward(self, state: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.linear(coarsest(state))


def _check(width: int, classes: int) -> None:
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer multiplier of the channels (1, 2, 3, ...), got {width!r}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")


def _channels(width: int) -> list[list[int]]:
    return [[c * width for c in column] for column in COLUMN_CHANNELS]


def column(k: int, width: int = 1) -> Column:
    """Column ``k`` (1-based) at the given width."""
    channels = _channels(width)
    in_channels = [INPUT_SHAPE[0]] * PYRAMID_LEVELS if k == 1 else channels[k - 2]
    return Column(in_channels, channels[k - 1], image_input=k == 1)


def _routed(layout: dict[str, tuple[int, list[str]]], width: int, classes: int, k_cpt_input: bool) -> RoutedNet:
    """Builds a net from ``{column node name: (column index, sinks)}``; sinks named
    ``exit...`` are heads on that column, created here."""
    nodes: dict[str, Node] = {}
    for name, (k, sinks) in layout.items():
        channels = _channels(width)[k - 1][-1]
        router = Router(channels * COARSEST_SIDE**2, len(sinks), k_cpt_input) if len(sinks) >= 2 else None
        nodes[name] = Node(column(k, width), sinks, router, descriptor=coarsest)
        for sink in sinks:
            if sink.startswith("exit"):
                nodes[sink] = Node(Head(channels, classes))
    return RoutedNet(nodes, root="col1", input_shape=INPUT_SHAPE, classes=classes, k_cpt_input=k_cpt_input)


def static(n_columns: int, width: int = 1, classes: int = 10) -> RoutedNet:
    """The statically-routed baseline: columns 1..n, then a head. No junctions."""
    _check(width, classes)
    if isinstance(n_columns, bool) or not isinstance(n_columns, int) or not 1 <= n_columns <= len(COLUMN_CHANNELS):
        raise ValueError(f"a static net has 1 to {len(COLUMN_CHANNELS)} columns, got {n_columns!r}")
    layout = {f"col{k}": (k, [f"col{k + 1}"]) for k in range(1, n_columns)}
    layout[f"col{n_columns}"] = (n_columns, [f"exit{n_columns}"])
    return _routed(layout, width, classes, k_cpt_input=False)


def chain(width: int = 1, classes: int = 10, k_cpt_input: bool = False) -> RoutedNet:
    """8 columns; after each of the first 7, a 2-way junction: exit (sink 0) or continue (sink 1)."""
    _check(width, classes)
    n = len(COLUMN_CHANNELS)
    layout = {f"col{k}": (k, [f"exit{k}", f"col{k + 1}"]) for k in range(1, n)}
    layout[f"col{n}"] = (n, [f"exit{n}"])
    return _routed(layout, width, classes, k_cpt_input)


def tree(width: int = 1, classes: int = 10, k_cpt_input: bool = False) -> RoutedNet:
    """The branching net of the paper's Fig. 7, as in the authors' release.

    Columns 1..3 end in 3-way junctions: exit (sink 0), or one of two separate copies of the
    next column (sinks 1, 2), so there are 2 copies of column 2 and 4 of column 3. Each
    column-3 copy leads into two separate chains of columns 4..8 with exit-or-continue
    junctions: 1 + 2 + 4 + 8×5 = 47 column instances, at most 8 on any path. A copy's name
    carries its branch letters, for example ``col5aba`` and its head ``exit5aba``.
    """
    _check(width, classes)
    n = len(COLUMN_CHANNELS)
    layout: dict[str, tuple[int, list[str]]] = {}
    frontier = [""]
    for k in range(1, n + 1):
        branching = k <= TREE_BRANCHING_COLUMNS
        next_frontier = []
        for suffix in frontier:
            children = [suffix + "a", suffix + "b"] if branching else [suffix]
            sinks = [f"exit{k}{suffix}"]
            if k < n:
                sinks += [f"col{k + 1}{child}" for child in children]
                next_frontier += children
            layout[f"col{k}{suffix}"] = (k, sinks)
        frontier = next_frontier
    return _routed(layout, width, classes, k_cpt_input)


def arch_names() -> list[str]:
    return [f"static-{n}" for n in range(1, len(COLUMN_CHANNELS) + 1)] + ["chain", "tree"]


def build(arch: str, width: int = 1, classes: int = 10, k_cpt_input: bool = False,
          exit_confidence: bool = False) -> RoutedNet:
    """A net by arch name: ``static-N`` (N = 1..8), ``chain`` or ``tree``; ``exit_confidence``:
    its routers also read their exits' confidence (:func:`~routing_rl.nets.router.read_exit_confidence`)."""
    if arch not in arch_names():
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(arch_names())}")
    if arch.startswith("static-"):
        if k_cpt_input:
            raise ValueError("a static net has no routers, so it cannot read k_cpt; drop k_cpt_input")
        if exit_confidence:
            raise ValueError("a static net has no routers, so it cannot read its exits' confidence; drop exit_confidence")
        return static(int(arch.removeprefix("static-")), width, classes)
    net = (chain if arch == "chain" else tree)(width, classes, k_cpt_input)
    return read_exit_confidence(net) if exit_confidence else net
