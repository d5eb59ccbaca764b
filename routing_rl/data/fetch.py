"""torchvision's downloaders, used only when the machine is online; failures come back as text."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlparse


def online(url: str, timeout: float = 3.0) -> str | None:
    """None when ``url``'s host accepts a connection, else why not."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        return None
    except OSError as e:
        return f"cannot reach {parsed.hostname} ({e})"


DOWNLOAD_URLS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "cifar": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
}
"""Where torchvision's downloaders fetch each source from (its first MNIST mirror, its CIFAR-10
archive): probed before torchvision is imported, so that a machine that is offline does not
pay for the import (~150 MB of memory, ~1.5 s) at every run that looks for a missing copy."""


def fetch(kind: str, root: Path) -> str | None:
    """Fetch ``kind`` with torchvision's downloader into ``root``; None on success, else why
    it failed (the error is folded into the caller's message, never raised from here)."""
    problem = online(DOWNLOAD_URLS[kind])
    if problem:
        return problem
    import torchvision.datasets

    dataset_class = torchvision.datasets.MNIST if kind == "mnist" else torchvision.datasets.CIFAR10
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
