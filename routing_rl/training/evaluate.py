"""One evaluator for every learner: accuracy, MACs and where each example left the net.

Every learner — the paper's, the threshold baseline, SB3 agents — is judged by routing the
test split through the same :class:`~routing_rl.core.graph.RoutedNet` with
:func:`~routing_rl.core.execution.route`; only the ``decide`` function differs (argmax of the
routers by default). So every point on an accuracy/MAC plot means the same thing.

:func:`heads_alone` scores the same net without routing, every example sent to one leaf: a
router that sends everything to one exit is only right if that exit is the cheapest of them.
"""

from __future__ import annotations

import torch

from routing_rl.data import SOURCES, Split
from routing_rl.core.execution import Decide, argmax_decide, route
from routing_rl.core.graph import RoutedNet
from routing_rl.training.episodes import episode_metrics, run_episodes
from routing_rl.training.guard import NonFiniteLossError


class NonFiniteEvaluationError(NonFiniteLossError):
    """A net's outputs were NaN on examples it was judged on: no accuracy is computed from
    them (argmax of NaN picks a class all the same). ``bad_inputs`` says whether the examples'
    inputs were to blame (the data's fault) rather than the weights (training's)."""

    def __init__(self, message: str, bad_inputs: bool):
        super().__init__(message)
        self.bad_inputs = bad_inputs


@torch.no_grad()
def evaluate(
    net: RoutedNet,
    split: Split,
    k_cpt: float | None = None,
    decide: Decide = argmax_decide,
    batch_size: int = 1000,
    classes: tuple[str, ...] | None = None,
    sources: tuple[str, ...] | None = None,
    task=None,
) -> dict:
    """Route ``split`` through ``net`` in eval mode and summarise, JSON-ready.

    Returns ``accuracy`` (fraction correct), ``mean_macs`` (MACs per example), ``k_cpt``,
    ``examples``, ``source_accuracy`` (fraction correct per source present), and per leaf: ``fraction`` of examples classified there, their
    ``accuracy`` (None where no example arrived), ``count``, and counts ``by_class`` and
    ``by_source`` (names from ``classes`` and ``sources``, the dataset's names; not given:
    ``task``'s, else classes by number and the paper's :data:`~routing_rl.data.SOURCES`).

    A split of sequences (``images (N, T, ...)``) is routed clip by clip with ``task``'s
    memory (:func:`~routing_rl.training.episodes.run_episodes`; ``decide`` may then be a
    :class:`~routing_rl.training.episodes.FramePolicy`); every frame counts as an example, and
    the result also holds :func:`~routing_rl.training.episodes.episode_metrics`.

    Raises :class:`NonFiniteEvaluationError` when the net's outputs are NaN on any example,
    saying whether the inputs or the weights are to blame.
    """
    if task is not None:
        classes = task.classes if classes is None else classes
        sources = task.sources if sources is None else sources
    sources = SOURCES if sources is None else sources
    if split.frames > 1:
        if task is None:
            raise ValueError("a split of sequences is evaluated clip by clip, carrying the task's memory; pass task=")
        episodes = run_episodes(net, task, split, decide, k_cpt)
        check_outputs(split, int(episodes.c_err.isnan().sum()), episodes.c_err.numel())
        result = summarise(net, episodes.leaf.flatten(), episodes.correct.flatten(), episodes.macs.flatten(),
                           split.labels.flatten().cpu(), split.source.flatten().cpu(), k_cpt, classes,
                           sources)
        return {**result, **episode_metrics(episodes, k_cpt)}
    was_training = net.training
    net.eval()
    device = net.leaf_macs.device
    leaves, correct, macs = [], [], []
    nan = torch.zeros((), dtype=torch.long, device=device)  # examples whose logits hold NaN
    try:
        for start in range(0, len(split), batch_size):
            x = split.images[start : start + batch_size].to(device, non_blocking=True)
            y = split.labels[start : start + batch_size].to(device)
            routed = route(net, x, decide, k_cpt if net.k_cpt_input else None)
            leaves.append(routed.leaf)
            correct.append(routed.pred == y)
            macs.append(routed.macs)
            nan += routed.logits.isnan().flatten(1).any(1).sum()
    finally:
        net.train(was_training)
    check_outputs(split, int(nan), len(split))
    leaf, correct, macs = torch.cat(leaves).cpu(), torch.cat(correct).cpu(), torch.cat(macs).cpu()
    return summarise(net, leaf, correct, macs, split.labels.cpu(), split.source.cpu(), k_cpt, classes, sources)


@torch.no_grad()
def heads_alone(net: RoutedNet, split: Split, k_cpt: float | None = None, batch_size: int = 1000) -> dict:
    """Every leaf used alone on ``split`` (every example sent down its path), from one full-tree
    evaluation in eval mode: leaf name -> ``accuracy`` (fraction correct) and ``macs`` (its
    path's MACs per example). A split of sequences returns ``{}``: a leaf alone there depends
    on the memory the frames before carried."""
    if split.frames > 1:
        return {}
    was_training = net.training
    net.eval()
    device = net.leaf_macs.device
    correct = torch.zeros(len(net.leaves), dtype=torch.long)
    nan = torch.zeros((), dtype=torch.long, device=device)
    try:
        for start in range(0, len(split), batch_size):
            x = split.images[start : start + batch_size].to(device, non_blocking=True)
            y = split.labels[start : start + batch_size].to(device)
            out = net(x, k_cpt if net.k_cpt_input else None)
            correct += torch.stack([(out.logits[leaf].argmax(1) == y).sum() for leaf in net.leaves]).cpu()
            nan += torch.stack([out.logits[leaf].isnan().flatten(1).any(1) for leaf in net.leaves]).any(0).sum()
    finally:
        net.train(was_training)
    check_outputs(split, int(nan), len(split))
    return {leaf: {"accuracy": int(correct[i]) / len(split), "macs": int(net.leaf_macs[i])}
            for i, leaf in enumerate(net.leaves)}


def check_outputs(split: Split, nan: int, judged: int) -> None:
    """Raise :class:`NonFiniteEvaluationError` when ``nan`` of the ``judged`` outputs on
    ``split`` were NaN, blaming its inputs when they are not finite, else the weights."""
    if not nan:
        return
    inputs = sum(int((~torch.isfinite(chunk)).reshape(len(chunk), -1).any(1).sum())
                 for chunk in split.images.split(1000)) if split.images.is_floating_point() else 0
    if inputs:
        raise NonFiniteEvaluationError(
            f"{inputs} of the {len(split)} examples evaluated hold NaN or infinite inputs, so no accuracy is computed "
            "from them: fix the data (a task's load_dataset)", bad_inputs=True)
    raise NonFiniteEvaluationError(
        f"the net's outputs are NaN on {nan} of the {judged} examples evaluated, whose inputs are finite (its weights "
        "are not, or its layers make NaN), so no accuracy is computed; resume from an earlier checkpoint or train again "
        "with a lower --lr", bad_inputs=False)


def summarise(net: RoutedNet, leaf: torch.Tensor, correct: torch.Tensor, macs: torch.Tensor, labels: torch.Tensor,
              source: torch.Tensor, k_cpt: float | None, classes: tuple[str, ...] | None,
              sources: tuple[str, ...] = SOURCES) -> dict:
    """:func:`evaluate`'s summary of routed examples, all ``(n,)`` on the CPU."""
    n_classes = net.classes
    class_names = list(classes) if classes is not None else [str(c) for c in range(n_classes)]
    per_leaf = {}
    for i, name in enumerate(net.leaves):
        here = leaf == i
        count = int(here.sum())
        per_leaf[name] = {
            "count": count,
            "fraction": count / len(leaf),
            "accuracy": float(correct[here].double().mean()) if count else None,
            "macs": int(net.leaf_macs[i]),
            "by_class": dict(zip(class_names, torch.bincount(labels[here], minlength=n_classes).tolist())),
            "by_source": dict(zip(sources, torch.bincount(source[here], minlength=len(sources)).tolist())),
        }
    return {
        "accuracy": float(correct.double().mean()),
        "mean_macs": float(macs.double().mean()),
        "k_cpt": k_cpt,
        "examples": len(leaf),
        "source_accuracy": {name: float(correct[source == i].double().mean())
                            for i, name in enumerate(sources) if bool((source == i).any())},
        "leaves": per_leaf,
    }
