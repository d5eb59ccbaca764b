"""Atomic files: a crash mid-write never leaves a half-written checkpoint or config.

Everything is written to a temporary file in the same folder, flushed to disk, then
renamed over the target with ``os.replace``, which is atomic on POSIX and Windows.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda stream: stream.write(text.encode()))


def save_checkpoint(path: Path, state: dict) -> None:
    """``torch.save(state)`` to ``path``, atomically."""
    _atomic_write(path, lambda stream: torch.save(state, stream))


def load_checkpoint(path: Path, map_location="cpu") -> dict:
    """The state saved by :func:`save_checkpoint`."""
    return torch.load(Path(path), map_location=map_location, weights_only=False)
