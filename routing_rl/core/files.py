"""Atomic files: a crash mid-write never leaves a half-written checkpoint, config or cache entry.

Everything is written to a temporary file ``.<name>.<random>.routing-rl.tmp`` in the target's
folder, flushed and fsynced, then renamed over the target with ``os.replace``, which is atomic
on POSIX and Windows. A process killed mid-write leaves only such a temporary file behind;
:func:`remove_stale_temporaries` clears them on the next start. The ``.routing-rl.tmp`` suffix
marks them as the package's own: a user's ``.notes.a1b2c3d4.tmp`` is never deleted.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o644
"""Permissions of written files: mkstemp makes them private, but a cache or a run folder may
be shared."""
TEMPORARY_SUFFIX = ".routing-rl.tmp"
"""Ends the name of every temporary file :func:`atomic_write` writes, and only theirs."""
_TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}" + re.escape(TEMPORARY_SUFFIX) + "$")


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(stream)`` on a temporary file beside ``path``, then move it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be, or be made, a folder — it, or the nearest existing path above
    it, is a file — as ``"PATH is a file, ..."``, or None when it can."""
    path = Path(path)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or existing.is_dir():
        return None
    if existing == path:
        return f"{path} is a file, not a folder"
    return f"{path} lies under {existing}, which is a file, not a folder"


def file_problem(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` — it is a folder, a path above it is a file, or
    the nearest existing folder above it is not writable — or None when it can."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder, not a file"
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        return f"{path} lies under {existing}, which is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {existing} is not writable"
    return None


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write(path, lambda stream: stream.write(text.encode()))


def read_json(path: Path):
    """The JSON value in ``path``. A file that is not JSON, or nests too deeply for Python's
    parser (a RecursionError), raises ValueError saying why; OSError when it cannot be read."""
    text = Path(path).read_text()  # UnicodeDecodeError is a ValueError
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it nests too deeply to be read") from None


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is named like a temporary file of :func:`atomic_write`."""
    return bool(_TEMPORARY.match(Path(path).name))


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files that killed writes left in ``folder``; returns them."""
    folder = Path(folder)
    stale = [p for p in folder.glob(f".*{TEMPORARY_SUFFIX}") if p.is_file() and is_temporary(p)] if folder.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
