"""The tensors a dataset hands to learners: :class:`Split` and :class:`RoutingDataset`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from routing_rl.core.seeds import seeded_generator
from routing_rl.data.mapped import take_rows

SOURCES = ("mnist", "cifar")
"""The sources of the paper's datasets: ``Split.source`` of MNIST, CIFAR and hybrid
examples holds an index into this tuple."""
MNIST_SOURCE = SOURCES.index("mnist")
VALIDATION_MIXES = ("test", "train")
"""Compositions a validation part can have: the test split's, or the training split's."""
CIFAR_SOURCE = SOURCES.index("cifar")


@dataclass(frozen=True)
class Split:
    """One split: ``images`` (inputs of any shape: ``(N, 3, 32, 32)`` float32 in [0, 1] for the
    paper's datasets), ``labels`` ``(N,)`` int64 and ``source`` ``(N,)`` int64 (an index into the
    dataset's ``sources``). A split of episodes of ``T`` frames holds ``images (N, T, ...)``,
    ``labels (N, T)`` and ``source (N, T)``, each frame's own source (a clip may cut from a
    digit to a photo); a ``source (N,)`` given for episodes is read as every frame's."""

    images: torch.Tensor
    labels: torch.Tensor
    source: torch.Tensor

    def __post_init__(self) -> None:
        n = self.images.shape[0]
        if self.labels.dim() == 2 and self.source.shape == (n,):
            object.__setattr__(self, "source", self.source[:, None].expand(self.labels.shape).contiguous())
        if self.labels.shape[:1] != (n,) or self.labels.dim() > 2 or self.source.shape != self.labels.shape:
            raise ValueError(
                f"images, labels and source disagree in length: {tuple(self.images.shape)}, "
                f"{tuple(self.labels.shape)}, {tuple(self.source.shape)}"
            )

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def frames(self) -> int:
        """Inputs per episode: 1, or ``T`` for a split of sequences."""
        return 1 if self.labels.dim() == 1 else self.labels.shape[1]

    def to(self, device: torch.device | str) -> Split:
        return Split(self.images.to(device), self.labels.to(device), self.source.to(device))

    def subset(self, indices: torch.Tensor) -> Split:
        """The examples at ``indices`` (a new split; tensors are copied; the images of a split
        loaded from the cache without keeping the file's pages resident: :func:`take_rows`)."""
        indices = torch.as_tensor(indices, dtype=torch.long, device=self.labels.device)
        return Split(take_rows(self.images, indices), self.labels[indices], self.source[indices])


def stratified_indices(
    labels: torch.Tensor, fraction: float, seed: int, counts: dict[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``range(len(labels))`` into (rest, picked), picking ``round(fraction * n_c)`` of
    each class ``c`` at random (seeded), or ``counts[c]`` when given (none of a class it
    leaves out); both index lists sorted ascending."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    generator = seeded_generator(seed)
    labels = labels.cpu()
    picked = []
    for c in torch.unique(labels).tolist():
        idx = torch.nonzero(labels == c).flatten()
        k = round(fraction * len(idx)) if counts is None else min(counts.get(c, 0), len(idx))
        picked.append(idx[torch.randperm(len(idx), generator=generator)[:k]])
    mask = torch.zeros(len(labels), dtype=torch.bool)
    if picked:
        mask[torch.cat(picked)] = True
    return torch.nonzero(~mask).flatten(), torch.nonzero(mask).flatten()


def cells(split: Split, classes: int) -> torch.Tensor:
    """``(N,)`` each example's (source, class) cell as one integer, ``source * classes + label``
    (an episode's first frame's)."""
    labels, source = (split.labels, split.source) if split.frames == 1 else (split.labels[:, 0], split.source[:, 0])
    return source.cpu() * classes + labels.cpu()


def composition_counts(train_cells: torch.Tensor, test_cells: torch.Tensor, fraction: float) -> dict[int, int]:
    """How many examples of each (source, class) cell a validation part takes so that it has
    the test split's composition: the largest part holding no more than ``fraction`` of any
    cell of the training split, each cell's count ``round(size × its test share)``, at least
    one where ``fraction`` of the cell rounds to one or more (tiny splits keep every cell)."""
    train_n = torch.bincount(train_cells)
    test_share = torch.bincount(test_cells, minlength=len(train_n)).double() / len(test_cells)
    test_share = test_share[: len(train_n)]
    present = (test_share > 0) & (train_n > 0)
    size = float((fraction * train_n[present] / test_share[present]).min()) if bool(present.any()) else 0.0
    return {c: max(round(size * float(test_share[c])), int(round(fraction * int(train_n[c])) >= 1))
            for c in torch.nonzero(present).flatten().tolist()}


@dataclass(frozen=True)
class RoutingDataset:
    """A named dataset with its classes, train and test splits, a JSON-serialisable
    ``description`` saying which files it was built from and how it was split, and the names
    of the sources ``Split.source`` indexes.

    ``sources`` has no default: runs, evaluations and figures report where each source's
    examples left the net under these names (one source: ``("all",)``, say; the paper's
    datasets: :data:`SOURCES`). A source index in a split without a name is refused.

    ``held_out``: ``(fraction, seed, mix)`` of a validation part that must stay the validation
    part whatever seed a run asks for — the one a frozen backbone was trained without, so that
    what is calibrated on validation is calibrated on images the backbone never saw.
    """

    name: str
    classes: tuple[str, ...]
    train: Split
    test: Split
    description: dict
    sources: tuple[str, ...]
    held_out: tuple[float, int, str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sources, str) or not all(isinstance(s, str) for s in self.sources) or not self.sources:
            raise ValueError(f"sources must be a non-empty tuple of names (one per Split.source index), "
                             f"got {self.sources!r}")
        object.__setattr__(self, "sources", tuple(self.sources))
        for split_name in ("train", "test"):
            source = getattr(self, split_name).source
            if source.numel() and not 0 <= int(source.min()) <= int(source.max()) < len(self.sources):
                raise ValueError(f"dataset {self.name!r}: {split_name} source indices run from {int(source.min())} "
                                 f"to {int(source.max())}, but sources names {len(self.sources)}: {self.sources}")

    def validation_split(self, fraction: float = 0.1, seed: int = 0, mix: str = "train") -> tuple[Split, Split]:
        """(train_part, validation_part) of the training split, deterministic in ``seed``. Tune
        on the validation part, never on ``test``.

        ``mix="train"``: ``fraction`` of every class (the training split's composition).
        ``mix="test"``: the test split's composition, stratified by source and class
        (:func:`composition_counts`; the examples it does not take stay in training), so that
        validation accuracy predicts test accuracy where the two splits mix sources
        differently (hybrid: ~1:6 digits:CIFAR in training, 1:1 in test).
        """
        rest, picked = self.validation_indices(fraction, seed, mix)
        return self.train.subset(rest), self.train.subset(picked)

    def validation_indices(self, fraction: float = 0.1, seed: int = 0, mix: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """The indices into the training split of :meth:`validation_split`'s two parts, so that
        a caller taking only some of them copies no more (a clip's first label stratifies).
        With :attr:`held_out`, its seed draws the part, and another fraction or mix is refused."""
        if mix not in VALIDATION_MIXES:
            raise ValueError(f"unknown validation mix {mix!r}; choose one of {', '.join(VALIDATION_MIXES)}")
        if self.held_out is not None:
            held_fraction, seed, held_mix = self.held_out
            if (fraction, mix) != (held_fraction, held_mix):
                raise ValueError(f"{self.name}'s backbone was trained without a validation part of {held_fraction:g} "
                                 f"(mix {held_mix}); validate on that one: --validation-fraction {held_fraction:g} "
                                 f"--validation-mix {held_mix}")
        if mix == "train":
            labels = self.train.labels if self.train.frames == 1 else self.train.labels[:, 0]
            return stratified_indices(labels, fraction, seed)
        train_cells = cells(self.train, len(self.classes))
        counts = composition_counts(train_cells, cells(self.test, len(self.classes)), fraction)
        return stratified_indices(train_cells, fraction, seed, counts)
