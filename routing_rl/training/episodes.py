"""Episodes of frames: a task's memory carried from each frame to the next.

A split of sequences holds ``images (N, T, ...)`` and ``labels (N, T)``. Its frames are not
independent examples: the net's input at frame ``t`` is ``task.net_input(frame_t, memory)``,
and the memory after it is ``task.carry(memory, frame_t, logits, leaf)`` — it depends on where
the routing sent the frames before. Two things therefore run whole episodes:

* :func:`run_episodes` — judging a routing policy on clips, frame after frame, every clip
  of a batch in step (:func:`~routing_rl.training.evaluate.evaluate` summarises it);
* :class:`EpisodeSampler` — training batches for the paper's learners: the next frame of
  ``batch_size`` clips in flight, with the memory the net's own inference routing carried
  (argmax decisions, no gradient) — the memory the learned policy will meet at test time;
* :func:`frame_examples` — a split of single examples that anything routing one input at a
  time can use (batch-norm recalibration, the threshold baseline's confidences): each frame
  packed with the memory a routing policy carried to it (a split of single inputs as it is).

``task`` is anything with the task API's ``initial_memory``, ``net_input`` and ``carry``
(:class:`~routing_rl.envs.task.RoutingTask`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from routing_rl.core.execution import Decide, argmax_decide, dynamic, route
from routing_rl.core.graph import RoutedNet
from routing_rl.core.seeds import seeded_generator
from routing_rl.data import Split


class FramePolicy:
    """A routing policy that may look at where it is in the episodes: :meth:`at` gives the
    ``decide`` for frame ``t`` of the clips ``clips`` (``(b,)`` indices into the split).
    Plain ``decide`` functions are wrapped in one that ignores both."""

    def __init__(self, decide: Decide = argmax_decide):
        self.decide = decide

    def at(self, clips: torch.Tensor, t: int) -> Decide:
        return self.decide


@dataclass
class Episodes:
    """What happened at every frame of ``N`` clips of ``T`` frames, all ``(N, T)`` on the CPU:
    the leaf reached (index into ``net.leaves``), whether its prediction was right, the MACs
    and the error cost (``error_cost`` kind) of the frame; with ``keep_inputs``, also the
    net's input at every frame ``(N, T, *net.input_shape)`` (frame and memory packed)."""

    leaf: torch.Tensor
    correct: torch.Tensor
    macs: torch.Tensor
    c_err: torch.Tensor
    inputs: torch.Tensor | None = None


@torch.no_grad()
def run_episodes(net: RoutedNet, task, split: Split, policy: FramePolicy | Decide = argmax_decide, k_cpt=None,
                 error_kind: str = "cross_entropy", batch_size: int = 256, keep_inputs: bool = False) -> Episodes:
    """Route every clip of ``split`` frame by frame in eval mode, carrying the task's memory
    (``keep_inputs``: also return every frame's net input)."""
    if split.frames < 2:
        raise ValueError("run_episodes routes sequences (images (N, T, ...)); evaluate single inputs with evaluate()")
    policy = policy if isinstance(policy, FramePolicy) else FramePolicy(policy)
    was_training = net.training
    net.eval()
    device = net.leaf_macs.device
    parts = []
    try:
        for start in range(0, len(split), batch_size):
            clips = torch.arange(start, min(start + batch_size, len(split)), device=device)
            frames = split.images[start : start + batch_size].to(device)
            labels = split.labels[start : start + batch_size].to(device)
            memory = task.initial_memory(frames[:, 0])
            steps, kept = [], None
            for t in range(split.frames):
                inputs = task.net_input(frames[:, t], memory)
                routed = route(net, inputs, policy.at(clips, t), k_cpt if net.k_cpt_input else None)
                memory = task.carry(memory, frames[:, t], routed.logits, routed.leaf)
                c_err = task.error_cost(routed.logits, labels[:, t], error_kind)
                steps.append((routed.leaf, routed.pred == labels[:, t], routed.macs, c_err))
                if keep_inputs:  # written in place: a list of T inputs and its stack would hold them twice
                    if kept is None:
                        kept = torch.empty((len(inputs), split.frames, *inputs.shape[1:]), dtype=inputs.dtype)
                    kept[:, t] = inputs
            parts.append([torch.stack(values, 1).cpu() for values in zip(*steps)] + ([kept] if keep_inputs else []))
    finally:
        net.train(was_training)
    return Episodes(*(values[0] if len(values) == 1 else torch.cat(values) for values in zip(*parts)))


def frame_examples(net: RoutedNet, task, split: Split, policy: FramePolicy | Decide = argmax_decide, k_cpt=None,
                   limit: int | None = None, seed: int = 0) -> Split:
    """``split`` as single examples ``net`` routes one at a time: a split of single inputs as
    it is; a split of sequences as the net inputs of its frames ``(n·T, *net.input_shape)``,
    each packed with the memory that routing the clip's earlier frames with ``policy`` carried
    (:func:`run_episodes`), labels and sources ``(n·T,)``. ``limit``: at most this many frames,
    from whole clips drawn at random (``seed``); None: every clip."""
    if split.frames == 1:
        return split
    if task is None:
        raise ValueError("the frames of a split of sequences are routed with the task's memory; pass task=")
    clips = len(split) if limit is None else min(len(split), max(1, limit // split.frames))
    if clips < len(split):
        split = split.subset(torch.randperm(len(split), generator=seeded_generator(seed))[:clips])
    played = run_episodes(net, task, split, policy, k_cpt, keep_inputs=True)
    return Split(played.inputs.flatten(0, 1), split.labels.flatten().cpu(), split.source.flatten().cpu())


def episode_metrics(episodes: Episodes, k_cpt: float | None) -> dict:
    """What only episodes have, JSON-ready: ``clips``, ``mean_c_err`` and ``mean_cost`` per
    frame (``c_err + k_cpt × MACs``, the negated mean reward per frame), and per frame
    position the curves ``accuracy_by_frame`` and ``macs_by_frame`` ``(T,)``."""
    macs = episodes.macs.double()
    cost = episodes.c_err.double() + (k_cpt or 0.0) * macs
    return {
        "clips": int(episodes.leaf.shape[0]),
        "mean_c_err": float(episodes.c_err.double().mean()),
        "mean_cost": float(cost.mean()),
        "accuracy_by_frame": episodes.correct.double().mean(0).tolist(),
        "macs_by_frame": macs.mean(0).tolist(),
    }


class EpisodeSampler:
    """Training batches from clips in flight: the next frame of each of ``batch_size`` clips.

    Each slot plays one clip of ``split`` (drawn uniformly, seeded) from its first frame to
    its last, then draws another; at the start slots begin at random frames (a fresh memory
    there is a fresh episode), so that batches mix frame positions from the first one on.
    :meth:`next` returns the net inputs (frame and memory, packed by ``task.net_input``) with
    the frames' labels and sources, then carries every slot's memory with the net's inference
    routing (argmax, eval mode, no gradient) on those inputs.
    """

    def __init__(self, task, split: Split, batch_size: int, seed: int):
        if split.frames < 2:
            raise ValueError("an EpisodeSampler plays sequences (images (N, T, ...))")
        if len(split) == 0:
            raise ValueError("the training split has no clips")
        self.task, self.split, self.batch_size = task, split, batch_size
        self.generator = seeded_generator(seed)
        self.clip = torch.randint(len(split), (batch_size,), generator=self.generator)
        self.frame = torch.randint(split.frames, (batch_size,), generator=self.generator)
        self.memory: torch.Tensor | None = None

    def next(self, net: RoutedNet, k_cpt=None) -> Split:
        device = net.leaf_macs.device
        clip, frame = self.clip.to(self.split.labels.device), self.frame.to(self.split.labels.device)
        frames = self.split.images[clip, frame].to(device)
        labels = self.split.labels[clip, frame].to(device)
        fresh = self.task.initial_memory(frames)
        if self.memory is None:
            self.memory = fresh
        self.memory = torch.where((self.frame == 0).to(device).view(-1, *[1] * (fresh.dim() - 1)), fresh, self.memory.to(device))
        inputs = self.task.net_input(frames, self.memory)
        was_training = net.training
        net.eval()
        try:
            routed = dynamic(net, inputs, k_cpt if net.k_cpt_input else None)
        finally:
            net.train(was_training)
        self.memory = self.task.carry(self.memory, frames, routed.logits, routed.leaf)
        batch = Split(inputs, labels, self.split.source[clip, frame].to(device))
        ended = self.frame == self.split.frames - 1
        self.frame = torch.where(ended, 0, self.frame + 1)
        self.clip[ended] = torch.randint(len(self.split), (int(ended.sum()),), generator=self.generator)
        return batch

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "clip": self.clip, "frame": self.frame,
                "memory": None if self.memory is None else self.memory.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.clip, self.frame, self.memory = state["clip"], state["frame"], state["memory"]
