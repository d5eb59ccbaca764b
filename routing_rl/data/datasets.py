"""The five datasets of the paper, built from raw MNIST / CIFAR-10 pixels (FACTS.md, "Data"),
and the hybrid variants of the task suite.

- ``mnist``: digits resized 28→32 (bilinear), grey repeated over 3 channels.
- ``cifar10``, ``cifar2`` (horse, other), ``cifar5`` (cat, dog, deer, horse, other):
  CIFAR-10 images gamma-decoded, value**2.2 on the 0..1 scale.
- ``hybrid``: MNIST digits 0-4 (resized, each recoloured black→c1, white→c2 with two random
  colours at least 0.3 apart, seeded) plus CIFAR-10 airplane, automobile, deer, frog, horse
  (gamma-decoded). Its test set holds the digits' test part plus, per CIFAR class, as many
  test images as the digit classes have on average (all 1,000 when MNIST is complete).
- the variants (:data:`HYBRIDS`) change what makes hybrid easy: other classes
  (``hybrid-swap``), a 1:1 training mix (``hybrid-even``), a test split in the training mix
  (``hybrid-train-mix``), digits that are the hard half (``hybrid-hard-digits``).
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from routing_rl.core.seeds import seeded_generator
from routing_rl.data import cache, sources
from routing_rl.data.containers import CIFAR_SOURCE, MNIST_SOURCE, SOURCES, RoutingDataset, Split
from routing_rl.data.layouts import CIFAR10_CLASSES, MNIST_CLASSES

HYBRID_DIGITS = 5  # digits 0..4
HYBRID_CIFAR = ("airplane", "automobile", "deer", "frog", "horse")
GAMMA = 2.2
MIN_COLOUR_DISTANCE = 0.3
RECOLOUR_SEED = 0
HYBRID_TEST_SEED = 0
VARIANT_SEED = 1
"""Seed of the variants' own draws (digit subsets, occlusions, noise); hybrid draws none."""
IMAGE_SIZE = 32
OCCLUSION = 10  # side of the square hiding part of a hard digit, pixels of 32
LOW_CONTRAST = 0.8  # a hard digit's colours pulled this far from its mean colour
NOISE = 0.03  # std of the Gaussian pixel noise on a hard digit, on the 0..1 scale


@dataclass(frozen=True)
class HybridSpec:
    """How a hybrid is built: which digits and CIFAR classes, the training and test mixes,
    and whether the digits are made hard.

    ``even_train``: CIFAR training images subsampled to as many per class as the digit
    classes have on average (a 1:1 mix instead of hybrid's ~1:6). ``test_mix``: ``even``
    (half digits, half CIFAR, as the paper) or ``train`` (the training split's ratio).
    ``digit_share``: the share of each digit class's training images kept.
    ``hard_digits``: occluded, low-contrast, noisy digits (:func:`harden_digits`, :func:`fade_and_noise`)."""

    summary: str
    digits: tuple[int, ...] = tuple(range(HYBRID_DIGITS))
    cifar: tuple[str, ...] = HYBRID_CIFAR
    even_train: bool = False
    test_mix: str = "even"
    digit_share: float = 1.0
    hard_digits: bool = False


HYBRIDS = {
    "hybrid": HybridSpec("the paper's hybrid"),
    "hybrid-swap": HybridSpec("other classes: digits 5-9 and CIFAR bird, cat, dog, ship, truck",
                              digits=(5, 6, 7, 8, 9), cifar=("bird", "cat", "dog", "ship", "truck")),
    "hybrid-even": HybridSpec("a 1:1 digit:CIFAR training mix (hybrid's is ~1:6); the test split is that mix too",
                              even_train=True),
    "hybrid-train-mix": HybridSpec("hybrid's training split; a test split in its ~1:6 digit:CIFAR mix",
                                   test_mix="train"),
    "hybrid-hard-digits": HybridSpec("the digits are the hard half: occluded, faded, noisy, and half of "
                                     "them kept for training", digit_share=0.5, hard_digits=True),
}
"""The hybrids by name: the paper's and the task suite's variants of it."""
PAPER_DATASETS = ("mnist", "cifar10", "cifar2", "cifar5", "hybrid")
DATASETS = PAPER_DATASETS + tuple(name for name in HYBRIDS if name not in PAPER_DATASETS)
CLASSES = {
    "mnist": MNIST_CLASSES,
    "cifar10": CIFAR10_CLASSES,
    "cifar2": ("horse", "other"),
    "cifar5": ("cat", "dog", "deer", "horse", "other"),
    **{name: tuple(MNIST_CLASSES[d] for d in spec.digits) + spec.cifar for name, spec in HYBRIDS.items()},
}
NEEDS = {"mnist": ("mnist",), **{name: ("mnist", "cifar") for name in HYBRIDS}}  # the rest need only "cifar"


def gamma_decode(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 pixels → float32 ``(value / 255) ** 2.2``, computed in place in the output."""
    out = torch.empty(pixels.shape, dtype=torch.float32, device=pixels.device)
    return out.copy_(pixels).mul_(1 / 255).pow_(GAMMA).clamp_(0, 1)


def resize_digits(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 ``(N, 28, 28)`` → float32 ``(N, 1, 32, 32)`` in [0, 1], bilinear."""
    grey = pixels[:, None].float().div_(255)
    size = (IMAGE_SIZE, IMAGE_SIZE)
    return F.interpolate(grey, size=size, mode="bilinear", align_corners=False).clamp_(0, 1)


def random_colour_pairs(n: int, generator: torch.Generator,
                        min_distance: float = MIN_COLOUR_DISTANCE) -> torch.Tensor:
    """``(n, 2, 3)`` pairs of uniform RGB colours, each pair at least ``min_distance`` apart
    (pairs that are closer are redrawn)."""
    colours = torch.rand(n, 2, 3, generator=generator)
    while True:
        close = torch.nonzero((colours[:, 0] - colours[:, 1]).norm(dim=1) < min_distance).flatten()
        if len(close) == 0:
            return colours
        colours[close] = torch.rand(len(close), 2, 3, generator=generator)


def recolour(grey: torch.Tensor, colours: torch.Tensor) -> torch.Tensor:
    """``(N, 1, H, W)`` grey in [0, 1] → ``(N, 3, H, W)``: black → ``colours[:, 0]``,
    white → ``colours[:, 1]``, linear in between."""
    c1, c2 = colours[:, 0, :, None, None], colours[:, 1, :, None, None]
    return c1 + (c2 - c1) * grey


def _class_map(names: tuple[str, ...]) -> torch.Tensor:
    """CIFAR-10 label → index in ``names`` (the last name, "other", takes the rest)."""
    other = len(names) - 1
    return torch.tensor([names.index(c) if c in names else other for c in CIFAR10_CLASSES])


def _mnist_entry(raw: dict) -> dict:
    entry = {}
    for split in ("train", "test"):
        entry[f"{split}_images"] = resize_digits(raw[f"{split}_images"]).expand(-1, 3, -1, -1).contiguous()
        entry[f"{split}_labels"] = raw[f"{split}_labels"].clone()
    return entry


def _cifar_entry(raw: dict) -> dict:
    entry = {}
    for split in ("train", "test"):
        entry[f"{split}_images"] = gamma_decode(raw[f"{split}_images"])
        entry[f"{split}_labels"] = raw[f"{split}_labels"].clone()
    return entry


def _hybrid_cifar_indices(labels: torch.Tensor, names: tuple[str, ...], per_class: int | None,
                          seed: int) -> torch.Tensor:
    """Indices of the CIFAR classes ``names``; at most ``per_class`` of each (seeded choice)."""
    generator = seeded_generator(seed)
    chosen = []
    for name in names:
        idx = torch.nonzero(labels == CIFAR10_CLASSES.index(name)).flatten()
        if per_class is not None and per_class < len(idx):
            idx = idx[torch.randperm(len(idx), generator=generator)[:per_class]].sort().values
        chosen.append(idx)
    return torch.cat(chosen).sort().values  # in source order


def _per_class_share(labels: torch.Tensor, indices: torch.Tensor, share: float,
                     generator: torch.Generator) -> torch.Tensor:
    """``round(share * n_c)`` (at least one) of ``indices`` per label ``c`` (seeded), in source order."""
    if share >= 1:
        return indices
    kept = []
    for c in labels[indices].unique().tolist():
        idx = indices[labels[indices] == c]
        kept.append(idx[torch.randperm(len(idx), generator=generator)[: max(1, round(share * len(idx)))]])
    return torch.cat(kept).sort().values


def harden_digits(grey: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``(N, 1, H, W)`` grey digits in [0, 1] → occluded ones: a square of
    :data:`OCCLUSION` pixels at a uniform position, filled with one uniform grey level."""
    n, _, height, width = grey.shape
    rows = torch.randint(0, height - OCCLUSION + 1, (n, 1, 1, 1), generator=generator)
    cols = torch.randint(0, width - OCCLUSION + 1, (n, 1, 1, 1), generator=generator)
    levels = torch.rand(n, 1, 1, 1, generator=generator).to(grey.dtype)
    y = torch.arange(height).view(1, 1, height, 1)
    x = torch.arange(width).view(1, 1, 1, width)
    square = (y >= rows) & (y < rows + OCCLUSION) & (x >= cols) & (x < cols + OCCLUSION)
    return torch.where(square, levels, grey)


def fade_and_noise(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Recoloured hard digits ``(N, 3, H, W)`` → their contrast cut to :data:`LOW_CONTRAST`
    around each image's mean colour, plus Gaussian pixel noise of std :data:`NOISE`, clamped to [0, 1]."""
    mean = images.mean(dim=(2, 3), keepdim=True)
    faded = mean + LOW_CONTRAST * (images - mean)
    return (faded + NOISE * torch.randn(images.shape, generator=generator)).clamp_(0, 1)


def _test_sizes(spec: HybridSpec, digits: int, train_ratio: float, available: int) -> tuple[float, int | None]:
    """(share of test digits kept, CIFAR test images per class) for ``spec.test_mix``:
    ``even`` keeps every digit and as many CIFAR images per class as the digit classes have on
    average; ``train`` keeps the training split's CIFAR:digit ratio with as many images as
    the sources hold (``available``: CIFAR test images of the scarcest chosen class)."""
    classes = len(spec.cifar)
    if spec.test_mix == "even":
        return 1.0, round(digits / classes)
    if digits * train_ratio <= classes * available:
        return 1.0, round(digits * train_ratio / classes)
    return classes * available / (digits * train_ratio), None


def _hybrid_entry(mnist: dict, cifar: dict, spec: HybridSpec) -> dict:
    generator = seeded_generator(RECOLOUR_SEED)
    variant = seeded_generator(VARIANT_SEED)  # drawn from by the variants only
    digit_label = torch.full((len(MNIST_CLASSES),), -1, dtype=torch.long)
    digit_label[list(spec.digits)] = torch.arange(len(spec.digits))
    cifar_label = torch.tensor([
        len(spec.digits) + spec.cifar.index(c) if c in spec.cifar else -1 for c in CIFAR10_CLASSES
    ])
    entry, train_ratio = {}, 0.0
    for split in ("train", "test"):
        labels = mnist[f"{split}_labels"]
        digit = torch.nonzero(torch.isin(labels, torch.tensor(spec.digits))).flatten()
        if split == "train":
            digit = _per_class_share(labels, digit, spec.digit_share, variant)
            per_class = round(len(digit) / len(spec.cifar)) if spec.even_train else None
        else:  # as in the paper, half digits and half CIFAR unless the spec asks the training mix
            available = min(int((cifar["test_labels"] == CIFAR10_CLASSES.index(c)).sum()) for c in spec.cifar)
            share, per_class = _test_sizes(spec, len(digit), train_ratio, available)
            digit = _per_class_share(labels, digit, share, variant)
        picked = _hybrid_cifar_indices(cifar[f"{split}_labels"], spec.cifar, per_class, HYBRID_TEST_SEED)
        grey = resize_digits(mnist[f"{split}_images"][digit])
        if spec.hard_digits:
            grey = harden_digits(grey, variant)
        digits = recolour(grey, random_colour_pairs(len(digit), generator))
        if spec.hard_digits:
            digits = fade_and_noise(digits, variant)
        entry[f"{split}_images"] = torch.cat([digits, gamma_decode(cifar[f"{split}_images"][picked])])
        entry[f"{split}_labels"] = torch.cat(
            [digit_label[labels[digit]], cifar_label[cifar[f"{split}_labels"][picked]]]
        )
        entry[f"{split}_source"] = torch.cat(
            [torch.full((len(digit),), MNIST_SOURCE), torch.full((len(picked),), CIFAR_SOURCE)]
        )
        train_ratio = len(picked) / len(digit)
    entry["test_cifar_per_class"] = per_class
    return entry


def _hybrid_rule(spec: HybridSpec, per_class: int | None) -> dict:
    digits = "".join(map(str, spec.digits))
    share = "" if spec.digit_share >= 1 else f" ({spec.digit_share:.0%} of each digit class, seeded)"
    cifar_train = ("as many per class as the digit classes have on average (seeded choice)" if spec.even_train
                   else "all")
    cifar_test = "all" if per_class is None else f"up to {per_class} per class (seeded choice)"
    rule = {
        "variant": spec.summary,
        "train_set": f"MNIST train digits {digits}{share} + CIFAR-10 train images of {', '.join(spec.cifar)}: "
                     f"{cifar_train}",
        "test_set": f"MNIST test digits {digits} + CIFAR-10 test images of those classes, {cifar_test}; "
                    + ("half digits, half CIFAR" if spec.test_mix == "even" else "the training split's source mix")
                    + f" (seed {HYBRID_TEST_SEED})",
        "order": "digits first, then CIFAR images, each in source order",
        "recolour": f"per digit two uniform RGB colours >= {MIN_COLOUR_DISTANCE} apart, "
                    f"black->first, white->second; torch.Generator seed {RECOLOUR_SEED}, "
                    "train digits then test digits",
    }
    if spec.hard_digits:
        rule["hard_digits"] = (f"a {OCCLUSION}x{OCCLUSION} square of one uniform grey level at a uniform place, "
                               f"then contrast x{LOW_CONTRAST} around the image's mean colour and Gaussian noise of "
                               f"std {NOISE}, clamped to 0..1 (seed {VARIANT_SEED})")
    return rule


def _splits(entry: dict, source: int, mapping: torch.Tensor | None = None) -> tuple[Split, Split]:
    """Splits from a cache entry: every example from ``source`` unless the entry says
    otherwise; ``mapping`` relabels (CIFAR-10 label → CIFAR-2/-5 label)."""
    out = []
    for split in ("train", "test"):
        labels = entry[f"{split}_labels"]
        where = entry.get(f"{split}_source", torch.full_like(labels, source))
        out.append(Split(entry[f"{split}_images"], labels if mapping is None else mapping[labels], where))
    return out[0], out[1]


def _counts(values: torch.Tensor, n: int) -> list[int]:
    return torch.bincount(values, minlength=n).tolist()


def check_contents(name: str, classes: tuple[str, ...], splits: dict[str, Split], paths: list[str]) -> None:
    """Raise ValueError unless every split holds every class, and a hybrid both sources: a
    partial copy (a cut archive, a half-finished download) must not train and test quietly."""
    for split, data in splits.items():
        counts = _counts(data.labels, len(classes))
        empty = [c for c, n in zip(classes, counts) if n == 0]
        if name in HYBRIDS:
            empty += [f"{source} images" for source, n in zip(SOURCES, _counts(data.source, len(SOURCES))) if n == 0]
        if empty:
            raise ValueError(
                f"dataset {name!r} is incomplete: its {split} split has no {', '.join(empty)} "
                f"(built from {', '.join(paths)}); that copy is partial, replace it with a complete one"
            )


def _build(name: str, resolved: dict, cache_dir: Path) -> tuple[Split, Split, dict]:
    """(train, test, rule): from the cache when built before, else built and cached."""
    # Derived entries are keyed by their sources and by every constant of the build.
    key = {kind: {"source": r.key, "split": r.info["split"]} for kind, r in resolved.items()}
    key["build"] = [GAMMA, IMAGE_SIZE]
    if name == "mnist":
        entry = cache.cached(cache_dir, "dataset-mnist", key, lambda: _mnist_entry(resolved["mnist"].raw()))
        return (*_splits(entry, MNIST_SOURCE), {})
    if name in HYBRIDS:
        spec = HYBRIDS[name]
        key["build"] += [HYBRID_CIFAR, MIN_COLOUR_DISTANCE, RECOLOUR_SEED, HYBRID_TEST_SEED]
        if name != "hybrid":  # hybrid's key predates the variants; theirs adds every setting
            key["build"] += [list(astuple(spec)[1:]), VARIANT_SEED, OCCLUSION,
                             LOW_CONTRAST, NOISE]
        entry = cache.cached(
            cache_dir, f"dataset-{name}", key,
            lambda: _hybrid_entry(resolved["mnist"].raw(), resolved["cifar"].raw(), spec),
        )
        return (*_splits(entry, MNIST_SOURCE), _hybrid_rule(spec, entry["test_cifar_per_class"]))
    # cifar10, cifar2 and cifar5 share one cache entry of gamma-decoded images
    entry = cache.cached(cache_dir, "images-cifar", key, lambda: _cifar_entry(resolved["cifar"].raw()))
    if name == "cifar10":
        return (*_splits(entry, CIFAR_SOURCE), {})
    classes = CLASSES[name]
    rule = {"labels": f"CIFAR-10 classes not in {classes[:-1]} are labelled 'other'"}
    return (*_splits(entry, CIFAR_SOURCE, _class_map(classes)), rule)


def load_dataset(name: str, data_dir: str | Path | None = None, cache_dir: str | Path | None = None,
                 download: bool = True) -> RoutingDataset:
    """Build (or load from the cache) one of :data:`DATASETS`.

    ``data_dir`` defaults to ``$ROUTING_RL_DATA_DIR``; ``cache_dir`` to ``$ROUTING_RL_CACHE``
    (else ``~/.cache/routing-rl``). With ``download``, torchvision's downloaders are tried
    (into ``<cache_dir>/downloads``) before falling back to a test-set-only MNIST copy.
    Raises ValueError for an unknown name, DataNotFoundError when no source is found.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    origin = ""
    if data_dir is None and os.environ.get(sources.DATA_DIR_ENV):
        origin = f" (from ${sources.DATA_DIR_ENV})"
    data_dir = Path(data_dir).expanduser() if data_dir is not None else sources.default_data_dir()
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else cache.default_cache_dir()
    cache.check_cache_dir(cache_dir)
    resolved = {
        kind: sources.resolve(kind, name, data_dir, cache_dir, download, origin)
        for kind in NEEDS.get(name, ("cifar",))
    }
    train, test, rule = _build(name, resolved, cache_dir)

    classes = CLASSES[name]
    check_contents(name, classes, {"train": train, "test": test}, [str(r.candidate.path) for r in resolved.values()])
    found = {kind: r.info for kind, r in resolved.items()}
    seeds = {k: f["split_seed"] for k, f in found.items() if "split_seed" in f}
    if name in HYBRIDS:
        seeds.update(recolour=RECOLOUR_SEED, hybrid_test_subset=HYBRID_TEST_SEED)
        if name != "hybrid":
            seeds.update(variant=VARIANT_SEED)
    preprocessing = []
    if "mnist" in resolved:
        channels = ", grey repeated over 3 channels" if name == "mnist" else ""
        preprocessing.append(f"MNIST: 28x28 -> 32x32 bilinear (align_corners=False), 0..1{channels}")
    if "cifar" in resolved:
        preprocessing.append(f"CIFAR-10: gamma-decoded, (value/255)**{GAMMA}")
    splits = (("train", train), ("test", test))
    description = {
        "name": name,
        "classes": list(classes),
        "sources": found,
        "preprocessing": preprocessing,
        "rule": rule,
        "seeds": seeds,
        "sizes": {"train": len(train), "test": len(test)},
        "class_counts": {s: _counts(x.labels, len(classes)) for s, x in splits},
        "source_counts": {s: dict(zip(SOURCES, _counts(x.source, len(SOURCES)))) for s, x in splits},
        "format_version": cache.FORMAT_VERSION,
    }
    return RoutingDataset(name, classes, train, test, description, SOURCES)
