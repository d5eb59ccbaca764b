"""Datasets for routing experiments: MNIST, CIFAR-10/-2/-5 and the hybrid MNIST/CIFAR-10 set.

``load_dataset(name)`` finds the data (``--data-dir`` / ``$ROUTING_RL_DATA_DIR``, then
torchvision's downloaders, then a test-set-only MNIST copy), decodes it once into a cache
(``$ROUTING_RL_CACHE``, default ``~/.cache/routing-rl``) and returns float tensors ready for
training; ``augment`` shifts and flips whole batches on their own device.
``python -m routing_rl.data DATASET`` builds one and reports what it holds.
"""

from routing_rl.data.augment import augment
from routing_rl.data.containers import SOURCES, RoutingDataset, Split
from routing_rl.data.datasets import DATASETS, load_dataset
from routing_rl.data.sources import DataNotFoundError

__all__ = [
    "DATASETS",
    "SOURCES",
    "DataNotFoundError",
    "RoutingDataset",
    "Split",
    "augment",
    "load_dataset",
]
