"""Training-time augmentation on whole batches, on the batch's own device (paper §4.3).

Each image is shifted by a whole number of pixels, uniform in -4..4 along each axis, the
uncovered border filled with the image's mean colour; CIFAR images (``source == cifar``) are
also flipped left-right with probability 0.5. Digits are never flipped.
"""

from __future__ import annotations

import torch

from routing_rl.data.containers import CIFAR_SOURCE

MAX_SHIFT = 4
FLIP_PROBABILITY = 0.5


def augment(images: torch.Tensor, source: torch.Tensor,
            generator: torch.Generator | None = None) -> torch.Tensor:
    """A new ``(B, C, H, W)`` tensor: ``images`` shifted, mean-filled, CIFAR ones maybe flipped.

    Random numbers come from ``generator`` (on its own device) when given, else from torch's
    global generator on ``images.device``. Fully vectorised: two gathers and a select.
    """
    b, c, h, w = images.shape
    device = images.device
    rng_device = generator.device if generator is not None else device
    shift = torch.randint(-MAX_SHIFT, MAX_SHIFT + 1, (2, b), generator=generator, device=rng_device)
    flip = torch.rand(b, generator=generator, device=rng_device) < FLIP_PROBABILITY
    shift, flip = shift.to(device), flip.to(device) & (source.to(device) == CIFAR_SOURCE)

    # Output pixel (y, x) reads input pixel (y - dy, x - dx), mirrored in x when flipped.
    rows = torch.arange(h, device=device) - shift[0, :, None]  # (B, H)
    cols = torch.arange(w, device=device) - shift[1, :, None]  # (B, W)
    inside = ((rows >= 0) & (rows < h))[:, None, :, None] & ((cols >= 0) & (cols < w))[:, None, None, :]
    cols = torch.where(flip[:, None], w - 1 - cols, cols)
    rows, cols = rows.clamp(0, h - 1), cols.clamp(0, w - 1)

    out = images.gather(2, rows[:, None, :, None].expand(b, c, h, w))
    out = out.gather(3, cols[:, None, None, :].expand(b, c, h, w))
    mean = images.mean(dim=(2, 3), keepdim=True)
    return torch.where(inside, out, mean)
