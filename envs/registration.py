"""The ``routing_rl/`` environment ids, registered on ``import routing_rl``.

Registration only records entry points (strings): nothing heavy is imported and no data is
loaded until an environment is made. Each id fixes a dataset; every keyword of
:mod:`~routing_rl.envs.factory` can be overridden at ``gym.make`` (``arch="tree"``,
``k_cpt="dynamic"``, ``train=False``, ``dataset=<a RoutingDataset>``, ...).
``gym.make_vec(id, num_envs=N)`` gives the batched :class:`RoutingVectorEnv`; for SB3 use
``RoutingVecEnv.make(id, num_envs=N)``.
"""

from __future__ import annotations

import gymnasium as gym

ENV_DATASETS = {
    "routing_rl/HybridRouting-v0": "hybrid",
    "routing_rl/CIFAR10Routing-v0": "cifar10",
    "routing_rl/CIFAR2Routing-v0": "cifar2",
    "routing_rl/CIFAR5Routing-v0": "cifar5",
    "routing_rl/MNISTRouting-v0": "mnist",
}


def register_envs() -> None:
    for env_id, dataset in ENV_DATASETS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="routing_rl.envs.routing_env:RoutingEnv",
            vector_entry_point="routing_rl.envs.gym_vector_env:RoutingVectorEnv",
            kwargs={"dataset": dataset, "arch": "chain", "k_cpt": 4e-9},
        )
