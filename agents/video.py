"""Hand-made routing policies for the video net (:mod:`routing_rl.nets.video`), the baselines
a learned policy is judged against on the same clips and the same modules:

* ``always-deep`` / ``always-cheap`` — compute every frame, on the deep or the cheap path;
* ``oracle`` — recompute (deep) exactly at the frames where a cut or a change happened, reuse
  everywhere else: it knows the clip's events, which no real policy does;
* ``difference-threshold`` — recompute (deep) when the change detector's mean thumbnail
  difference exceeds a threshold, chosen on validation clips for the lowest mean cost per
  frame at the k_cpt and with the error cost judged.

All are :class:`~routing_rl.training.episodes.FramePolicy` s for
:func:`~routing_rl.training.episodes.run_episodes`.
"""

from __future__ import annotations

import torch

from routing_rl.core.execution import Decide, Junction
from routing_rl.data import Split
from routing_rl.core.graph import RoutedNet
from routing_rl.nets.video import DIFFERENCE_SIDE, FRAME_SHAPE
from routing_rl.training.episodes import FramePolicy, episode_metrics, run_episodes

REUSE_SINK, COMPUTE_SINK = 0, 1  # at "detect"
CHEAP_SINK, DEEP_SINK = 0, 1  # at "col1"
MEAN_DIFFERENCE = FRAME_SHAPE[0] * DIFFERENCE_SIDE**2
"""Position of the mean absolute thumbnail difference in the detector's descriptor."""


def fixed(detect: int, col1: int) -> Decide:
    """The same sinks for every frame."""
    sinks = {"detect": detect, "col1": col1}

    def decide(junction: Junction) -> torch.Tensor:
        return torch.full_like(junction.index, sinks[junction.name])

    return decide


ALWAYS_DEEP = fixed(COMPUTE_SINK, DEEP_SINK)
ALWAYS_CHEAP = fixed(COMPUTE_SINK, CHEAP_SINK)


class Oracle(FramePolicy):
    """Recompute on the deep path at every event (``(N, T)`` bool: a cut or a change), else reuse."""

    def __init__(self, events: torch.Tensor):
        super().__init__()
        self.events = events

    def at(self, clips: torch.Tensor, t: int) -> Decide:
        event = self.events[clips.cpu(), t].to(clips.device)

        def decide(junction: Junction) -> torch.Tensor:
            if junction.name == "col1":
                return torch.full_like(junction.index, DEEP_SINK)
            return event[junction.index].long()

        return decide


def difference_threshold(threshold: float) -> Decide:
    """Recompute on the deep path where the mean thumbnail difference exceeds ``threshold``."""

    def decide(junction: Junction) -> torch.Tensor:
        if junction.name == "col1":
            return torch.full_like(junction.index, DEEP_SINK)
        return (junction.descriptor[:, MEAN_DIFFERENCE] > threshold).long()

    return decide


def tune_threshold(net: RoutedNet, task, validation: Split, k_cpt: float, candidates: torch.Tensor | None = None,
                   error_kind: str = "cross_entropy") -> tuple[float, list[dict]]:
    """The threshold with the lowest mean cost per frame (``error_kind`` error + k_cpt × MACs)
    on ``validation`` clips, and every candidate's ``{"threshold", "mean_cost", "accuracy",
    "mean_macs"}``."""
    if candidates is None:
        candidates = torch.logspace(-3, -0.5, 16)
    tried = []
    for threshold in candidates.tolist():
        run = run_episodes(net, task, validation, difference_threshold(threshold), k_cpt, error_kind)
        tried.append({"threshold": threshold, "mean_cost": episode_metrics(run, k_cpt)["mean_cost"],
                      "accuracy": float(run.correct.double().mean()), "mean_macs": float(run.macs.double().mean())})
    best = min(tried, key=lambda entry: entry["mean_cost"])
    return best["threshold"], tried
