"""Checkpoints: written atomically (:mod:`routing_rl.core.files`), loaded without running code.

``torch.load(..., weights_only=True)`` unpickles only tensors and plain containers, so a
planted pickle in a run folder cannot execute anything; a file that fails that load, or is
truncated, is refused with :class:`CheckpointError` naming it.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from routing_rl.core.files import atomic_write


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded safely; the message names the file and why."""


def save_checkpoint(path: Path, state: dict) -> None:
    """``torch.save(state)`` to ``path``, atomically. A failed write (a full disk) raises its
    own OSError: torch's zip writer would report it as ``RuntimeError: unexpected pos``."""

    def write(stream) -> None:
        failed: list[OSError] = []

        class Recording:  # the file as torch's writer sees it, remembering why a write failed
            def write(self, data) -> int:
                try:
                    return stream.write(data)
                except OSError as error:
                    failed.append(error)
                    raise

            def flush(self) -> None:
                stream.flush()

        try:
            torch.save(state, Recording())
        except RuntimeError:
            if failed:
                raise failed[0] from None
            raise

    atomic_write(path, write)


def load_checkpoint(path: Path, map_location="cpu") -> dict:
    """The state saved by :func:`save_checkpoint`; :class:`CheckpointError` for anything else."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"refusing to load {path}: it holds Python objects, not only tensors and plain data ({_reason(error)}); "
            "it was not written by routing-rl: delete it, or start the run again with --overwrite"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(
            f"cannot read {path}: it is empty, truncated or not a checkpoint ({_reason(error)}); "
            "start the run again with --overwrite, or restore the file"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"cannot read {path}: it holds a {type(state).__name__}, not a checkpoint")
    return state


def _reason(error: BaseException) -> str:
    """The informative line of a torch.load error, short."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line
    return lines[0].split(". ")[0] if lines else type(error).__name__
