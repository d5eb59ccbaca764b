"""Routing tasks: the public interface for plugging a routing problem into routing-rl.

A :class:`RoutingTask` is everything routing-rl needs to know about a problem, and nothing
about how it is learned:

* **data** — :meth:`RoutingTask.load_dataset`: a :class:`~routing_rl.data.RoutingDataset`
  whose splits hold inputs of any shape and modality (``images`` is the field's name, not a
  requirement), labels, and each example's source (an index into the dataset's ``sources``
  names). An episode routes one input, or a sequence of ``T`` inputs (frames): then a split
  holds ``images (N, T, ...)`` and ``labels (N, T)`` (see :attr:`Split.frames`).
* **the routed network** — :meth:`RoutingTask.build_net`: any ``nn.Module`` transforms and
  routers arranged as a :class:`~routing_rl.core.graph.RoutedNet`, whose per-example MACs are
  counted by :mod:`routing_rl.core.macs` when it is built. :attr:`RoutingTask.archs` names
  the nets a task offers (the CLI's ``--arch``); :meth:`RoutingTask.make_net` builds one with
  seeded weights (:func:`routing_rl.nets.seeding.seeded_net`). The static baseline's nets
  (:meth:`RoutingTask.static_archs`) are derived from the routed net's paths unless the task
  names its own.
* **the error cost** — :meth:`RoutingTask.error_cost`: c_err per example from the leaf's
  logits (the reward at a leaf is ``-(c_err + k_cpt × MACs)``).
* **what the agent observes** — :meth:`RoutingTask.observation_layout`: by default the
  junction node's descriptor (what its router reads), the junction's one-hot and, with a
  dynamic k_cpt, the cost (:class:`~routing_rl.envs.observation.ObservationLayout`).
* **training inputs** — :meth:`RoutingTask.augment`: the task's data augmentation (none by
  default), used by the paper's learners and by the environments' joint training.
* **state carried from one input to the next** — for episodes of several frames,
  :meth:`initial_memory`, :meth:`net_input` and :meth:`carry`: at each frame the net's input
  is ``net_input(frame, memory)`` and, after the frame reached a leaf, the memory becomes
  ``carry(memory, frame, logits, leaf)``. A net can so reuse the previous frame's prediction
  or compare the frame with the previous one (count that work in MACs: do it in a node).

A task is configuration plus data: environments made with the same task and keywords share
one instance (:func:`make_task`), so the dataset is loaded once per process, not per
``gym.make``. Register a task under a Gymnasium id with :func:`register_task`; then
``gym.make``, ``gym.make_vec``, :meth:`RoutingSB3VecEnv.make
<routing_rl.envs.sb3_vec_env.RoutingSB3VecEnv.make>` and ``experiments/train_agent.py --env
PKG.MODULE:TaskId-v0`` all use it. ``docs/plugins.md`` walks through one.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import traceback
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable

import gymnasium as gym
import torch

from routing_rl.core.costs import error_cost
from routing_rl.training.learners import trains_static_nets
from routing_rl.core.graph import RoutedNet, path_net
from routing_rl.core.k_cpt import K_CPT_VALUES
from routing_rl.data import RoutingDataset, Split
from routing_rl.envs.registration import ENV_KEYWORDS, register_task
from routing_rl.nets.router import read_exit_confidence
from routing_rl.nets.seeding import seeded_net

__all__ = ["ENV_KEYWORDS", "RoutingTask", "TaskError", "TaskFactory", "env_spec", "make_task", "register_task",
           "task_from_env"]

PLUGIN_METHODS = ("load_dataset", "build_net", "error_cost", "augment", "observation_layout", "initial_memory",
                  "net_input", "carry", "examples", "static_archs", "default_arch")
"""The methods a task's author writes; a plug-in's failures in them are :class:`TaskError` s."""
CHECKED_CHUNK = 4096
"""Examples whose inputs are summed at once when a dataset's inputs are checked for NaN."""


class TaskError(Exception):
    """A plug-in task's own code failed: the message names the task, the method and the error;
    the original error is ``__cause__``, its trace :attr:`details` (``train_agent.py --verbose``).
    A plug-in is a task defined outside routing-rl; its :data:`PLUGIN_METHODS` and its net's
    first forward pass (:meth:`RoutingTask.make_net`) report their errors this way."""

    @property
    def details(self) -> str:
        cause = self.__cause__
        return "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)).rstrip() if cause else ""


def _named(method: Callable, name: str) -> Callable:
    """``method`` of a plug-in task, its errors raised as a :class:`TaskError` naming the task and ``name``."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except TaskError:
            raise
        except Exception as error:
            raise TaskError(f"task {type(self).__name__}: its {name}() raised {type(error).__name__}: "
                            f"{_first_line(error)}") from error

    return call


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


class RoutingTask(ABC):
    """A routing problem: its data, its routed nets, its costs and its episodes.

    Subclass it and implement :meth:`load_dataset` and :meth:`build_net`; override the other
    methods where the defaults (cross-entropy, no augmentation, the router's input as the
    observation, one input per episode) do not fit. Constructor keywords are the task's own
    options (``gym.make(id, option=...)`` passes them); they should be plain values, so that
    equal keywords mean equal tasks.

    Attributes:
        archs: the names of the nets :meth:`build_net` can build; the first is the default.
            The static agent's nets (``static-<leaf>``) are derived from the first unless
            :meth:`static_archs` is overridden.

    The names this class defines (``dataset``, ``classes``, ``sources``, ``name``,
    ``make_net``, ``examples``, ...) are its interface: do not use them for your options.
    """

    archs: tuple[str, ...] = ("default",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__.partition(".")[0] != "routing_rl":  # a plug-in: its errors name it
            for name in PLUGIN_METHODS:
                if inspect.isfunction(vars(cls).get(name)):
                    setattr(cls, name, _named(vars(cls)[name], name))

    @property
    def is_plugin(self) -> bool:
        """Whether this task is defined outside routing-rl (its errors are :class:`TaskError` s)."""
        return type(self).__module__.partition(".")[0] != "routing_rl"

    @abstractmethod
    def load_dataset(self) -> RoutingDataset:
        """The task's train and test splits, classes and source names. Called once per task
        instance (:meth:`dataset` keeps the result)."""

    @abstractmethod
    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        """A freshly initialised net called ``arch`` (one of :attr:`archs`).

        ``width`` multiplies the net's channels (1 = the task's standard size; a task may
        refuse other widths); ``k_cpt_input``: the routers also read k_cpt (dynamic k_cpt).
        The net must predict ``len(self.classes)`` classes and take one input of the
        dataset (after :meth:`net_input`) per example. Do not seed here: :meth:`make_net` does.
        """

    def dataset(self) -> RoutingDataset:
        """The dataset, loaded on first use, checked (:meth:`check_dataset`) and kept."""
        loaded = self.__dict__.get("_dataset")
        if loaded is None:
            loaded = self.load_dataset()
            if not isinstance(loaded, RoutingDataset):
                raise TypeError(f"{type(self).__name__}.load_dataset() must return a RoutingDataset, got {type(loaded).__name__}")
            self.check_dataset(loaded)
            self.__dict__["_dataset"] = loaded
        return loaded

    def check_dataset(self, dataset: RoutingDataset) -> None:
        """ValueError naming the task, the split and the fix unless every split's labels are
        whole numbers naming a class and its inputs are finite: a NaN input would train and be
        judged on silently, an out-of-range label fail deep inside a loss."""
        where = f"task {type(self).__name__} (dataset {dataset.name!r})"
        for name in ("train", "test"):
            split = getattr(dataset, name)
            labels = split.labels
            if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
                raise ValueError(f"{where}: the {name} split's labels are {labels.dtype}, not class indices; "
                                 f"{self.data_fix('make them integers (torch.long) in 0 .. classes - 1')}")
            if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < len(dataset.classes):
                raise ValueError(f"{where}: the {name} split's labels run from {int(labels.min())} to "
                                 f"{int(labels.max())}, but the dataset names {len(dataset.classes)} classes; "
                                 f"{self.data_fix(f'labels must lie in 0 .. {len(dataset.classes) - 1}')}")
            bad = non_finite(split.images)
            if bad:
                fix = self.data_fix("a task's inputs must be finite")
                raise ValueError(f"{where}: the {name} split's inputs hold {bad} NaN or infinite values (of "
                                 f"{split.images.numel()}); {fix}")

    def data_fix(self, what: str) -> str:
        """How to repair data that :meth:`check_dataset` refused, after ``what`` it must be."""
        return f"{what}: fix {type(self).__name__}.load_dataset()"

    @property
    def name(self) -> str:
        """The dataset's name, as runs and figures report it."""
        return self.dataset().name

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names, in label order."""
        return tuple(self.dataset().classes)

    @property
    def sources(self) -> tuple[str, ...]:
        """Source names, in the order of ``Split.source`` indices."""
        return tuple(self.dataset().sources)

    def default_arch(self, agent: str | None) -> str:
        """The arch ``agent`` trains when none is given (``None``: an environment's agent).
        Default: the first of :attr:`archs`; for the static agent, the static net with the
        most MACs (the routed net's deepest path)."""
        if trains_static_nets(agent) and self.static_archs():
            return max(self.static_archs(), key=lambda arch: self.make_net(arch).leaf_path_macs[0])
        return self.archs[0]

    def static_archs(self) -> tuple[str, ...]:
        """The nets without junctions that the static agent trains: the baseline every routed
        net is compared with. Default: ``static-<leaf>`` for each leaf of the first arch's net
        (in ``net.leaves`` order) whose path holds trainable weights — the nodes from the root
        to that leaf with their junctions' routers removed
        (:func:`~routing_rl.core.graph.path_net`), so each is exactly what the routed net
        computes for an example sent to that leaf — and every net of :attr:`archs` that has
        no junction. Override to name only your own (they must be in :attr:`archs`)."""
        if "_static_archs" not in self.__dict__:
            nets = {arch: seeded_net(lambda: self.build_net(arch, 1, False), 0) for arch in self.archs}
            own = [arch for arch, net in nets.items() if not net.junctions]
            routed = nets[self.archs[0]]
            trained = [leaf for leaf in routed.leaves if any(
                p.requires_grad for name in routed.nodes_to(leaf) for p in routed.nodes[name].transform.parameters())]
            self.__dict__["_static_archs"] = (*own, *(f"static-{leaf}" for leaf in trained if routed.junctions))
        return self.__dict__["_static_archs"]

    def all_archs(self) -> tuple[str, ...]:
        """Every arch :meth:`make_net` builds: :attr:`archs` and :meth:`static_archs`."""
        return (*self.archs, *(a for a in self.static_archs() if a not in self.archs))

    def make_net(self, arch: str | None = None, width: int = 1, k_cpt_input: bool = False, seed: int = 0,
                 device: str | torch.device = "cpu", exit_confidence: bool = False) -> RoutedNet:
        """:meth:`build_net` with weights initialised from ``seed``, on ``device``; a derived
        static arch (``static-<leaf>``, :meth:`static_archs`) is the first arch's net cut to
        that leaf's path. ``exit_confidence``: its routers, and the env's observations, also
        read their exits' confidence (:func:`~routing_rl.nets.router.read_exit_confidence`;
        a net without junctions is returned as built)."""
        arch = self.default_arch(None) if arch is None else arch
        if arch not in self.all_archs():
            raise ValueError(f"{type(self).__name__} has no arch {arch!r}; choose one of {', '.join(self.all_archs())}")
        if arch in self.archs:
            net = seeded_net(lambda: self.build_net(arch, width, k_cpt_input), seed, device)
        else:
            leaf = arch.removeprefix("static-")
            net = seeded_net(lambda: path_net(self.build_net(self.archs[0], width, False), leaf), seed, device)
        if net.classes != len(self.classes):
            raise ValueError(f"{type(self).__name__}.build_net({arch!r}) predicts {net.classes} classes, "
                             f"the dataset has {len(self.classes)}")
        net = read_exit_confidence(net) if exit_confidence and net.junctions else net
        if self.is_plugin:
            self._try_net(net, arch)
        return net

    @torch.no_grad()
    def _try_net(self, net: RoutedNet, arch: str) -> None:
        """A plug-in's augmentation (of single inputs) and net run once on two training inputs
        (eval mode: nothing the net holds changes) and its error cost on the first leaf's
        logits, so that a net that cannot run on the task's inputs, or an error cost that is
        not one per example, is named now, as the task's, not found deep inside training."""
        train = self.dataset().train
        if len(train) == 0:
            return
        device = net.leaf_macs.device
        frames, labels = train.images[:2].to(device), train.labels[:2].to(device)
        if train.frames == 1:
            self.augment(frames, train.source[:2].to(device), torch.Generator(device=device).manual_seed(0))
        else:
            frames, labels = frames[:, 0], labels[:, 0]
        was_training = net.training
        net.eval()
        try:
            inputs = self.net_input(frames, self.initial_memory(frames))
            logits = net(inputs, K_CPT_VALUES[0] if net.k_cpt_input else None).logits[net.leaves[0]]
        except TaskError:
            raise
        except Exception as error:
            raise TaskError(f"task {type(self).__name__}: the net build_net({arch!r}) built fails on the task's "
                            f"training inputs: {type(error).__name__}: {_first_line(error)}") from error
        finally:
            net.train(was_training)
        c_err = self.error_cost(logits, labels)
        if not isinstance(c_err, torch.Tensor) or c_err.shape != labels.shape or not c_err.is_floating_point():
            got = f"shape {tuple(c_err.shape)} {c_err.dtype}" if isinstance(c_err, torch.Tensor) else type(c_err).__name__
            raise TaskError(f"task {type(self).__name__}: its error_cost() must return one floating-point c_err per "
                            f"example, shape {tuple(labels.shape)} here, got {got}")

    def error_cost(self, logits: torch.Tensor, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
        """c_err per example ``(B,)`` from a leaf's logits ``(B, classes)`` and labels ``(B,)``;
        ``kind`` is the env's ``error_cost`` keyword (``cross_entropy`` or ``zero_one``)."""
        return error_cost(logits, labels, kind)

    def augment(self, inputs: torch.Tensor, source: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Training-time augmentation of a batch ``(B, ...)`` (on its own device, random
        numbers from ``generator``); ``source`` ``(B,)``. Default: none."""
        return inputs

    def observation_layout(self, net: RoutedNet, dynamic_k_cpt: bool):
        """What the agent observes at a junction, and what its action means: an
        :class:`~routing_rl.envs.observation.ObservationLayout` (or a subclass)."""
        from routing_rl.envs.observation import ObservationLayout

        return ObservationLayout(net, dynamic_k_cpt)

    def initial_memory(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """The state an episode starts with, ``(b, ...)``, given its first inputs ``(b, ...)``;
        None (the default) for tasks that carry nothing from one input to the next."""
        return None

    def net_input(self, inputs: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
        """The net's input ``(b, *net.input_shape)`` for frames ``inputs`` given the episodes'
        ``memory``. Default: the inputs themselves."""
        return inputs

    def carry(self, memory: torch.Tensor | None, inputs: torch.Tensor, logits: torch.Tensor,
              leaf: torch.Tensor) -> torch.Tensor | None:
        """The memory after a frame: ``inputs`` ``(b, ...)`` reached leaves ``leaf`` ``(b,)``
        (indices into ``net.leaves`` of the net being run: always 0 for a static net) with
        ``logits`` ``(b, classes)``. Default: unchanged."""
        return memory

    def examples(self, split: Split) -> Split:
        """What the paper's learners train and are evaluated on. Default: the split itself. A
        split of episodes stays one, because a frame's input depends on where the frames
        before it were routed: the trainer plays its clips frame by frame with this task's
        memory (:class:`~routing_rl.training.episodes.EpisodeSampler`) and evaluation routes
        them clip by clip, as the envs do. Override to train on something else, such as every
        frame on its own."""
        return split


TaskFactory = type[RoutingTask] | Callable[..., RoutingTask] | str
"""A task class, a function returning a task, or the ``"module:name"`` of either."""

_TASKS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def load_factory(task: TaskFactory) -> Callable[..., RoutingTask]:
    """The callable behind ``task`` (imports ``"module:name"``)."""
    if isinstance(task, str):
        module, _, attribute = task.partition(":")
        if not module or not attribute:
            raise ValueError(f"a task given by name must read 'module:name', got {task!r}")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"cannot load task {task!r}: {error}") from None
    if not callable(task):
        raise TypeError(f"a task must be a RoutingTask, its class, a factory or 'module:name', got {task!r}")
    return task


def _keywords(factory: Callable) -> set[str] | None:
    """The keyword names ``factory`` takes; None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def make_task(task: RoutingTask | TaskFactory, **kwargs) -> RoutingTask:
    """A task instance; equal ``task`` and keywords give the same instance while it is in use.

    Keywords that are not hashable (a dataset object, say) make a new, unshared instance.
    """
    if isinstance(task, RoutingTask):
        if kwargs:
            raise TypeError(f"keywords {sorted(kwargs)} given beside a task instance; give them to its constructor")
        return task
    factory = load_factory(task)
    try:
        key = (factory, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _TASKS:
        return _TASKS[key]
    name = getattr(factory, "__name__", factory)
    try:
        made = factory(**kwargs)
    except TypeError as error:
        raise TypeError(f"{name} does not take these keywords ({error}); "
                        f"the env's own keywords are {', '.join(ENV_KEYWORDS)}") from None
    except Exception as error:
        if getattr(factory, "__module__", "").partition(".")[0] == "routing_rl":
            raise
        raise TaskError(f"task {name}: its constructor raised {type(error).__name__}: {_first_line(error)}") from error
    if not isinstance(made, RoutingTask):
        raise TypeError(f"{name} returned {type(made).__name__}, not a RoutingTask")
    if key is not None:
        _TASKS[key] = made
    return made


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``; ``"module:id"`` imports ``module`` first (it
    registers the id), as ``gym.make`` does."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ValueError(f"cannot import {module!r} for env {env_id!r}: {error}") from None
    try:
        return gym.spec(name)
    except gym.error.Error:
        known = sorted(i for i in gym.registry if i.startswith("routing_rl/"))
        raise ValueError(f"unknown env {name!r}; register it with routing_rl.envs.register_task (give "
                         f"'module:{name}' to import the module that does), or use one of {', '.join(known)}") from None


def non_finite(values: torch.Tensor) -> int:
    """How many entries of ``values`` are NaN or infinite (0 for integers): a sum per chunk
    of :data:`CHECKED_CHUNK` rows, counted exactly only where that sum is not finite."""
    if not values.is_floating_point():
        return 0
    count = 0
    for chunk in values.reshape(len(values), -1).split(CHECKED_CHUNK):
        if not torch.isfinite(chunk.sum()):
            count += int((~torch.isfinite(chunk)).sum())
    return count


def task_from_env(env_id: str, optional: dict | None = None, **kwargs) -> tuple[RoutingTask, dict]:
    """The task behind a registered routing env, and the env keywords of ``gym.make(env_id,
    **kwargs)`` (the registered defaults updated by ``kwargs``). ``optional``: task keywords
    given only if the task's constructor takes them (``data_dir``, say)."""
    spec = env_spec(env_id)
    values = {**spec.kwargs, **kwargs}
    if "task" not in values:
        raise ValueError(f"env {spec.id!r} is not a routing task (no 'task' keyword); register it with "
                         "routing_rl.envs.register_task")
    if optional and not isinstance(values["task"], RoutingTask):
        takes = _keywords(load_factory(values["task"]))
        values.update({k: v for k, v in optional.items() if takes is None or k in takes})
    task_kwargs = {k: v for k, v in values.items() if k not in ENV_KEYWORDS and k != "task"}
    env_kwargs = {k: v for k, v in values.items() if k in ENV_KEYWORDS}
    return make_task(values["task"], **task_kwargs), env_kwargs
