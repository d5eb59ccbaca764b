"""How a run splits its dataset: a training part, a seeded validation part held out of it,
and the test split — the same for the paper's learners and the SB3 agents."""

from __future__ import annotations

import torch

from routing_rl.core.seeds import seeded_generator
from routing_rl.data import RoutingDataset, Split
from routing_rl.training.config import TrainConfig


class RunError(ValueError):
    """A run cannot start or resume as asked; the message says why and what to do."""


def training_splits(config: TrainConfig, dataset: RoutingDataset) -> tuple[Split, Split, Split]:
    """(train part, validation part, test) of ``dataset`` as the config asks: the validation
    part held out of the training split (in the test split's composition by source and class,
    or the training split's: ``config.validation_mix``), validation and test shuffled (seeded)
    and capped. Only the examples kept are copied (a smoke run on a large dataset stays small)."""
    rest, picked = dataset.validation_indices(config.validation_fraction, config.seed, config.validation_mix)
    if not len(picked) or not len(rest):
        raise RunError(
            f"a validation fraction of {config.validation_fraction} leaves {len(rest)} training and "
            f"{len(picked)} validation examples of {dataset.name}; change --validation-fraction"
        )
    generator = seeded_generator(config.seed)
    picked = picked[torch.randperm(len(picked), generator=generator)]
    order = torch.randperm(len(dataset.test), generator=generator)
    return (dataset.train.subset(rest[: config.train_examples]), dataset.train.subset(picked[: config.eval_examples]),
            dataset.test.subset(order[: config.eval_examples]))
