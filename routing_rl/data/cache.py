"""The on-disk cache of decoded sources: where it lives, how entries are keyed and written."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

FORMAT_VERSION = 1
"""Bump when what a cache entry holds, or how it is computed, changes; old entries are then
rebuilt (and left behind: delete the cache folder to reclaim the space)."""

CACHE_ENV = "ROUTING_RL_CACHE"


def default_cache_dir() -> Path:
    """``$ROUTING_RL_CACHE``, else ``$XDG_CACHE_HOME/routing-rl``, else ``~/.cache/routing-rl``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "routing-rl"


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


def load_entry(path: Path, mmap: bool = False) -> dict | None:
    """The saved dict, or None when missing or unreadable (then it is rebuilt). With ``mmap``
    the tensors map the file (copy-on-write) instead of being read: loading is instant and
    pages come in from the page cache on first use."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True, mmap=mmap)
    except Exception:  # a truncated or foreign file: rebuild it
        return None


def save_entry(path: Path, entry: dict) -> None:
    """Write ``entry`` atomically: to a temporary file beside ``path``, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(entry, f)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a cache may be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached(cache_dir: Path, prefix: str, key: dict, build: Callable[[], dict]) -> dict:
    """``build()``'s dict of tensors, computed once per ``key`` and then memory-mapped."""
    path = cache_path(cache_dir, prefix, key)
    entry = load_entry(path, mmap=True)
    if entry is None:
        entry = build()
        save_entry(path, entry)
    return entry
