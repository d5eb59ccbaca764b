"""Gymnasium registration of routing tasks; the ``routing_rl/`` ids are registered on ``import routing_rl``.

Registration only records entry points (strings): nothing heavy is imported and no data is
loaded until an environment is made. Each built-in id is an
:class:`~routing_rl.envs.image_task.ImageTask` with a dataset name; every keyword can be
overridden at ``gym.make`` (``arch="tree"``, ``k_cpt="dynamic"``, ``train=False``, ``seed=1``,
``dataset=<a RoutingDataset>``, ...). ``gym.make_vec(id, num_envs=N)`` gives the batched
:class:`~routing_rl.envs.gym_vector_env.RoutingGymVectorEnv`; for SB3 use
``RoutingSB3VecEnv.make(id, num_envs=N)``.
"""

from __future__ import annotations

import gymnasium as gym

ENV_KEYWORDS = ("split", "arch", "width", "k_cpt", "error_cost", "max_error_cost", "clip_actions", "train", "joint",
                "net", "device", "seed", "share")
"""Keywords every routing env takes itself; any other keyword goes to the task's constructor."""

ENTRY_POINT = "routing_rl.envs.routing_env:RoutingEnv"
VECTOR_ENTRY_POINT = "routing_rl.envs.gym_vector_env:RoutingGymVectorEnv"
IMAGE_TASK = "routing_rl.envs.image_task:ImageTask"
VIDEO_TASK = "routing_rl.envs.video_task:VideoTask"
VIDEO_ENV = "routing_rl/VideoRouting-v0"
ENV_DATASETS = {
    "routing_rl/HybridRouting-v0": "hybrid",
    "routing_rl/CIFAR10Routing-v0": "cifar10",
    "routing_rl/CIFAR2Routing-v0": "cifar2",
    "routing_rl/CIFAR5Routing-v0": "cifar5",
    "routing_rl/MNISTRouting-v0": "mnist",
    "routing_rl/HybridSwapRouting-v0": "hybrid-swap",  # the task suite's hybrid variants (docs/suite.md)
    "routing_rl/HybridEvenRouting-v0": "hybrid-even",
    "routing_rl/HybridTrainMixRouting-v0": "hybrid-train-mix",
    "routing_rl/HybridHardDigitsRouting-v0": "hybrid-hard-digits",
}


class NetShare:
    """Holds the net (and its feature trainer) of the first env made with it, for the others.

    Registration puts a fresh one in every id's keywords. ``gym.make`` deep-copies those, so
    each made env gets an empty one and builds its own net; ``gym.make_vec(...,
    vectorization_mode="sync")`` copies them once for all its sub-envs, which therefore route
    and train one net. (Sub-envs in ``"async"`` mode live in separate processes: each builds
    its own net, from the same seed.)

    ``gym.make(id, share="name")`` instead uses the process-wide share of that name
    (:meth:`named`), for tools that make their training and evaluation envs apart, from plain
    keywords (the RL Zoo; ``docs/rl-benchmark.md``): an env with ``train=False`` routes the net
    of the latest env made with ``train=True`` and that name, which trains it. A training env
    takes over a net only evaluation envs have made so far (the Zoo makes its evaluation env
    first) and otherwise builds a new one: a new training env is a new run (the Zoo's Optuna
    trials). So one name serves one training env at a time (the Zoo's ``n_envs: 1``).
    """

    _named: dict[str, NetShare] = {}

    def __init__(self):
        self.net = None
        self.trainer = None
        self.claimed = False  # a training env made with this share trains its net

    def claim(self) -> None:
        """A training env is being made with this share: it builds a new net if a training env
        already had the current one, and its own trainer in any case."""
        if self.claimed:
            self.net = None
        self.trainer = None
        self.claimed = True

    @classmethod
    def named(cls, name: str) -> NetShare:
        """The process-wide share called ``name`` (made empty on first use; it keeps its latest
        net for the life of the process)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"share must be a non-empty name, got {name!r}")
        return cls._named.setdefault(name, cls())

    def __deepcopy__(self, memo) -> NetShare:
        return NetShare()


def _holds_data(value) -> bool:
    """Whether ``value`` is a tensor, a module, a split or a dataset (checked without importing torch)."""
    return hasattr(value, "state_dict") or type(value).__name__ in ("Tensor", "Parameter", "Split", "RoutingDataset")


def register_task(env_id: str, task, **kwargs) -> None:
    """Register ``task`` (a :class:`~routing_rl.envs.task.RoutingTask` class, a function
    returning one, or the ``"module:name"`` of either) as Gymnasium environment ``env_id``.

    ``kwargs`` are the defaults of ``gym.make(env_id, ...)``: the env's own keywords
    (:data:`ENV_KEYWORDS`: ``arch``, ``k_cpt``, ``seed``, ...) and the task's constructor
    keywords, which must be plain values (Gymnasium deep-copies them on every make).
    ``gym.make`` gives a :class:`~routing_rl.envs.routing_env.RoutingEnv`, ``gym.make_vec``
    the batched :class:`~routing_rl.envs.gym_vector_env.RoutingGymVectorEnv`.
    """
    if not isinstance(task, (str, type)) and hasattr(task, "load_dataset"):
        raise TypeError("register the task's class or factory (or 'module:name'), not an instance: "
                        "Gymnasium would copy its data on every gym.make")
    heavy = sorted(key for key, value in kwargs.items() if _holds_data(value))
    if heavy:
        raise TypeError(f"registered keywords {heavy} hold tensors, data or a net, which Gymnasium would deep-copy "
                        "on every gym.make; register plain values (a dataset name, sizes) and load the data in "
                        "the task's load_dataset(), or pass objects to gym.make itself")
    gym.register(id=env_id, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT,
                 kwargs={"task": task, "share": NetShare(), **kwargs})


def register_envs() -> None:
    """The built-in ids. They register no k_cpt or arch: those are the env's defaults (4e-9,
    the task's first net), so that a run's ``--k-cpt`` or ``--arch`` overrides nothing the
    task carries (a plug-in's registered settings are a run's defaults: docs/plugins.md)."""
    for env_id, dataset in ENV_DATASETS.items():
        if env_id not in gym.registry:
            register_task(env_id, IMAGE_TASK, dataset=dataset)
    if VIDEO_ENV not in gym.registry:
        register_task(VIDEO_ENV, VIDEO_TASK)
