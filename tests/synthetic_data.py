"""Tiny synthetic copies of every data layout routing-rl accepts, for tests without network."""

from __future__ import annotations

import gzip
import pickle
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from routing_rl.data.layouts import CIFAR10_CLASSES

RNG = np.random.default_rng(0)
MNIST_PER_CLASS = {"train": 3, "test": 5}
CIFAR_PER_CLASS = {"train": 3, "test": 2}


def digits(split: str) -> tuple[np.ndarray, np.ndarray]:
    labels = np.repeat(np.arange(10, dtype=np.uint8), MNIST_PER_CLASS[split])
    return RNG.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8), labels


def cifar_images(split: str) -> tuple[np.ndarray, np.ndarray]:
    labels = np.tile(np.arange(10), CIFAR_PER_CLASS[split])
    return RNG.integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8), labels


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def write_mnist_idx(folder: Path, gz: bool = True, splits=("train", "test")) -> dict:
    out = {}
    for split in splits:
        images, labels = digits(split)
        prefix = "train" if split == "train" else "t10k"
        suffix = ".gz" if gz else ""
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)
        out[split] = (images, labels)
    return out


def cifar_batches(split: str) -> list[tuple[str, dict]]:
    images, labels = cifar_images(split)
    if split == "test":
        return [("test_batch", {"data": images.reshape(len(images), -1), "labels": labels.tolist()})]
    parts = np.array_split(np.arange(len(labels)), 5)
    return [
        (f"data_batch_{i + 1}", {"data": images[p].reshape(len(p), -1), "labels": labels[p].tolist()})
        for i, p in enumerate(parts)
    ]


def write_cifar_pickles(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for split in ("train", "test"):
        batches = cifar_batches(split)
        for name, batch in batches:
            (folder / name).write_bytes(pickle.dumps(batch))
        out[split] = (
            np.concatenate([b["data"] for _, b in batches]).reshape(-1, 3, 32, 32),
            np.concatenate([b["labels"] for _, b in batches]),
        )
    return out


def write_data_folder(root: Path) -> Path:
    """``root`` holding tiny MNIST IDX files and CIFAR-10 pickles in torchvision's layouts:
    enough for every dataset (a ``--data-dir`` for end-to-end runs)."""
    write_mnist_idx(root / "MNIST" / "raw")
    write_cifar_pickles(root / "cifar-10-batches-py")
    return root


def write_image_folder(root: Path, kind: str, jpeg_first: bool = False) -> dict:
    """train/<class>/NNNN.png and test/<class>/NNNN.png (one JPEG if ``jpeg_first``)."""
    out = {}
    for split in ("train", "test"):
        images, labels = digits(split) if kind == "mnist" else cifar_images(split)
        names = [str(d) for d in range(10)] if kind == "mnist" else CIFAR10_CLASSES
        order = np.argsort(labels, kind="stable")
        images, labels = images[order], labels[order]
        for i, (image, label) in enumerate(zip(images, labels)):
            folder = root / split / names[label]
            folder.mkdir(parents=True, exist_ok=True)
            pixels = image if kind == "mnist" else image.transpose(1, 2, 0)
            ext = "jpg" if jpeg_first and i == 0 else "png"
            Image.fromarray(pixels).save(folder / f"{i:04d}.{ext}")
        out[split] = (images, labels)
    return out


def tar_folder(folder: Path, tarball: Path, prefix: str = "") -> None:
    with tarfile.open(tarball, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=prefix + path.relative_to(folder).as_posix(), recursive=False)
