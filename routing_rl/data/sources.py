"""Finding MNIST and CIFAR-10 on disk (or downloading them) and reading them once, cached.

Order of preference for each of the two sources:

1. a complete copy (train and test) in the data folder (``--data-dir`` /
   ``ROUTING_RL_DATA_DIR``), in any layout of :data:`~routing_rl.data.layouts.LAYOUT_HELP`;
2. a complete copy already downloaded into ``<cache>/downloads``;
3. torchvision's downloader into ``<cache>/downloads``, when allowed and the machine is online;
4. a test-set-only copy in the data folder (MNIST's ``t10k`` files alone): its 10,000 digits
   are split 80/20 per class with a fixed seed into train and test parts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from routing_rl.data import cache, fetch, layouts
from routing_rl.data.containers import stratified_indices
from routing_rl.data.layouts import LayoutError

DATA_DIR_ENV = "ROUTING_RL_DATA_DIR"
KINDS = {"mnist": "MNIST", "cifar": "CIFAR-10"}
TEST_ONLY_TEST_FRACTION = 0.2  # an 80/20 train/test split of a test-set-only source
TEST_ONLY_SPLIT_SEED = 0
SEARCH_DEPTH = 2
SKIP_FOLDERS = re.compile(r"^(fashion-?mnist|kmnist|emnist|qmnist|cifar-?100.*)$", re.IGNORECASE)
LAYOUT_RANK = {
    "mnist-idx": 0, "cifar-python-batches": 0, "image-folder": 1,
    "cifar-python-tarball": 2, "image-folder-tarball": 2,
}


class DataNotFoundError(FileNotFoundError):
    """No usable copy of a dataset was found, and none could be downloaded.

    Its message is one line: the problem (a named file cut short or damaged, or where nothing
    was found) and the fix. ``details`` lists every place looked at, every unreadable copy and
    the accepted layouts (what ``--verbose`` prints)."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class Candidate:
    """A copy of MNIST or CIFAR-10 found on disk, not yet read."""

    kind: str  # "mnist" | "cifar"
    layout: str
    path: Path  # the folder or tarball
    complete: bool  # holds a train split
    depth: int = 0
    idx: dict = field(default_factory=dict, compare=False)  # MNIST IDX files by (prefix, what)

    def files(self) -> list[Path]:
        if self.layout == "mnist-idx":
            return list(self.idx.values())
        if self.layout == "cifar-python-batches":
            return [self.path / b for b in layouts.CIFAR_BATCHES if (self.path / b).is_file()]
        if self.layout == "image-folder":
            return layouts.image_folder_files(self.path)
        return [self.path]

    def read(self) -> dict[str, torch.Tensor]:
        if self.layout == "mnist-idx":
            return layouts.read_mnist_idx(self.idx)
        if self.layout == "cifar-python-batches":
            return layouts.read_cifar_batches(self.path)
        if self.layout == "cifar-python-tarball":
            return layouts.read_cifar_tarball(self.path)
        if self.layout == "image-folder":
            return layouts.read_image_folder(self.path, self.kind)
        return layouts.read_image_tarball(self.path, self.kind)


def default_data_dir() -> Path | None:
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser() if value else None


def _folders(root: Path) -> list[tuple[Path, int]]:
    """``root`` and its subfolders down to :data:`SEARCH_DEPTH`, skipping image-class folders
    and other datasets that share MNIST's file names (Fashion-MNIST, KMNIST, ...)."""
    found, frontier = [(root, 0)], [root]
    for depth in range(1, SEARCH_DEPTH + 1):
        nxt = []
        for folder in frontier:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir())
            except OSError:
                continue
            if {"train", "test"} <= {p.name for p in subs}:  # an image folder: skip its class folders
                subs = [p for p in subs if p.name not in layouts.SPLITS]
            nxt += [s for s in subs if not s.name.startswith(".") and not SKIP_FOLDERS.match(s.name)]
        found += [(f, depth) for f in nxt]
        frontier = nxt
    return found


def _candidates_in(folder: Path, depth: int) -> list[Candidate]:
    out = []
    idx = layouts.idx_files(folder)
    if ("t10k", "images") in idx and ("t10k", "labels") in idx:
        complete = ("train", "images") in idx and ("train", "labels") in idx
        out.append(Candidate("mnist", "mnist-idx", folder, complete, depth, idx))
    if (folder / "data_batch_1").is_file() and (folder / "test_batch").is_file():
        out.append(Candidate("cifar", "cifar-python-batches", folder, True, depth))
    if (folder / "train").is_dir() and (folder / "test").is_dir():
        classes = [p.name for p in (folder / "train").iterdir() if p.is_dir()]
        kind = layouts.kind_of_classes(classes)
        if kind:
            out.append(Candidate(kind, "image-folder", folder, True, depth))
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name.lower().endswith(layouts.TARBALL_SUFFIXES):
            peeked = layouts.peek_tarball(path)
            if peeked:
                out.append(Candidate(peeked[0], peeked[1], path, True, depth))
    return out


def find_candidates(root: Path | None, kind: str) -> list[Candidate]:
    """Copies of ``kind`` under ``root``, best first (complete, simplest layout, shallowest)."""
    if root is None or not root.is_dir():
        return []
    found = []
    for folder, depth in _folders(root):
        try:
            found += [c for c in _candidates_in(folder, depth) if c.kind == kind]
        except OSError:  # an unreadable folder: skip it
            continue
    return sorted(found, key=lambda c: (not c.complete, LAYOUT_RANK[c.layout], c.depth, str(c.path)))


@dataclass
class Resolved:
    """The source chosen for one kind: where it is, its cache entry, how it is split."""

    candidate: Candidate
    key: dict  # JSON-able identity of the files read; keys every cache entry built from them
    entry_path: Path
    info: dict  # for the dataset's description
    loaded: dict | None = None

    def raw(self) -> dict[str, torch.Tensor]:
        """uint8 images and labels of both splits (a test-only source split 80/20)."""
        if self.loaded is None:
            required = cache.SPLIT_KEYS if self.candidate.complete else cache.SPLIT_KEYS[2:]
            self.loaded = cache.load_entry(self.entry_path, mmap=True, required=required)
        if self.loaded is None:  # a damaged entry: read the files again and replace it
            self.loaded = self.candidate.read()
            cache.save_entry(self.entry_path, self.loaded)
        return self.loaded if self.candidate.complete else split_test_only(self.loaded)


def try_candidate(candidate: Candidate, cache_dir: Path) -> Resolved:
    """Resolve ``candidate``, decoding it into the cache unless already there (LayoutError
    when it cannot be read)."""
    key = {"layout": candidate.layout, "kind": candidate.kind,
           "files": cache.file_identity(candidate.files())}
    path = cache.cache_path(cache_dir, f"source-{candidate.kind}", key)
    loaded = None
    if not path.is_file():
        loaded = candidate.read()
        cache.save_entry(path, loaded)
    return Resolved(candidate, key, path, {}, loaded)


def split_test_only(raw: dict) -> dict:
    """MNIST's test set alone: split its digits 80/20 per class (seeded) into train and test."""
    labels = raw["test_labels"]
    train, test = stratified_indices(labels, TEST_ONLY_TEST_FRACTION, TEST_ONLY_SPLIT_SEED)
    return {
        "train_images": raw["test_images"][train], "train_labels": labels[train],
        "test_images": raw["test_images"][test], "test_labels": labels[test],
    }


def resolve(kind: str, dataset: str, data_dir: Path | None, cache_dir: Path, allow_download: bool,
            data_dir_origin: str = "") -> Resolved:
    """The best readable source of ``kind`` (see the module docstring for the order);
    :class:`DataNotFoundError` when there is none."""
    downloads = cache_dir / "downloads"
    found = find_candidates(data_dir, kind)
    problems: list[str] = []

    def attempt(candidates: list[Candidate]) -> Resolved | None:
        for c in candidates:
            try:
                return try_candidate(c, cache_dir)
            except LayoutError as e:
                problems.append(str(e))
        return None

    download_note = "not tried (download off: --download false)"
    result = attempt([c for c in found if c.complete]) or attempt(find_candidates(downloads, kind))
    if result is None and allow_download:
        why = fetch.fetch(kind, downloads)
        download_note = f"failed: {why}" if why else "succeeded, but its files were not readable"
        result = attempt(find_candidates(downloads, kind)) if why is None else None
    if result is None:
        result = attempt([c for c in found if not c.complete])
    if result is None:
        raise DataNotFoundError(*not_found_message(kind, dataset, data_dir, data_dir_origin, downloads, download_note,
                                                   problems))
    c = result.candidate
    result.info.update(
        found_in="download" if c.path.is_relative_to(downloads) else "data-dir",
        layout=c.layout, path=str(c.path), split="the source's own train/test split",
    )
    if not c.complete:
        result.info["split"] = (
            f"{KINDS[kind]} test set only, split "
            f"{1 - TEST_ONLY_TEST_FRACTION:.0%}/{TEST_ONLY_TEST_FRACTION:.0%} per class into "
            f"train/test with seed {TEST_ONLY_SPLIT_SEED}"
        )
        result.info["split_seed"] = TEST_ONLY_SPLIT_SEED
    return result


def not_found_message(kind, dataset, data_dir, data_dir_origin, downloads, download_note, problems) -> tuple[str, str]:
    """(the one-line message, the details) of a :class:`DataNotFoundError`."""
    if data_dir is None:
        looked = f"no data folder given (--data-dir DIR or ${DATA_DIR_ENV})"
    elif data_dir.is_file():
        looked = f"data folder {data_dir}{data_dir_origin} is a file, not a folder"
    elif not data_dir.is_dir():
        looked = f"data folder {data_dir}{data_dir_origin} does not exist"
    else:
        looked = f"data folder {data_dir}{data_dir_origin}"
    if problems:
        more = f" (and {len(problems) - 1} more unreadable copies: --verbose lists them)" if len(problems) > 1 else ""
        line = (f"No readable {KINDS[kind]} data for dataset {dataset!r}: {problems[0]}{more}; "
                "copy or download that file again")
    else:
        line = (f"No {KINDS[kind]} data found for dataset {dataset!r}: {looked}, nothing in the download cache "
                f"{downloads}, torchvision download {download_note}; pass --data-dir DIR (or set ${DATA_DIR_ENV}) to "
                f"a folder holding {KINDS[kind]} in an accepted layout (--verbose lists them)")
    details = [
        "Looked in:",
        f"  - {looked}",
        f"  - download cache {downloads}",
        f"  - torchvision download: {download_note}",
        *[f"  - unreadable: {p}" for p in problems],
        "Accepted layouts:",
        layouts.LAYOUT_HELP,
    ]
    return line, "\n".join(details)
