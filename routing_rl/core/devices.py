"""The torch device a name asks for, checked before anything is built on it."""

from __future__ import annotations

import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` → CUDA when available, else CPU; any other name must be a torch device this
    machine has. ValueError naming the choices otherwise (instead of torch's error from deep
    inside the first allocation on it)."""
    if isinstance(name, str) and name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but CUDA is not available here; use --device=cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                             "device(s); use cuda:0 .. cuda:N-1, auto or cpu")
    return device
