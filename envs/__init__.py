"""Routing as Gymnasium environments: one junction decision per step.

* :class:`RoutingTask` — the interface of a routing problem (data, net, costs, episodes);
  :func:`register_task` makes it a Gymnasium id (see ``docs/plugins.md``);
* :class:`RoutingEnv` — one episode at a time (``gym.make("routing_rl/HybridRouting-v0")``);
* :class:`RoutingSB3VecEnv` — Stable-Baselines3 ``VecEnv`` with N episodes in flight,
  batched by node (``RoutingVecEnv`` is its earlier name);
* :class:`RoutingGymVectorEnv` — the same for Gymnasium (``gym.make_vec``);
* :class:`ObservationLayout` — observation and action spaces, shared with evaluation;
* :class:`JointTraining` — how the environment trains the feature network.

All share one stepping implementation, :class:`~routing_rl.envs.traffic.Traffic`. Names are
imported on first use, so that ``import routing_rl`` (which registers the ids) stays light.
"""

from importlib import import_module

_EXPORTS = {
    "RoutingTask": "task",
    "register_task": "registration",
    "make_task": "task",
    "task_from_env": "task",
    "ImageTask": "image_task",
    "RoutingEnv": "routing_env",
    "RoutingSB3VecEnv": "sb3_vec_env",
    "RoutingVecEnv": "sb3_vec_env",
    "RoutingGymVectorEnv": "gym_vector_env",
    "ObservationLayout": "observation",
    "JointTraining": "joint",
    "FeatureTrainer": "joint",
    "Traffic": "traffic",
    "make_traffic": "factory",
    "register_envs": "registration",
    "ENV_DATASETS": "registration",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
