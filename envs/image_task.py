"""The paper's image tasks (MNIST, CIFAR-10/-2/-5, hybrid) on the task API.

``routing_rl/HybridRouting-v0`` and its siblings are :class:`ImageTask` s registered with a
dataset name (:mod:`~routing_rl.envs.registration`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from routing_rl.training.learners import trains_static_nets
from routing_rl.core.graph import RoutedNet
from routing_rl.data import DATASETS, RoutingDataset, augment, load_dataset
from routing_rl.data.cache import default_cache_dir
from routing_rl.envs.task import RoutingTask
from routing_rl.nets import resnet
from routing_rl.nets.multiscale import arch_names, build


class ImageTask(RoutingTask):
    """32×32 colour images through the paper's multiscale nets (``static-N``, ``chain``, ``tree``) or
    CIFAR ResNets with an exit after each stage (``resnetD-exits``; static ``resnetD``, ``resnetD-exitK``)
    or every B blocks (``resnetD-exits-everyB``; static ``resnetD-everyB``, ``resnetD-exitK-everyB``;
    :mod:`routing_rl.nets.resnet`).

    Args:
        dataset: a name (``hybrid``, ``cifar10``, ``cifar2``, ``cifar5``, ``mnist``, or a hybrid
            variant of the task suite: ``hybrid-swap``, ...; :data:`routing_rl.data.DATASETS`), loaded
            from ``data_dir`` (default ``$ROUTING_RL_DATA_DIR``) on first use, or a
            :class:`~routing_rl.data.RoutingDataset` of 32×32 images already in memory.
        data_dir: where the named dataset's files are.
        download: try torchvision's downloaders when the files are not found.

    Training inputs are shifted and, for CIFAR images, flipped (the paper's augmentation).
    """

    archs = (*arch_names(), *resnet.arch_names())

    def __init__(self, dataset: str | RoutingDataset, data_dir: str | Path | None = None, download: bool = True):
        if not isinstance(dataset, (str, RoutingDataset)):
            raise TypeError(f"dataset must be a dataset name or a RoutingDataset, got {type(dataset).__name__}")
        if isinstance(dataset, str) and dataset not in DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}, "
                             "or write a routing task for yours (docs/plugins.md)")
        self.dataset_arg = dataset
        self.data_dir = data_dir
        self.download = download

    def load_dataset(self) -> RoutingDataset:
        if isinstance(self.dataset_arg, RoutingDataset):
            return self.dataset_arg
        return load_dataset(self.dataset_arg, data_dir=self.data_dir, download=self.download)

    def data_fix(self, what: str) -> str:
        if isinstance(self.dataset_arg, RoutingDataset):
            return f"{what}: fix the RoutingDataset given as dataset="
        return (f"{what}, and your data files decode to such data, so the copy decoded into the cache folder "
                f"{default_cache_dir()} is damaged: delete its files and run again")

    def default_arch(self, agent: str | None) -> str:
        if "chain" not in self.archs:  # a subclass with nets of its own
            return super().default_arch(agent)
        return "static-8" if trains_static_nets(agent) else "chain"

    def static_archs(self) -> tuple[str, ...]:
        """The paper's static nets (``static-N``, the first N columns and one head) and the
        ResNets' (the plain ``resnetD``, the prefix ``resnetD-exitK``); for a subclass whose
        archs are all routed (a :func:`~routing_rl.nets.routable.routable` net, say), the
        ``static-<leaf>`` paths of its first (:meth:`RoutingTask.static_archs`)."""
        own = tuple(arch for arch in self.archs if arch.startswith("static-") or arch in resnet.static_arch_names())
        return own or super().static_archs()

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        if arch in resnet.arch_names():
            return resnet.build(arch, width, len(self.classes), k_cpt_input=k_cpt_input)
        return build(arch, width, len(self.classes), k_cpt_input=k_cpt_input)

    def augment(self, inputs: torch.Tensor, source: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return augment(inputs, source, generator)
