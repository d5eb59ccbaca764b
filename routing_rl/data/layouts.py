"""Readers for the accepted on-disk layouts. Each returns raw uint8 pixels and int64 labels:

``{"train_images", "train_labels", "test_images", "test_labels"}`` with MNIST images
``(N, 28, 28)`` and CIFAR-10 images ``(N, 3, 32, 32)``; ``train_*`` are absent when a source
holds only a test set (MNIST's ``t10k`` files alone).
"""

from __future__ import annotations

import gzip
import io
import pickle
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

import numpy as np
import torch
from PIL import Image

MNIST_CLASSES = tuple(str(d) for d in range(10))
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)
IMAGE_SHAPES = {"mnist": (28, 28), "cifar": (3, 32, 32)}
SPLITS = ("train", "test")
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""The image files an image-folder layout is read from (those torchvision's ImageFolder reads;
named here so that reading a dataset does not import torchvision, ~150 MB of memory)."""

LAYOUT_HELP = """\
  MNIST:    torchvision's MNIST/raw/ folder, or MNIST IDX files, gzipped or plain, in any
            folder: {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz]
            (t10k files alone = MNIST's test set only, split 80/20 per class);
            an image folder train/<0..9>/*.png, test/<0..9>/... (28x28), or one .tar.gz of it.
  CIFAR-10: torchvision's cifar-10-batches-py/ folder or its cifar-10-python.tar.gz;
            an image folder train/<class>/*.png|jpg, test/<class>/... (32x32, the ten CIFAR-10
            class names: airplane ... truck), or one .tar.gz/.tgz/.tar of it.
  (looked for in the folder itself and up to two levels below it)"""


class LayoutError(ValueError):
    """A file or folder looks like an accepted layout but cannot be read as one; the message
    names the file and what is wrong with it."""


def damage(error: BaseException) -> str:
    """What a read error says about a file, in words: it is cut short, damaged, or unreadable."""
    text = str(error) or type(error).__name__
    if isinstance(error, EOFError) or "unexpected end of data" in text or "ended before" in text:
        return f"is cut short ({text})"
    if isinstance(error, (gzip.BadGzipFile, zlib.error)) or "CRC" in text or "invalid" in text.lower():
        return f"is damaged ({text})"
    return f"cannot be read ({text})"


# --- MNIST IDX files -------------------------------------------------------------------

IDX_PATTERN = re.compile(r"^(train|t10k)-(images|labels)[-.](idx[13])-ubyte(\.gz)?$")


def idx_files(folder: Path) -> dict[tuple[str, str], Path]:
    """``{(prefix, "images"|"labels"): path}`` for the MNIST IDX files in ``folder``
    (plain files preferred over gzipped ones)."""
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(folder.iterdir(), key=lambda p: (p.name.endswith(".gz"), p.name)):
        m = IDX_PATTERN.match(path.name)
        if m and path.is_file():
            found.setdefault((m.group(1), m.group(2)), path)
    return found


def read_idx(path: Path) -> np.ndarray:
    """An IDX array (unsigned-byte data), gzipped or plain."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise LayoutError(f"{path} {damage(e)}") from e
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise LayoutError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(shape)):
        raise LayoutError(f"{path} is cut short or damaged: its header says {shape} but it holds "
                          f"{len(data) - offset} bytes of data")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def read_mnist_idx(files: dict[tuple[str, str], Path]) -> dict[str, torch.Tensor]:
    raw = {}
    for prefix, split in (("train", "train"), ("t10k", "test")):
        if (prefix, "images") not in files or (prefix, "labels") not in files:
            continue
        images = read_idx(files[prefix, "images"])
        labels = read_idx(files[prefix, "labels"])
        if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
            raise LayoutError(f"{files[prefix, 'images']}: expected N 28x28 digits and N labels")
        if labels.max(initial=0) > 9:
            raise LayoutError(f"{files[prefix, 'labels']}: labels outside 0..9")
        raw[f"{split}_images"] = torch.from_numpy(images.copy())
        raw[f"{split}_labels"] = torch.from_numpy(labels.astype(np.int64))
    if "test_images" not in raw:
        raise LayoutError("MNIST IDX files: no complete test set (t10k images and labels)")
    return raw


# --- CIFAR-10 python pickles -----------------------------------------------------------


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR-10 batch holds (dicts, lists, bytes, numpy arrays): a
    planted pickle in a data folder cannot run code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")
        return super().find_class(module, name)


def _unpickle_batch(f, name: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = _BatchUnpickler(f, encoding="latin1").load()
        data = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch["labels"], dtype=np.int64)
    except Exception as e:
        raise LayoutError(f"{name}: not a CIFAR-10 python batch ({e})") from e
    if len(labels) != len(data):
        raise LayoutError(f"{name}: {len(data)} images but {len(labels)} labels")
    return data, labels


def _join_batches(batches: dict[str, tuple[np.ndarray, np.ndarray]], where: str) -> dict:
    missing = [b for b in CIFAR_BATCHES if b not in batches]
    if missing:
        raise LayoutError(f"{where}: missing CIFAR-10 batches {missing}")
    train = [batches[b] for b in CIFAR_BATCHES[:-1]]
    images, labels = batches["test_batch"]
    return {
        "train_images": torch.from_numpy(np.concatenate([x for x, _ in train])),
        "train_labels": torch.from_numpy(np.concatenate([y for _, y in train])),
        "test_images": torch.from_numpy(images.copy()),
        "test_labels": torch.from_numpy(labels),
    }


def read_cifar_batches(folder: Path) -> dict[str, torch.Tensor]:
    """torchvision's ``cifar-10-batches-py`` folder."""
    batches = {}
    for name in CIFAR_BATCHES:
        if (folder / name).is_file():
            with open(folder / name, "rb") as f:
                batches[name] = _unpickle_batch(f, str(folder / name))
    return _join_batches(batches, str(folder))


# --- image folders, as directories or tarballs -------------------------------------------


def image_member(name: str) -> tuple[str, str] | None:
    """``(split, class)`` when ``name`` is ``.../{train,test}/<class>/<image file>``."""
    parts = PurePosixPath(name).parts
    if len(parts) < 3 or parts[-3] not in SPLITS or parts[-1].startswith("."):
        return None
    if not parts[-1].lower().endswith(IMAGE_SUFFIXES):
        return None
    return parts[-3], parts[-2]


def kind_of_classes(classes: Iterable[str]) -> str | None:
    """``"mnist"`` for class folders named 0..9, ``"cifar"`` for CIFAR-10's names."""
    classes = set(classes)
    if classes and classes <= set(MNIST_CLASSES):
        return "mnist"
    if classes and classes <= set(CIFAR10_CLASSES):
        return "cifar"
    return None


def decode(data: bytes, kind: str, name: str) -> np.ndarray:
    """One image file's pixels: ``(28, 28)`` grey for MNIST, ``(3, 32, 32)`` RGB for CIFAR."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            array = np.asarray(image.convert("L" if kind == "mnist" else "RGB"))
    except Exception as e:
        raise LayoutError(f"{name} cannot be decoded as an image ({e})") from e
    pixels = array if kind == "mnist" else array.transpose(2, 0, 1)
    if pixels.shape != IMAGE_SHAPES[kind]:
        raise LayoutError(f"{name}: image is {pixels.shape}, expected {IMAGE_SHAPES[kind]}")
    return pixels


def assemble_images(items: Iterable[tuple[str, str, str, bytes]], kind: str, where: str, separator: str = ":") -> dict:
    """Decode ``(split, class, name, bytes)`` items into sorted, labelled uint8 arrays; an image
    is named ``where`` + ``separator`` + ``name`` in errors (a folder's path, an archive's member)."""
    classes = MNIST_CLASSES if kind == "mnist" else CIFAR10_CLASSES
    per_split: dict[str, list] = {s: [] for s in SPLITS}
    for split, cls, name, data in items:
        if cls not in classes:
            raise LayoutError(f"{where}: class folder {cls!r} is not one of {classes}")
        per_split[split].append((classes.index(cls), name, data))
    raw = {}
    for split, entries in per_split.items():
        if not entries:
            raise LayoutError(f"{where}: no {split}/<class>/ images")
        entries.sort(key=lambda e: (e[0], e[1]))  # class order, then file name, as ImageFolder
        raw[f"{split}_images"] = torch.from_numpy(
            np.stack([decode(data, kind, f"{where}{separator}{name}") for _, name, data in entries])
        )
        raw[f"{split}_labels"] = torch.tensor([label for label, _, _ in entries], dtype=torch.long)
    return raw


def _folder_items(root: Path) -> Iterator[tuple[str, str, str, bytes]]:
    for split in SPLITS:
        for path in sorted((root / split).glob("*/*")):
            if path.is_file() and image_member(path.relative_to(root).as_posix()):
                yield split, path.parent.name, path.relative_to(root).as_posix(), path.read_bytes()


def image_folder_files(root: Path) -> list[Path]:
    return [
        p for split in SPLITS for p in (root / split).glob("*/*")
        if p.is_file() and image_member(p.relative_to(root).as_posix())
    ]


def read_image_folder(root: Path, kind: str) -> dict[str, torch.Tensor]:
    return assemble_images(_folder_items(root), kind, str(root), separator="/")


def _tar_items(path: Path) -> Iterator[tuple[str, str, str, bytes]]:
    # One sequential pass ("r|*"): random access into a compressed tarball re-reads it.
    with tarfile.open(path, mode="r|*") as tar:
        for member in tar:
            found = member.isfile() and image_member(member.name)
            if found:
                yield found[0], found[1], member.name, tar.extractfile(member).read()
        check_complete(tar, path)


def check_complete(tar: tarfile.TarFile, path: Path) -> None:
    """Raise LayoutError unless ``tar``, read to its end in stream mode, ended with the
    end-of-archive block. A plain ``.tar`` cut between two members otherwise reads as a
    shorter, valid archive (compressed ones fail their own end-of-stream check)."""
    if tar.fileobj.tell() < tar.offset + tarfile.BLOCKSIZE:
        raise LayoutError(f"{path} is cut short: the archive stops after {tar.offset} bytes without its "
                          "end-of-archive marker")


def read_image_tarball(path: Path, kind: str) -> dict[str, torch.Tensor]:
    try:
        return assemble_images(_tar_items(path), kind, str(path))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise LayoutError(f"{path} {damage(e)}") from e


def read_cifar_tarball(path: Path) -> dict[str, torch.Tensor]:
    """torchvision's download archive ``cifar-10-python.tar.gz``, read in one pass."""
    batches = {}
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for member in tar:
                name = PurePosixPath(member.name).name
                if member.isfile() and name in CIFAR_BATCHES:
                    batches[name] = _unpickle_batch(tar.extractfile(member), f"{path}:{name}")
            check_complete(tar, path)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise LayoutError(f"{path} {damage(e)}") from e
    return _join_batches(batches, str(path))


def peek_tarball(path: Path, limit: int = 64) -> tuple[str, str] | None:
    """``(kind, layout)`` from a tarball's first members, or None when it is neither."""
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for i, member in enumerate(tar):
                if i >= limit:
                    break
                if "cifar-10-batches-py" in PurePosixPath(member.name).parts:
                    return "cifar", "cifar-python-tarball"
                found = member.isfile() and image_member(member.name)
                if found and kind_of_classes([found[1]]):
                    return kind_of_classes([found[1]]), "image-folder-tarball"
    except (tarfile.TarError, OSError, EOFError):
        return None
    return None
