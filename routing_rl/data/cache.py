"""The on-disk cache of decoded sources: where it lives, how entries are keyed and written.

The cache only saves time: an entry that cannot be written (a read-only filesystem, no
permission, a full disk) is named in one warning per cache folder, and the data it would have
held is used from memory, decoded again at the next start. A read-only cache that already
holds its entries (one prepared for a cluster, say) is read as usual."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from routing_rl.core.files import atomic_write, folder_problem

FORMAT_VERSION = 1
"""Bump when what a cache entry holds, or how it is computed, changes; old entries are then
rebuilt (and left behind: delete the cache folder to reclaim the space)."""

CACHE_ENV = "ROUTING_RL_CACHE"
SPLIT_KEYS = ("train_images", "train_labels", "test_images", "test_labels")
"""What every dataset entry holds (a source entry of a test-set-only copy lacks train_*)."""


_unwritable: set[Path] = set()
"""Cache folders already warned about: one warning per folder and process."""


def default_cache_dir() -> Path:
    """``$ROUTING_RL_CACHE``, else ``$XDG_CACHE_HOME/routing-rl``, else ``~/.cache/routing-rl``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "routing-rl"


def check_cache_dir(cache_dir: Path) -> None:
    """ValueError when ``cache_dir`` cannot be a folder (it, or a folder above it, is a file)."""
    problem = folder_problem(cache_dir)
    if problem:
        given = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) and Path(os.environ[CACHE_ENV]).expanduser() == Path(cache_dir) \
            else "the cache folder"
        raise ValueError(f"{given}: {problem}; point it at a folder (or unset it for ~/.cache/routing-rl)")


def file_identity(paths: Iterable[Path]) -> list[list]:
    """``[path, size, mtime_ns]`` for each file: changes whenever a source file does."""
    identity = []
    for path in sorted(Path(p) for p in paths):
        st = path.stat()
        identity.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
    return identity


def cache_path(cache_dir: Path, prefix: str, key: dict) -> Path:
    """The entry for ``key`` (any JSON-able dict); the format version is part of the key."""
    blob = json.dumps({"format": FORMAT_VERSION, **key}, sort_keys=True).encode()
    return Path(cache_dir) / f"{prefix}-{hashlib.sha256(blob).hexdigest()[:20]}.pt"


def load_entry(path: Path, mmap: bool = False, required: Iterable[str] = ()) -> dict | None:
    """The saved dict, or None when missing (then it is built). An entry that is unreadable,
    or lacks a ``required`` tensor, or whose images and labels disagree in length, is named
    in a warning and None is returned, so that it is rebuilt. With ``mmap`` the tensors map
    the file (copy-on-write) instead of being read: loading is instant and pages come in
    from the page cache on first use."""
    if not path.is_file():
        return None
    try:
        entry = torch.load(path, weights_only=True, mmap=mmap)
    except Exception as error:  # truncated, foreign, or a pickle of anything but tensors
        problem = f"cannot be read ({type(error).__name__})"
    else:
        problem = entry_problem(entry, required)
        if problem is None:
            return entry
    warnings.warn(f"cache file {path} {problem}; rebuilding it", stacklevel=2)
    return None


def entry_problem(entry: object, required: Iterable[str] = ()) -> str | None:
    """What is wrong with a loaded cache entry, or None: every ``required`` key must hold a
    tensor, and each split's ``*_images`` / ``*_labels`` (/ ``*_source``) the same number of rows."""
    if not isinstance(entry, dict):
        return f"holds a {type(entry).__name__}, not a dict of tensors"
    missing = [key for key in required if not isinstance(entry.get(key), torch.Tensor)]
    if missing:
        return f"lacks {', '.join(missing)}"
    for split in ("train", "test"):
        rows = {k: len(v) for k, v in entry.items()
                if k.startswith(f"{split}_") and isinstance(v, torch.Tensor) and v.ndim > 0}
        if len(set(rows.values())) > 1:
            return f"holds {split} tensors of different lengths {rows}"
    return None


def save_entry(path: Path, entry: dict) -> None:
    """Write ``entry`` atomically (see :mod:`routing_rl.core.files`); when the cache folder
    cannot be written, warn once and go on without it (the module docstring)."""
    try:
        atomic_write(path, lambda stream: torch.save(entry, stream))
    except (OSError, RuntimeError) as raised:
        # torch.save reports a failed write of its stream (a full disk) as a RuntimeError
        error = raised if isinstance(raised, OSError) else raised.__context__
        if not isinstance(error, OSError):
            raise
        folder = Path(path).parent
        if folder not in _unwritable:
            _unwritable.add(folder)
            warnings.warn(f"cannot write into the cache folder {folder} ({error.strerror or error}); going on without "
                          f"a cache, so the data is decoded again at every start: set ${CACHE_ENV} to a writable folder",
                          stacklevel=2)


def cached(cache_dir: Path, prefix: str, key: dict, build: Callable[[], dict], required: Iterable[str] = SPLIT_KEYS) -> dict:
    """``build()``'s dict of tensors, computed once per ``key`` and then memory-mapped; an
    entry without the ``required`` tensors is rebuilt."""
    path = cache_path(cache_dir, prefix, key)
    entry = load_entry(path, mmap=True, required=required)
    if entry is None:
        entry = build()
        save_entry(path, entry)
    return entry
