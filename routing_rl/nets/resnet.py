"""CIFAR-style residual networks (He et al., 2016) as routed chains with early exits.

ResNet-``D`` (``D = 6n + 2``: 20, 32, 56, ...) on 32×32 images: a 3×3 convolution to 16
channels, then three stages of ``n`` basic blocks (two 3×3 convolutions with batch norm and a
shortcut) at 16, 32 and 64 channels (× ``width``), the second and third stage halving the
map's side in their first block, whose shortcut subsamples and pads the new channels with
zeros (the paper's option A, no parameters). The net is cut into segments with an exit after
each (:func:`~routing_rl.nets.exits.exit_chain`): by default after each stage, or every ``k``
blocks (``exit_every=k``, as Shallow-Deep Networks place their internal classifiers).

Arch names (:func:`build`): ``resnetD-exits`` (the routed chain, an exit after each stage);
the static nets that are its paths (:func:`~routing_rl.core.graph.path_net`): ``resnetD``, the
plain ResNet (its deepest exit's path), and ``resnetD-exitK``, the stages up to exit ``K``
with that head. The suffix ``-everyB`` puts an exit every ``B`` blocks instead:
``resnetD-exits-everyB``, with its paths ``resnetD-everyB`` (the plain net, its node names
this chain's) and ``resnetD-exitK-everyB``. The suffix ``-gridG`` (after any ``-everyB``)
makes the early exits' heads read a ``G × G`` grid of average-pooled positions instead of
the global average (:class:`~routing_rl.nets.exits.GridPool`; G = 2 or 4 offered; the routers
read the global average at every grid):
``resnetD-exits-gridG`` and its early paths ``resnetD-exitK-gridG``; the deepest path is the
plain net at every grid. A static net's node names are its routed net's,
so a trained plain ``resnetD`` loads into ``resnetD-exits``, and ``resnetD-everyB`` into
``resnetD-exits-everyB`` (:func:`~routing_rl.nets.routable.load_backbone`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.graph import RoutedNet, path_net
from routing_rl.nets.exits import exit_chain
from routing_rl.nets.router import read_exit_confidence

INPUT_SHAPE = (3, 32, 32)
STAGE_CHANNELS = (16, 32, 64)
DEPTHS = (20, 32, 56)
"""The depths the image tasks offer by name; :func:`resnet` builds any ``6n + 2``."""
GRIDS = (2, 4)
"""The grids (besides the global average) the image tasks offer by name for the early exits."""
ARCH = re.compile(r"resnet(\d+)(-exits|-exit(\d+))?(?:-every(\d+))?(?:-grid(\d+))?")


class BasicBlock(nn.Module):
    """``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``; the shortcut subsamples and
    zero-pads channels when the block halves the side and widens the map."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.stride = stride
        self.pad = out_channels - in_channels
        for conv in (self.conv1, self.conv2):
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            x = F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def stem(channels: int) -> nn.Sequential:
    """The first 3×3 convolution, batch norm and ReLU."""
    conv = nn.Conv2d(INPUT_SHAPE[0], channels, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return nn.Sequential(conv, nn.BatchNorm2d(channels), nn.ReLU())


def blocks_per_stage(depth: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has depth 6n + 2 (20, 32, 44, 56, 110, ...), got {depth!r}")
    return (depth - 2) // 6


def channels_at(width: float) -> list[int]:
    """Each stage's channels at ``width`` (a positive multiplier; fractions make tiny nets)."""
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not width > 0:
        raise ValueError(f"width must be a positive channel multiplier (1 = 16/32/64 channels), got {width!r}")
    return [max(1, round(c * width)) for c in STAGE_CHANNELS]


def resnet(depth: int = 20, width: float = 1, classes: int = 10, exit_every: int | None = None,
           k_cpt_input: bool = False, grid: int = 1) -> RoutedNet:
    """ResNet-``depth`` as a chain with an exit after each stage, or after every
    ``exit_every`` blocks (the last segment takes what is left, and always ends in an exit).
    Nodes ``seg1..segM`` (the first holds the stem), heads ``exit1..exitM``; the early heads
    read a ``grid × grid`` average pool of their map, the routers its global average."""
    n = blocks_per_stage(depth)
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    if exit_every is not None and (isinstance(exit_every, bool) or not isinstance(exit_every, int)
                                   or not 1 <= exit_every <= 3 * n):
        raise ValueError(f"exit_every is a number of blocks between exits, 1 to {3 * n} for ResNet-{depth}, "
                         f"got {exit_every!r}")
    channels = channels_at(width)
    blocks: list[tuple[nn.Module, int]] = []
    previous = channels[0]
    for stage, out in enumerate(channels):
        for b in range(n):
            blocks.append((BasicBlock(previous, out, 2 if stage > 0 and b == 0 else 1), out))
            previous = out
    every = exit_every or n
    groups = [blocks[i : i + every] for i in range(0, len(blocks), every)]
    segments = []
    for i, group in enumerate(groups):
        layers = ([stem(channels[0])] if i == 0 else []) + [block for block, _ in group]
        segments.append((nn.Sequential(*layers), group[-1][1]))
    return exit_chain(segments, classes, INPUT_SHAPE, k_cpt_input=k_cpt_input, grid=grid)


def exit_spacings(depth: int) -> list[int]:
    """The ``exit_every`` the image tasks offer for ResNet-``depth``: the divisors of a stage's
    ``n`` blocks below ``n``, so that every stage still ends at an exit."""
    n = blocks_per_stage(depth)
    return [every for every in range(1, n) if n % every == 0]


def _grid_suffixes() -> list[str]:
    return ["", *(f"-grid{g}" for g in GRIDS)]


def arch_names() -> list[str]:
    """Every ResNet arch the image tasks offer: the routed chains, then their static paths."""
    chains = [f"resnet{d}-exits" for d in DEPTHS]
    chains += [f"resnet{d}-exits-every{b}" for d in DEPTHS for b in exit_spacings(d)]
    return [chain + grid for grid in _grid_suffixes() for chain in chains] + static_arch_names()


def static_arch_names() -> list[str]:
    """For each offered depth, ``resnetD`` (the plain net) and ``resnetD-exitK`` (K = 1, 2);
    for each offered spacing, ``resnetD-everyB`` and ``resnetD-exitK-everyB`` (every exit but
    the deepest); the early paths again with each offered ``-gridG``."""
    names = [f"resnet{d}" for d in DEPTHS]
    names += [f"resnet{d}-exit{k}{grid}" for grid in _grid_suffixes() for d in DEPTHS for k in (1, 2)]
    for d in DEPTHS:
        for b in exit_spacings(d):
            exits = 3 * blocks_per_stage(d) // b
            names.append(f"resnet{d}-every{b}")
            names += [f"resnet{d}-exit{k}-every{b}{grid}" for grid in _grid_suffixes() for k in range(1, exits)]
    return names


def build(arch: str, width: float = 1, classes: int = 10, k_cpt_input: bool = False,
          exit_confidence: bool = False) -> RoutedNet:
    """A ResNet by arch name (module docstring): ``resnetD-exits``, ``resnetD`` or
    ``resnetD-exitK``, each with an optional ``-everyB`` (any ``B`` from 1 to ``3n``), then an
    optional ``-gridG`` for the early exits (any ``G`` >= 1)."""
    match = ARCH.fullmatch(arch)
    if match is None:
        raise ValueError(f"unknown ResNet arch {arch!r}; choose resnetD-exits, resnetD or resnetD-exitK, optionally "
                         f"ending in -everyB for an exit every B blocks and -gridG for early exits that read a G×G grid "
                         f"(D = 6n + 2, e.g. {', '.join(arch_names()[:3])}, resnet56-exits-every3-grid4)")
    depth = int(match.group(1))
    every = None if match.group(4) is None else int(match.group(4))
    grid = 1 if match.group(5) is None else int(match.group(5))
    if match.group(2) == "-exits":
        net = resnet(depth, width, classes, exit_every=every, k_cpt_input=k_cpt_input, grid=grid)
        return read_exit_confidence(net) if exit_confidence else net
    if k_cpt_input or exit_confidence:
        raise ValueError(f"{arch} is a static net without routers; drop k_cpt_input and exit_confidence")
    if match.group(3) is None and grid != 1:
        raise ValueError(f"{arch}: the plain ResNet's head reads the global average at every grid; name it "
                         f"resnet{depth}{'' if every is None else f'-every{every}'}")
    routed = resnet(depth, width, classes, exit_every=every, grid=grid)
    leaf = routed.leaves[-1] if match.group(3) is None else f"exit{match.group(3)}"
    if leaf not in routed.leaves:
        spacing = "" if every is None else f" every {every} blocks"
        raise ValueError(f"{arch}: ResNet-{depth} with exits{spacing} has exit1 to {routed.leaves[-1]}")
    return path_net(routed, leaf)


NODE_KEY = re.compile(r"nodes\.(seg|exit)(\d+)\.(.+)")
BLOCK_KEY = re.compile(r"transform\.(\d+)\.(.+)")
FIRST_SEGMENT_BLOCK = re.compile(r"nodes\.seg1\.transform\.\d+\.conv1\.weight")


def respace(state: Mapping[str, torch.Tensor], arch: str,
            like: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """A ResNet chain's ``state_dict`` of any exit spacing (a plain ``resnetD`` run's, a
    ``resnetD-exits`` run's, ...) with its keys renamed for ``arch``'s spacing
    (``resnetD-exits-everyB[-gridG]`` or ``resnetD-exits[-gridG]``), so that a trunk trained
    with exits after each stage gets an exit after every block without training again: the
    stem and blocks keep their order; a head or router moves to the exit after the same block,
    and one with no exit there in ``arch`` (an early head of another spacing) is left out, to
    be trained anew. With ``like`` (the ``state_dict`` of the net the result is for), so is a
    head or router whose tensors have other shapes there (a head that reads another grid)."""
    match = ARCH.fullmatch(arch)
    if match is None or match.group(2) != "-exits":
        raise ValueError(f"respace names keys for a ResNet chain with exits (resnetD-exits[-everyB]), got {arch!r}")
    total = 3 * blocks_per_stage(int(match.group(1)))
    target = total // 3 if match.group(4) is None else int(match.group(4))
    source = sum(1 for key in state if FIRST_SEGMENT_BLOCK.fullmatch(key))
    if source == 0:
        raise ValueError("the state holds no blocks under nodes.seg1: not a ResNet chain of routing_rl.nets.resnet")

    def blocks_before_exit(k: int, every: int) -> int:
        return min(k * every, total)

    exit_at = {blocks_before_exit(k, target): k for k in range(1, -(-total // target) + 1)}
    renamed = {}
    for key, tensor in state.items():
        node = NODE_KEY.fullmatch(key)
        if node is None:
            raise ValueError(f"the state's {key!r} is not a node of a ResNet chain")
        kind, index, rest = node.group(1), int(node.group(2)), node.group(3)
        block = BLOCK_KEY.fullmatch(rest) if kind == "seg" else None
        if block is not None:
            position = int(block.group(1)) - (1 if index == 1 else 0)  # seg1's first module is the stem
            if position < 0:
                renamed[key] = tensor
                continue
            g = (index - 1) * source + position
            segment = g // target + 1
            offset = g % target + (1 if segment == 1 else 0)
            renamed[f"nodes.seg{segment}.transform.{offset}.{block.group(2)}"] = tensor
            continue
        k = exit_at.get(blocks_before_exit(index, source))
        if k is not None:  # a head (exitK) or router (segK.router) where arch has an exit after the same block
            renamed[f"nodes.{kind}{k}.{rest}"] = tensor
    if like is None:
        return renamed

    def owner(key: str) -> str | None:
        """The head (``exitK``) or router (``segK.router``) a tensor belongs to; None for the trunk."""
        kind, index, rest = NODE_KEY.fullmatch(key).groups()
        return f"exit{index}" if kind == "exit" else f"seg{index}.router" if rest.startswith("router.") else None

    misfits = {owner(key) for key, tensor in renamed.items()
               if owner(key) and key in like and like[key].shape != tensor.shape}
    return {key: tensor for key, tensor in renamed.items() if owner(key) not in misfits}
