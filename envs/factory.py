"""From environment keyword arguments to a :class:`~routing_rl.envs.traffic.Traffic`.

Every routing environment (single, SB3 vector, Gymnasium vector) takes the same keywords:

dataset: a dataset name (``hybrid``, ``cifar10``, ``cifar2``, ``cifar5``, ``mnist``), loaded
    with ``data_dir`` (default ``$ROUTING_RL_DATA_DIR``) when the env is built, never at
    import; or a :class:`~routing_rl.data.RoutingDataset` already in memory.
split: ``"train"`` or ``"test"`` of that dataset, or any :class:`~routing_rl.data.Split`
    (a validation part, a tiny synthetic set).
arch, width: the net to build (:func:`routing_rl.nets.multiscale.build`: ``chain`` or
    ``tree``), unless ``net`` gives an existing :class:`~routing_rl.core.graph.RoutedNet` (to share
    a trained net, or one between a training and an evaluation env). The net's device is
    where the env computes; a built net goes to ``device``.
k_cpt: cost per MAC, or ``"dynamic"`` (one of ``K_CPT_VALUES`` per episode, observed).
error_cost: ``cross_entropy`` (default) or ``zero_one``: the c_err in the leaf's reward.
cost: a :class:`~routing_rl.core.k_cpt.CostModel` of the net (e.g. measured latency) that the
    reward charges ``k_cpt ×``; default the nodes' MACs.
train: joint training of the feature network on the agent's paths (see
    :mod:`~routing_rl.envs.joint`); off: frozen net, no augmentation, deterministic.
joint: the joint training options (:class:`~routing_rl.envs.joint.JointTraining`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from routing_rl.envs.joint import FeatureTrainer, JointTraining
from routing_rl.envs.observation import ObservationLayout
from routing_rl.envs.traffic import Traffic

from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.k_cpt import CostModel, check_k_cpt
from routing_rl.data import RoutingDataset, Split, load_dataset
from routing_rl.core.graph import RoutedNet
from routing_rl.nets.multiscale import build


def make_traffic(
    n: int,
    dataset: str | RoutingDataset = "hybrid",
    split: str | Split = "train",
    arch: str = "chain",
    width: int = 1,
    k_cpt: float | str = 4e-9,
    error_cost: str = "cross_entropy",
    train: bool = True,
    joint: JointTraining | None = None,
    net: RoutedNet | None = None,
    device: str | torch.device = "cpu",
    data_dir: str | Path | None = None,
    cost: CostModel | None = None,
) -> Traffic:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of examples in flight must be a positive integer, got {n!r}")
    k_cpt = check_k_cpt(k_cpt)
    if error_cost not in ERROR_COSTS:
        raise ValueError(f"unknown error cost {error_cost!r}; choose one of {', '.join(ERROR_COSTS)}")
    if isinstance(dataset, str):
        dataset = load_dataset(dataset, data_dir=data_dir)
    if isinstance(split, str):
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train', 'test' or a Split, got {split!r}")
        split = getattr(dataset, split)
    if len(split) == 0:
        raise ValueError("the split has no examples to route")
    if net is None:
        net = build(arch, width, len(dataset.classes)).to(device)
    elif net.classes != len(dataset.classes):
        raise ValueError(f"the net predicts {net.classes} classes, the dataset has {len(dataset.classes)}")
    layout = ObservationLayout(net, dynamic_k_cpt=k_cpt == "dynamic")
    trainer = FeatureTrainer(net, joint or JointTraining())
    return Traffic(net, split, n, layout, k_cpt, error_cost, trainer, training=bool(train), cost=cost)
