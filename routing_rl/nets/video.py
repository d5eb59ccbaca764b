"""A routed per-frame net for video: reuse the last prediction, or compute a cheap or deep one.

Each frame's input carries the episode's *memory* beside the frame: the prediction last
computed (its logits), a thumbnail of the frame it was computed on (the key frame) and the
number of frames since. The tree::

    detect ──┬── reuse                       (the memory's logits; 0 MACs)
             └── col1 ──┬── exit1            (cheap: one column and a head)
                        └── col2 ── col3 ── exit3   (deep: three columns and a head)

``detect`` (the root) is the change detector: it shrinks the frame to an 8×8 thumbnail,
compares it with the key frame's, and hands its router the absolute difference pooled to
4×4 per channel, its mean, the memory's confidence (largest softmax probability) and age.
Its MACs — the shrinking, the difference, the pooling, the softmax — are declared through
``extra_macs`` and charged on every frame, reuse included. ``col1``'s router reads the
column's coarsest features, so the cheap-or-deep choice depends on the content (digits are
easy, photos are not). Columns and heads are the paper's (:mod:`~routing_rl.nets.multiscale`).

The memory is a flat vector per episode (:class:`MemoryLayout`); :func:`pack` puts frame and
memory into one input tensor ``(4, 32, 32)`` (the memory zero-padded into the fourth plane)
so that everything that stores or replays net inputs handles video frames unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.multiscale import COARSEST_SIDE, COLUMN_CHANNELS, Head, coarsest, column
from routing_rl.nets.router import Router

FRAME_SHAPE = (3, 32, 32)
THUMBNAIL_SIDE = 8
DIFFERENCE_SIDE = 4
AGE_CAP = 32
"""Ages are read as ``min(age, AGE_CAP) / AGE_CAP``; a fresh episode's memory is this old."""
REUSE, CHEAP, DEEP = "reuse", "exit1", "exit3"
LEAVES = (REUSE, CHEAP, DEEP)
"""The leaves, in ``net.leaves`` order: reuse the memory, the cheap path's head, the deep path's head."""


@dataclass(frozen=True)
class MemoryLayout:
    """Where each part of an episode's memory vector lies, for ``classes`` classes.

    ``[logits (classes) | key-frame thumbnail (3·8·8) | age (1)]``
    """

    classes: int

    @property
    def thumbnail(self) -> slice:
        return slice(self.classes, self.classes + FRAME_SHAPE[0] * THUMBNAIL_SIDE**2)

    @property
    def size(self) -> int:
        return self.thumbnail.stop + 1

    def initial(self, batch: int, device=None) -> torch.Tensor:
        """``(batch, size)`` the memory of a fresh episode: no prediction (zero logits), a
        black key frame, and the largest age."""
        memory = torch.zeros(batch, self.size, device=device)
        memory[:, -1] = AGE_CAP
        return memory

    def carry(self, memory: torch.Tensor, frames: torch.Tensor, logits: torch.Tensor, reused: torch.Tensor) -> torch.Tensor:
        """The memory after frames ``(b, 3, 32, 32)`` reached leaves with ``logits``
        ``(b, classes)``: older by one frame where ``reused`` ``(b,)``, else the new
        prediction with this frame as the key frame."""
        fresh = torch.cat([logits.to(memory.dtype), thumbnail(frames).flatten(1), memory.new_zeros(len(memory), 1)], 1)
        older = memory.clone()
        older[:, -1] = (older[:, -1] + 1).clamp(max=AGE_CAP)
        return torch.where(reused[:, None], older, fresh)


def thumbnail(frames: torch.Tensor) -> torch.Tensor:
    """``(b, 3, 8, 8)`` the frames averaged over 4×4 blocks."""
    return F.avg_pool2d(frames, FRAME_SHAPE[1] // THUMBNAIL_SIDE)


def pack(frames: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    """The net's input ``(b, 4, 32, 32)``: frames ``(b, 3, 32, 32)`` and memory ``(b, M)``,
    ``M <= 1024``, zero-padded into the fourth plane."""
    side = FRAME_SHAPE[1]
    plane = F.pad(memory.to(frames.dtype), (0, side * side - memory.shape[1])).view(-1, 1, side, side)
    return torch.cat([frames, plane], 1)


class ChangeDetector(nn.Module):
    """The root's transform: unpacks the input and measures how far the frame moved away from
    the key frame. Returns ``{"frame", "logits", "descriptor"}``; the descriptor ``(b, 51)``
    is ``[|difference| pooled to 4×4×3 | its mean | memory confidence | memory age]``."""

    def __init__(self, memory: MemoryLayout):
        super().__init__()
        self.memory = memory

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        frame = x[:, : FRAME_SHAPE[0]]
        memory = x[:, FRAME_SHAPE[0]].flatten(1)[:, : self.memory.size]
        logits = memory[:, : self.memory.classes]
        key = memory[:, self.memory.thumbnail].view(-1, FRAME_SHAPE[0], THUMBNAIL_SIDE, THUMBNAIL_SIDE)
        difference = F.adaptive_avg_pool2d((thumbnail(frame) - key).abs(), DIFFERENCE_SIDE).flatten(1)
        confidence = F.softmax(logits, 1).amax(1, keepdim=True)
        age = memory[:, -1:].clamp(max=AGE_CAP) / AGE_CAP
        descriptor = torch.cat([difference, difference.mean(1, keepdim=True), confidence, age], 1)
        return {"frame": frame, "logits": logits, "descriptor": descriptor}

    def extra_macs(self, inputs, output) -> int:
        """Per frame: one add per pixel to shrink the frame, one subtraction and one add per
        thumbnail entry for the pooled difference, one exponential and add per class."""
        return FRAME_SHAPE[0] * FRAME_SHAPE[1] * FRAME_SHAPE[2] + 2 * FRAME_SHAPE[0] * THUMBNAIL_SIDE**2 + 2 * self.memory.classes


def detector_descriptor(state: dict[str, torch.Tensor]) -> torch.Tensor:
    return state["descriptor"]


class Reuse(nn.Module):
    """The reuse leaf: the memory's logits, unchanged (no MACs)."""

    def reads(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"logits": state["logits"]}

    def forward(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return state["logits"]


class FrameColumn(nn.Module):
    """The first column, on the frame part of the detector's state."""

    def __init__(self, width: int):
        super().__init__()
        self.column = column(1, width)

    def reads(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"frame": state["frame"]}

    def forward(self, state: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return self.column(state["frame"])


def detector_features(classes: int) -> int:
    return FRAME_SHAPE[0] * DIFFERENCE_SIDE**2 + 3


def video_net(classes: int, width: int = 1, k_cpt_input: bool = False) -> RoutedNet:
    """The reuse / cheap / deep tree of the module docstring, ``classes`` classes."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer multiplier of the channels, got {width!r}")
    memory = MemoryLayout(classes)
    if memory.size > FRAME_SHAPE[1] * FRAME_SHAPE[2]:
        raise ValueError(f"{classes} classes do not fit the memory plane; at most {FRAME_SHAPE[1] * FRAME_SHAPE[2] - memory.size + classes}")
    side = COARSEST_SIDE**2
    c1, c3 = COLUMN_CHANNELS[0][-1] * width, COLUMN_CHANNELS[2][-1] * width
    nodes = {
        "detect": Node(ChangeDetector(memory), [REUSE, "col1"], Router(detector_features(classes), 2, k_cpt_input),
                       descriptor=detector_descriptor),
        REUSE: Node(Reuse()),
        "col1": Node(FrameColumn(width), [CHEAP, "col2"], Router(c1 * side, 2, k_cpt_input), descriptor=coarsest),
        CHEAP: Node(Head(c1, classes)),
        "col2": Node(column(2, width), ["col3"]),
        "col3": Node(column(3, width), [DEEP]),
        DEEP: Node(Head(c3, classes)),
    }
    input_shape = (FRAME_SHAPE[0] + 1, *FRAME_SHAPE[1:])
    return RoutedNet(nodes, root="detect", input_shape=input_shape, classes=classes, k_cpt_input=k_cpt_input)
