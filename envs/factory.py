"""From environment keyword arguments to a :class:`~routing_rl.envs.traffic.Traffic`.

Every routing environment (single, SB3 vector, Gymnasium vector) takes the same keywords:

task: the :class:`~routing_rl.envs.task.RoutingTask` — an instance, its class or factory, or
    ``"module:name"``; every keyword not listed here goes to its constructor (for the paper's
    images, ``dataset=`` a name or a :class:`~routing_rl.data.RoutingDataset`, and
    ``data_dir=``; without ``task``, ``dataset=`` alone means the paper's image task).
split: ``"train"`` or ``"test"`` of the task's dataset, or any :class:`~routing_rl.data.Split`
    (a validation part, a tiny synthetic set).
arch, width: the net to build (one of the task's ``archs``; default: its first), unless
    ``net`` gives an existing :class:`~routing_rl.core.graph.RoutedNet` (to share a trained
    net, or one between a training and an evaluation env). A built net goes to ``device``.
seed: initialises a built net's weights (default 0): equal seeds, equal nets.
k_cpt: cost per MAC, or ``"dynamic"`` (one of ``K_CPT_VALUES`` per episode, observed).
error_cost: ``cross_entropy`` (default) or ``zero_one``: the c_err in the leaf's reward.
max_error_cost: a bound on the c_err charged, in the error cost's units (nats for
    cross-entropy; 5 is about twice chance level on ten classes); None (default): unbounded.
    It bounds the reward, not the feature network's training loss.
cost: a :class:`~routing_rl.core.k_cpt.CostModel` of the net (e.g. measured latency) that the
    reward charges ``k_cpt ×``; default the nodes' MACs.
clip_actions: an action past the current junction's last sink takes the last sink, for
    agents that cannot mask actions (DQN on the tree); off (the default), it raises.
train: joint training of the feature network on the agent's paths (see
    :mod:`~routing_rl.envs.joint`); off: frozen net, no augmentation, deterministic.
joint: the joint training options (:class:`~routing_rl.envs.joint.JointTraining`, or a dict
    of its fields, as config files such as the RL Zoo's give them).
device: where a built net and the examples in flight live: ``cpu``, ``cuda``, ``cuda:N`` or
    ``auto``; a device this machine lacks is refused (ValueError) before anything is built.
render_mode: the envs render nothing (``metadata["render_modes"]`` is empty): any mode but
    None raises Gymnasium's :class:`~gymnasium.error.UnsupportedMode`.
share: set by registration (:class:`~routing_rl.envs.registration.NetShare`): the sub-envs
    of one ``gym.make_vec(..., vectorization_mode="sync")`` share one net and its trainer;
    a name (``share="zoo"``): evaluation envs (``train=False``) of that name route the net
    of the latest training env of that name (see ``NetShare``).
"""

from __future__ import annotations

from dataclasses import fields

import torch
from gymnasium.error import UnsupportedMode
from routing_rl.envs.joint import FeatureTrainer, JointTraining
from routing_rl.envs.registration import IMAGE_TASK, NetShare
from routing_rl.envs.task import RoutingTask, TaskFactory, make_task
from routing_rl.envs.traffic import Traffic

from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.devices import resolve_device
from routing_rl.core.k_cpt import CostModel, check_k_cpt
from routing_rl.core.graph import RoutedNet
from routing_rl.data import Split


def make_traffic(
    n: int,
    task: RoutingTask | TaskFactory | None = None,
    split: str | Split = "train",
    arch: str | None = None,
    width: int = 1,
    k_cpt: float | str = 4e-9,
    error_cost: str = "cross_entropy",
    max_error_cost: float | None = None,
    clip_actions: bool = False,
    train: bool = True,
    joint: JointTraining | dict | None = None,
    net: RoutedNet | None = None,
    device: str | torch.device = "cpu",
    cost: CostModel | None = None,
    seed: int = 0,
    share: NetShare | str | None = None,
    render_mode: str | None = None,
    **task_kwargs,
) -> Traffic:
    if render_mode is not None:
        raise UnsupportedMode(f"render_mode={render_mode!r}: the routing envs render nothing (their "
                              "metadata['render_modes'] is empty); leave render_mode out, and draw routing with "
                              "routing_rl.app.plots or TensorBoard's figures/node_link")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of examples in flight must be a positive integer, got {n!r}")
    k_cpt = check_k_cpt(k_cpt)
    if error_cost not in ERROR_COSTS:
        raise ValueError(f"unknown error cost {error_cost!r}; choose one of {', '.join(ERROR_COSTS)}")
    if max_error_cost is not None and (isinstance(max_error_cost, bool) or not isinstance(max_error_cost, (int, float))
                                       or not 0 < max_error_cost < float("inf")):
        raise ValueError(f"max_error_cost must be a positive number (nats for cross-entropy) or None, got {max_error_cost!r}")
    if isinstance(joint, dict):
        unknown = sorted(set(joint) - {f.name for f in fields(JointTraining)})
        if unknown:
            raise ValueError(f"unknown joint-training option(s) {', '.join(unknown)}; "
                             f"choose among {', '.join(f.name for f in fields(JointTraining))}")
        joint = JointTraining(**joint)
    if isinstance(share, str):
        share = NetShare.named(share)
        if train and net is None:
            share.claim()
    if net is None and (share is None or share.net is None):
        device = resolve_device(device)
    if task is None:
        if "dataset" not in task_kwargs:
            raise ValueError("no task to route: give task= (a RoutingTask, its class or 'module:name'), "
                             "or dataset= for the paper's image task")
        task = IMAGE_TASK
    task = make_task(task, **task_kwargs)
    if isinstance(split, str):
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train', 'test' or a Split, got {split!r}")
        split = getattr(task.dataset(), split)
    if len(split) == 0:
        raise ValueError("the split has no examples to route")
    trainer = None
    if net is None and share is not None and share.net is not None:
        net, trainer = share.net, share.trainer
    if net is None:
        net = task.make_net(arch, width, seed=seed, device=device)
    elif net.classes != len(task.classes):
        raise ValueError(f"the net predicts {net.classes} classes, the dataset has {len(task.classes)}")
    layout = task.observation_layout(net, dynamic_k_cpt=k_cpt == "dynamic")
    layout.clip_actions = bool(clip_actions)
    if trainer is None:
        trainer = FeatureTrainer(net, joint or JointTraining())
    if share is not None and (share.net is None or share.trainer is None):
        share.net, share.trainer = net, trainer
    return Traffic(task, net, split, n, layout, k_cpt, error_cost, trainer, training=bool(train), cost=cost,
                   max_error_cost=None if max_error_cost is None else float(max_error_cost))
