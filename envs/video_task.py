"""Video routing: per-frame decisions on clips, reusing what earlier frames computed.

``routing_rl/VideoRouting-v0`` is a :class:`VideoTask`: clips of moving digits and CIFAR-10
photos over panning backgrounds, with cuts and content changes at random frames
(:mod:`routing_rl.data.video`), built from the hybrid dataset's images — training clips
from its training split, test clips from its test split, so no test image is seen in
training. An episode is one clip; each frame is routed through
:func:`routing_rl.nets.video.video_net`: reuse the memory's prediction (almost free), or
compute a cheap or a deep prediction, which becomes the memory. The reward of a frame is
``-(c_err + k_cpt × MACs)``, the change detector's MACs included.

## Action Space
``Discrete(2)``: at ``detect``, 0 reuses the memory, 1 computes; at ``col1``, 0 takes the
cheap head, 1 continues to the deep path.

## Observation Space
``Box(-1e6, 1e6, (258,))``: the junction's descriptor (at ``detect``: the 4×4×3 pooled
absolute difference between the frame's and the key frame's thumbnails, its mean, the
memory's confidence and age; at ``col1``: the column's 4×4×16 coarsest features),
zero-padded to 256, then the junction's one-hot.

## Rewards
Per step ``-k_cpt × MACs`` computed in it; at a frame's leaf also ``-c_err`` of its
prediction. A clip's rewards sum to ``-Σ_frames (c_err + k_cpt × MACs)``.

## Starting State
A random clip of the split, at its first frame, with an empty memory (no prediction).

## Episode End
Terminates after the clip's last frame reached a leaf; never truncates.

## Arguments
``frames`` (16), ``train_clips`` (5000: about 1 GB of frames), ``test_clips`` (500), ``clip_seed`` (0),
``images`` (``hybrid``), ``data_dir``, ``download``, ``train_examples`` and ``eval_examples`` (caps on
the clips made: a training run passes its ``--train-examples`` and ``--eval-examples``, so
``--preset smoke`` makes a few hundred clips), and every routing env keyword (``k_cpt``, ``train``, ...).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from routing_rl.training.learners import trains_static_nets
from routing_rl.core.graph import RoutedNet
from routing_rl.data import RoutingDataset, Split, load_dataset
from routing_rl.data.video import ClipConfig, Clips, make_clips
from routing_rl.envs.task import RoutingTask
from routing_rl.nets.video import DEEP, LEAVES, REUSE, MemoryLayout, pack, video_net

TEST_SEED_OFFSET = 1
"""Test clips are drawn with ``clip_seed + 1``: another stream than the training clips'."""


class VideoTask(RoutingTask):
    """Per-frame routing on clips made of the hybrid dataset's images.

    Args:
        frames: frames per clip (T).
        train_clips: clips made of the training images.
        test_clips: clips made of the test images.
        clip_seed: seed of the clips (test clips use ``clip_seed + 1``).
        images: the images clips are made of: a dataset name (default ``hybrid``), loaded from
            ``data_dir`` on first use, or a :class:`~routing_rl.data.RoutingDataset` of
            32×32 images with train and test splits.
        data_dir: where the named dataset's files are.
        download: whether a named dataset missing from ``data_dir`` may be downloaded.
        train_examples: at most this many training clips are made (None: ``train_clips``); a
            run passes its cap (:func:`~routing_rl.app.runs.task_for`).
        eval_examples: at most this many test clips are made (None: ``test_clips``).
    """

    archs = ("video",)

    def __init__(self, frames: int = 16, train_clips: int = 5000, test_clips: int = 500, clip_seed: int = 0,
                 images: str | RoutingDataset = "hybrid", data_dir: str | Path | None = None, download: bool = True,
                 train_examples: int | None = None, eval_examples: int | None = None):
        if not isinstance(images, (str, RoutingDataset)):
            raise TypeError(f"images must be a dataset name or a RoutingDataset, got {type(images).__name__}")
        self.config = ClipConfig(frames=frames)
        for name, value in (("train_clips", train_clips), ("test_clips", test_clips), ("train_examples", train_examples),
                            ("eval_examples", eval_examples)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        train_clips = min(train_clips, train_examples or train_clips)
        test_clips = min(test_clips, eval_examples or test_clips)
        self.train_clips, self.test_clips, self.clip_seed = train_clips, test_clips, clip_seed
        self.images, self.data_dir, self.download = images, data_dir, download
        self.clips: dict[str, Clips] = {}

    def load_dataset(self) -> RoutingDataset:
        images = self.images
        if isinstance(images, str):
            images = load_dataset(images, data_dir=self.data_dir, download=self.download)
        return self.from_images(images)

    def from_images(self, images: RoutingDataset) -> RoutingDataset:
        """The clip dataset made of ``images`` (a dataset of 32×32 images with train and test
        splits); keeps the :class:`Clips` (event flags included) in :attr:`clips`."""
        self.clips = {
            "train": make_clips(images.train, self.train_clips, self.config, self.clip_seed),
            "test": make_clips(images.test, self.test_clips, self.config, self.clip_seed + TEST_SEED_OFFSET),
        }
        splits = {name: episodes(clips) for name, clips in self.clips.items()}
        description = {
            "name": f"video-{images.name}",
            "images": images.description,
            "clips": {"train": self.train_clips, "test": self.test_clips, "seed": self.clip_seed,
                      "test_seed": self.clip_seed + TEST_SEED_OFFSET, **dataclasses.asdict(self.config)},
            "rule": "training clips show only training images, test clips only test images",
            "events": {name: {"cuts": int(c.cut.sum()), "changes": int(c.change.sum()), "frames": int(c.cut.numel())}
                       for name, c in self.clips.items()},
        }
        return RoutingDataset(f"video-{images.name}", images.classes, splits["train"], splits["test"], description,
                              images.sources)

    def static_archs(self) -> tuple[str, ...]:
        """The cheap and the deep path of the video net without its routers (the reuse path has
        no weights to train), named without loading the clips. Their change detector feeds no
        router, so the memory carried beside each frame does not change what they compute."""
        return tuple(f"static-{leaf}" for leaf in LEAVES if leaf != REUSE)

    def default_arch(self, agent: str | None) -> str:
        return f"static-{DEEP}" if trains_static_nets(agent) else self.archs[0]

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        net = video_net(len(self.classes), width, k_cpt_input)
        assert tuple(net.leaves) == LEAVES, net.leaves
        return net

    @property
    def memory(self) -> MemoryLayout:
        return MemoryLayout(len(self.classes))

    def initial_memory(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.memory.initial(len(inputs), inputs.device)

    def net_input(self, inputs: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
        return pack(inputs, memory)

    def carry(self, memory: torch.Tensor, inputs: torch.Tensor, logits: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
        return self.memory.carry(memory, inputs, logits, leaf == LEAVES.index(REUSE))


def episodes(clips: Clips) -> Split:
    """The clips as a split of episodes: images ``(N, T, 3, 32, 32)``, labels and sources
    ``(N, T)``, frame by frame."""
    return Split(clips.frames, clips.labels, clips.source)
