"""How a run splits its dataset: a training part, a seeded validation part held out of it,
and the test split — the same for the paper's learners and the SB3 agents."""

from __future__ import annotations

import torch

from routing_rl.data import RoutingDataset, Split
from routing_rl.training.config import TrainConfig


class RunError(ValueError):
    """A run cannot start or resume as asked; the message says why and what to do."""


def limit(split: Split, examples: int | None) -> Split:
    """The first ``examples`` of a split (all of it for None); splits are already shuffled by class."""
    return split if examples is None or examples >= len(split) else split.subset(torch.arange(examples))


def training_splits(config: TrainConfig, dataset: RoutingDataset) -> tuple[Split, Split, Split]:
    """(train part, validation part, test) of ``dataset`` as the config asks: the validation
    part held out of the training split (in the test split's composition by source and class,
    or the training split's: ``config.validation_mix``), validation and test shuffled (seeded) and capped."""
    train_part, validation = dataset.validation_split(config.validation_fraction, config.seed, config.validation_mix)
    if not len(validation) or not len(train_part):
        raise RunError(
            f"a validation fraction of {config.validation_fraction} leaves {len(train_part)} training and "
            f"{len(validation)} validation examples of {dataset.name}; change --validation-fraction"
        )
    generator = torch.Generator().manual_seed(config.seed)
    validation = validation.subset(torch.randperm(len(validation), generator=generator))
    test = dataset.test.subset(torch.randperm(len(dataset.test), generator=generator))
    return limit(train_part, config.train_examples), limit(validation, config.eval_examples), limit(test, config.eval_examples)
