"""Synthetic video clips made of a split's real images, labelled per frame.

A clip is ``frames`` consecutive 32×32 RGB frames. Each frame shows one *object* — an image
of the split (a digit or a CIFAR-10 photo), shrunk to a square of ``object_sizes`` pixels —
moving in a straight line (bouncing off the frame's edges) over a smooth colour *background*
that pans. A frame's label is the label of the object it shows.

Two kinds of event happen at random frames (never at frame 0, which always starts a shot):

* a *cut* (probability ``cut_probability`` per frame): a new shot — new background, new
  object, new motion;
* a *change* (probability ``change_probability`` per frame, when no cut): the object is
  replaced by another image of the split, at a new size and motion, over the same panning
  background — a subtler change for a detector to see.

Between events frames differ only by motion, the camera's per-frame gain and sensor noise,
so a prediction made on one frame of a segment stays right for the rest of it.

Clips are rendered a slice of frames at a time with ``grid_sample`` (no per-pixel Python) and are a
deterministic function of the split, the :class:`ClipConfig` and the seed. Clips only ever
show images of the split they were made from: build training clips from a training split and
test clips from the test split, and no test image is ever seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from routing_rl.core.seeds import seeded_generator
from routing_rl.data.containers import Split
from routing_rl.data.mapped import take_rows

FRAME_SIDE = 32
CHUNK = 256
"""Clips whose random numbers are drawn together (changing it changes the clips)."""
FRAME_SLICE = 512
"""Frames rendered together from a chunk's draws: bounds the intermediate tensors of
:func:`make_clips` (the frames do not depend on it)."""
BACKGROUND_GRID = 6
"""Side of the random colour grid a background is interpolated from: low enough for smooth
backgrounds, high enough that panning changes them."""


@dataclass(frozen=True)
class ClipConfig:
    """How clips are drawn.

    frames: frames per clip (T).
    cut_probability, change_probability: chance that a frame (after the first) starts a new
        shot, or replaces the object within the shot.
    object_sizes: smallest and largest side of the object, in pixels (drawn per segment).
    object_speed: largest object speed, pixels per frame (per axis, drawn per segment).
    pan_speed: largest background speed, in frame widths per frame (per axis, per shot).
    gain: standard deviation of the per-frame brightness gain around 1.
    noise: standard deviation of per-pixel sensor noise (pixel values are in [0, 1]).
    """

    frames: int = 24
    cut_probability: float = 0.08
    change_probability: float = 0.05
    object_sizes: tuple[int, int] = (22, 28)
    object_speed: float = 1.5
    pan_speed: float = 0.03
    gain: float = 0.03
    noise: float = 0.02

    def __post_init__(self) -> None:
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or self.frames < 2:
            raise ValueError(f"a clip needs at least 2 frames, got frames={self.frames!r}")
        p_cut, p_change = self.cut_probability, self.change_probability
        if not (0 <= p_cut <= 1 and 0 <= p_change <= 1 and p_cut + p_change <= 1):
            raise ValueError(
                f"cut_probability and change_probability must be in [0, 1] with a sum <= 1, got {p_cut!r} and {p_change!r}"
            )
        low, high = self.object_sizes
        if not 1 <= low <= high <= FRAME_SIDE:
            raise ValueError(f"object_sizes must satisfy 1 <= smallest <= largest <= {FRAME_SIDE}, got {self.object_sizes!r}")
        for name in ("object_speed", "pan_speed", "gain", "noise"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Clips:
    """``C`` clips of ``T`` frames.

    frames: ``(C, T, 3, 32, 32)`` float32 in [0, 1].
    labels, source: ``(C, T)`` int64, the label and source (index into ``SOURCES``) of the
        object each frame shows.
    image: ``(C, T)`` int64, the index in the split of the image each frame shows.
    cut: ``(C, T)`` bool, the frame starts a shot (always true at frame 0).
    change: ``(C, T)`` bool, the frame replaces the object within a shot.
    """

    frames: torch.Tensor
    labels: torch.Tensor
    source: torch.Tensor
    image: torch.Tensor
    cut: torch.Tensor
    change: torch.Tensor

    def __len__(self) -> int:
        return self.frames.shape[0]

    @property
    def length(self) -> int:
        """Frames per clip (T)."""
        return self.frames.shape[1]

    @property
    def event(self) -> torch.Tensor:
        """``(C, T)`` bool: the frame shows a new object (a cut or a change)."""
        return self.cut | self.change

    def to(self, device: torch.device | str) -> Clips:
        return Clips(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))

    def subset(self, indices: torch.Tensor) -> Clips:
        """The clips at ``indices`` (a 1-D index tensor)."""
        indices = torch.as_tensor(indices, dtype=torch.long, device=self.labels.device)
        return Clips(*(getattr(self, name).index_select(0, indices) for name in self.__dataclass_fields__))

    def flat(self) -> Split:
        """Every frame as one example of a :class:`Split`, clip by clip, ``(C·T, ...)``."""
        return Split(self.frames.flatten(0, 1), self.labels.flatten(), self.source.flatten())


def _uniform(generator: torch.Generator, shape, low: float, high: float, device) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=generator, device=device)


def _bounce(position: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Fold positions into ``[0, span]`` as a point bouncing between two walls would."""
    span = span.clamp(min=1e-6)
    folded = torch.remainder(position, 2 * span)
    return torch.where(folded > span, 2 * span - folded, folded)


def _events(generator: torch.Generator, clips: int, config: ClipConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    draw = torch.rand(clips, config.frames, generator=generator, device=device)
    cut = draw < config.cut_probability
    change = ~cut & (draw < config.cut_probability + config.change_probability)
    cut[:, 0], change[:, 0] = True, False
    return cut, change


def make_clips(split: Split, clips: int, config: ClipConfig = ClipConfig(), seed: int = 0) -> Clips:
    """``clips`` clips showing images of ``split`` only, deterministic in ``seed``.

    Rendering runs on the split's device; see the module docstring for what a clip holds.
    """
    if isinstance(clips, bool) or not isinstance(clips, int) or clips < 1:
        raise ValueError(f"the number of clips must be a positive integer, got {clips!r}")
    if len(split) == 0:
        raise ValueError("the split has no images to make clips of")
    if tuple(split.images.shape[1:]) != (3, FRAME_SIDE, FRAME_SIDE):
        raise ValueError(f"clips are made of (3, {FRAME_SIDE}, {FRAME_SIDE}) images, got {tuple(split.images.shape[1:])}")
    generator = seeded_generator(seed, split.images.device)
    # rendered a chunk at a time, so that the intermediate images stay small
    chunks = [_render(split, min(CHUNK, clips - start), config, generator) for start in range(0, clips, CHUNK)]
    if len(chunks) == 1:
        return chunks[0]
    return Clips(*(torch.cat([getattr(chunk, name) for chunk in chunks]) for name in Clips.__dataclass_fields__))


def _render(split: Split, clips: int, config: ClipConfig, generator: torch.Generator) -> Clips:
    device = split.images.device
    C, T = clips, config.frames
    cut, change = _events(generator, C, config, device)
    # Shots and segments are numbered across all clips, so one draw per shot / segment suffices.
    shot = torch.cumsum(cut.flatten(), 0) - 1  # (C·T,)
    segment = torch.cumsum((cut | change).flatten(), 0) - 1
    n_shots, n_segments = int(shot[-1]) + 1, int(segment[-1]) + 1
    step = torch.arange(T, device=device).expand(C, T)
    # frames elapsed since the shot / segment began (frame 0 always begins both)
    since_cut = (step - torch.cummax(torch.where(cut, step, 0), dim=1).values).flatten().float()
    since_event = (step - torch.cummax(torch.where(cut | change, step, 0), dim=1).values).flatten().float()

    image = torch.randint(len(split), (n_segments,), generator=generator, device=device)
    low, high = config.object_sizes
    size = torch.randint(low, high + 1, (n_segments,), generator=generator, device=device).float()
    start = _uniform(generator, (n_segments, 2), 0.0, 1.0, device) * (FRAME_SIDE - size)[:, None]
    velocity = _uniform(generator, (n_segments, 2), -config.object_speed, config.object_speed, device)
    canvas = torch.rand(n_shots, 3, BACKGROUND_GRID, BACKGROUND_GRID, generator=generator, device=device)
    pan_start = _uniform(generator, (n_shots, 2), -0.5, 0.5, device)
    pan_velocity = _uniform(generator, (n_shots, 2), -config.pan_speed, config.pan_speed, device)
    gain = 1 + config.gain * torch.randn(C * T, generator=generator, device=device)
    noise = config.noise * torch.randn(C * T, 3, FRAME_SIDE, FRAME_SIDE, generator=generator, device=device)

    # Object: the image shrunk to `size` pixels, its top-left corner moving and bouncing.
    seg_size = size[segment]
    corner = _bounce(start[segment] + velocity[segment] * since_event[:, None], (FRAME_SIDE - seg_size)[:, None])
    centre = (corner + seg_size[:, None] / 2) / FRAME_SIDE * 2 - 1  # normalised coordinates
    scale = (FRAME_SIDE / seg_size)[:, None]
    # Background: a window of half the canvas's width, panning and bouncing inside it.
    pan = _bounce(pan_start[shot] + 0.5 + pan_velocity[shot] * since_cut[:, None], torch.ones(1, device=device)) - 0.5
    shown = image[segment]
    objects = take_rows(split.images, shown)  # once per chunk: a dataset file's mapping is looked up once
    frames = torch.empty(C * T, 3, FRAME_SIDE, FRAME_SIDE, device=device)
    for first in range(0, C * T, FRAME_SLICE):  # every step is per frame: slices change no value
        part = slice(first, first + FRAME_SLICE)
        n = len(shown[part])
        identity = torch.tensor([[0.5, 0.0], [0.0, 0.5]], device=device).expand(n, 2, 2)
        grid = F.affine_grid(torch.cat([identity, pan[part, :, None]], dim=2), [n, 3, FRAME_SIDE, FRAME_SIDE],
                             align_corners=False)
        background = F.grid_sample(canvas[shot[part]], grid, mode="bilinear", align_corners=False)
        theta = torch.zeros(n, 2, 3, device=device)
        theta[:, 0, 0], theta[:, 1, 1] = scale[part, 0], scale[part, 0]
        theta[:, :, 2] = -centre[part] * scale[part]
        grid = F.affine_grid(theta, [n, 3, FRAME_SIDE, FRAME_SIDE], align_corners=False)
        obj = F.grid_sample(objects[part], grid, mode="bilinear", align_corners=False)
        mask = F.grid_sample(torch.ones(n, 1, FRAME_SIDE, FRAME_SIDE, device=device), grid, mode="bilinear",
                             align_corners=False)
        frames[part] = (background * (1 - mask) + obj) * gain[part, None, None, None] + noise[part]

    return Clips(
        frames=frames.clamp_(0, 1).view(C, T, 3, FRAME_SIDE, FRAME_SIDE),
        labels=split.labels[shown].view(C, T),
        source=split.source[shown].view(C, T),
        image=shown.view(C, T),
        cut=cut,
        change=change,
    )
