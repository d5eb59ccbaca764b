"""From environment keyword arguments to a :class:`~routing_rl.envs.traffic.Traffic`.

Every routing environment (single, SB3 vector, Gymnasium vector) takes the same keywords:

task: the :class:`~routing_rl.envs.task.RoutingTask` — an instance, its class or factory, or
    ``"module:name"``; every keyword not listed here goes to its constructor (for the paper's
    images, ``dataset=`` a name or a :class:`~routing_rl.data.RoutingDataset`, and
    ``data_dir=``; without ``task``, ``dataset=`` alone means the paper's image task).
split: ``"train"`` or ``"test"`` of the task's dataset; ``"validation"``, the part of the training
    split a training run holds out by default, or ``"train_part"``, the rest (train on it, tune on
    validation: :func:`named_split`); or any :class:`~routing_rl.data.Split` (a tiny synthetic set).
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

Every keyword's type and range is checked before anything is built (:func:`check_keywords`):
a wrong one is a one-line ValueError naming it. The ones an id is registered with that are
also a training run's settings are that run's defaults (:func:`registered_settings`).
"""

from __future__ import annotations

import inspect
import numbers
import typing
from dataclasses import fields

import numpy as np
import torch
from gymnasium.error import UnsupportedMode
from routing_rl.envs.joint import FeatureTrainer, JointTraining
from routing_rl.envs.registration import ENV_KEYWORDS, IMAGE_TASK, NetShare
from routing_rl.envs.task import RoutingTask, TaskFactory, env_spec, make_task
from routing_rl.envs.traffic import Traffic

from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.devices import resolve_device
from routing_rl.core.k_cpt import CostModel, check_k_cpt
from routing_rl.core.graph import RoutedNet
from routing_rl.data import RoutingDataset, Split
from routing_rl.training.config import RANGES, TrainConfig, check_range

SPLITS = ("train", "test", "train_part", "validation")
"""The split names every routing env takes (:func:`named_split`)."""

RUN_SETTINGS = ("arch", "width", "k_cpt", "error_cost", "seed", "device")
"""Env keywords that are also settings of a training run (``train_agent.py --arch``, ...): the
values an id is registered with are a run's defaults (:func:`registered_settings`)."""
RUN_DECIDES = {
    "split": "a run trains on the training split and is judged on the test split",
    "train": "a run trains its net",
    "joint": "the SB3 agents' feature training takes the run's --lr, --batch-size, --joint-execution and --uniform-weight",
    "max_error_cost": "no learner bounds c_err",
}
"""Env keywords a training run sets itself, and why; an id registered with another value than
the env's default is refused by :func:`registered_settings` rather than trained otherwise."""


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
    check_keywords(dict(split=split, arch=arch, width=width, k_cpt=k_cpt, error_cost=error_cost,
                        max_error_cost=max_error_cost, clip_actions=clip_actions, train=train, joint=joint, net=net,
                        device=device, cost=cost, seed=seed, share=share))
    k_cpt = check_k_cpt(k_cpt)
    if isinstance(joint, dict):
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
        split = named_split(task.dataset(), split)
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
        trainer = FeatureTrainer(net, joint or JointTraining(), task.error_cost)
    if share is not None and (share.net is None or share.trainer is None):
        share.net, share.trainer = net, trainer
    return Traffic(task, net, split, n, layout, k_cpt, error_cost, trainer, training=bool(train), cost=cost,
                   max_error_cost=None if max_error_cost is None else float(max_error_cost))


def named_split(dataset: RoutingDataset, name: str) -> Split:
    """The split of :data:`SPLITS` called ``name``: ``train`` and ``test`` are the dataset's own;
    ``validation`` and ``train_part`` are the training split's part a training run holds out at
    its defaults (:class:`~routing_rl.training.config.TrainConfig`'s ``validation_fraction``, ``seed``
    and ``validation_mix``) and the rest, so that an agent trained on ``train_part`` is tuned on
    images neither it nor the env's network has trained on."""
    if name in ("train", "test"):
        return getattr(dataset, name)
    defaults = TrainConfig()
    rest, held_out = dataset.validation_indices(defaults.validation_fraction, defaults.seed, defaults.validation_mix)
    return dataset.train.subset(rest if name == "train_part" else held_out)


def check_keywords(values: dict) -> None:
    """ValueError naming the first env keyword of ``values`` whose type or range is wrong, so
    that ``train="false"`` is not taken as true, ``k_cpt=True`` as one per MAC, or ``seed=2**70``
    fails deep inside torch: the one check of every routing env's keywords (a run's
    registered ones too: :func:`registered_settings`)."""
    for name, value in values.items():
        problem = _keyword_problem(name, value)
        if problem:
            raise ValueError(f"{name} must be {problem}, got {value!r}")
    if values.get("k_cpt") is not None:
        check_k_cpt(values["k_cpt"])


def _keyword_problem(name: str, value) -> str | None:
    """What ``value`` of env keyword ``name`` must be, when it is not that; None when it is."""
    flag = isinstance(value, (bool, np.bool_))
    integer = isinstance(value, numbers.Integral) and not flag
    if name in ("clip_actions", "train"):
        return None if flag else "True or False"
    if name in ("seed", "net_seed", "width"):
        spec = RANGES["seed" if name == "net_seed" else name]
        return None if integer and _in_range(name, value, spec) else spec[2]
    if name == "k_cpt":
        return "a number >= 0 (cost per MAC, e.g. 4e-9) or 'dynamic'" if flag else None
    if name == "split":
        return None if isinstance(value, str) and value in SPLITS or isinstance(value, Split) else \
            f"one of {', '.join(SPLITS)} or a Split"
    if name == "arch":
        return None if value is None or isinstance(value, str) else "the name of one of the task's nets, or None"
    if name == "error_cost":
        return None if isinstance(value, str) and value in ERROR_COSTS else f"one of {', '.join(ERROR_COSTS)}"
    if name == "max_error_cost":
        positive = isinstance(value, numbers.Real) and not flag and 0 < value < float("inf")
        return None if value is None or positive else "a positive number (nats for cross-entropy) or None"
    if name == "joint":
        return None if value is None or isinstance(value, JointTraining) else _joint_problem(value)
    if name == "net":
        return None if value is None or isinstance(value, RoutedNet) else "a RoutedNet or None"
    if name == "device":
        return None if isinstance(value, (str, torch.device)) else "a device name (cpu, cuda, cuda:N, auto)"
    if name == "cost":
        return None if value is None or isinstance(value, CostModel) else "a CostModel or None"
    if name == "share":
        return None if value is None or isinstance(value, NetShare) or (isinstance(value, str) and value) else \
            "a non-empty name or None"
    return None


def _joint_problem(options) -> str | None:
    """What the joint-training options ``options`` (a dict of :class:`JointTraining` fields)
    must be, when one is not; None when all are. ValueError naming an unknown option."""
    names = [f.name for f in fields(JointTraining)]
    if not isinstance(options, dict):
        return f"a JointTraining, a dict of its fields ({', '.join(names)}) or None"
    unknown = sorted(map(str, set(options) - set(names)))
    if unknown:
        raise ValueError(f"unknown joint-training option(s) {', '.join(unknown)}; choose among {', '.join(names)}")
    hints = typing.get_type_hints(JointTraining)
    for name, value in options.items():
        kind = hints[name]
        flag = isinstance(value, (bool, np.bool_))
        right = flag if kind is bool else isinstance(value, str) if kind is str else \
            not flag and isinstance(value, numbers.Integral if kind is int else numbers.Real)
        if not right or (name in RANGES and not _in_range(name, value, RANGES[name])):
            what = RANGES[name][2] if name in RANGES else {bool: "True or False", str: "a name"}.get(kind, kind.__name__)
            return f"a dict of JointTraining's fields whose {name} is {what}"
    return None


def _in_range(name: str, value, spec: tuple) -> bool:
    """Whether the number ``value`` lies in ``spec``, a range of :data:`RANGES`."""
    try:
        check_range(name, value, spec)
    except ValueError:
        return False
    return True


def registered_settings(env_id: str) -> dict:
    """The :data:`RUN_SETTINGS` that ``env_id`` (``"module:id"`` imports ``module``) is
    registered with: a training run's defaults, which its flags override. ValueError naming
    the id and the keyword when one is of the wrong type, or when the id is registered with
    a keyword a run sets itself (:data:`RUN_DECIDES`) at another value than the env's default."""
    spec = env_spec(env_id)
    values = {name: value for name, value in spec.kwargs.items() if name in ENV_KEYWORDS and name != "share"}
    try:
        check_keywords(values)
    except ValueError as error:
        raise ValueError(f"{spec.id} is registered with a keyword of the wrong type or range: {error}") from None
    defaults = inspect.signature(make_traffic).parameters
    for name, why in RUN_DECIDES.items():
        if name in values and values[name] != defaults[name].default:
            raise ValueError(f"{spec.id} is registered with {name}={values[name]!r}, which a training run cannot "
                             f"honour ({why}); register it without {name} (gym.make still takes {name}=)")
    return {name: value for name, value in values.items() if name in RUN_SETTINGS}
