"""torchvision's downloaders, used only when the machine is online; failures come back as text."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlparse

import torchvision.datasets


def online(url: str, timeout: float = 3.0) -> str | None:
    """None when ``url``'s host accepts a connection, else why not."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        return None
    except OSError as e:
        return f"cannot reach {parsed.hostname} ({e})"


def fetch(kind: str, root: Path) -> str | None:
    """Fetch ``kind`` with torchvision's downloader into ``root``; None on success, else why
    it failed (the error is folded into the caller's message, never raised from here)."""
    dataset_class = torchvision.datasets.MNIST if kind == "mnist" else torchvision.datasets.CIFAR10
    url = dataset_class.mirrors[0] if kind == "mnist" else dataset_class.url
    problem = online(url)
    if problem:
        return problem
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(60)
    try:
        root.mkdir(parents=True, exist_ok=True)
        dataset_class(str(root), train=True, download=True)
        return None
    except Exception as e:  # offline, a mirror down, a bad checksum: report, don't trace
        return f"{type(e).__name__}: {e}"
    finally:
        socket.setdefaulttimeout(previous)
