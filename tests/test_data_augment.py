"""Batched augmentation: shifts of -4..4 px with mean-colour fill, flips for CIFAR images only."""

from __future__ import annotations

import pytest
import torch

from routing_rl.data import SOURCES, augment

MNIST, CIFAR = SOURCES.index("mnist"), SOURCES.index("cifar")


def reference(image: torch.Tensor, dy: int, dx: int, flip: bool) -> torch.Tensor:
    """One image the slow, obvious way: flip, then move by (dy, dx), mean colour elsewhere."""
    c, h, w = image.shape
    src = image.flip(-1) if flip else image
    out = image.mean((1, 2), keepdim=True).expand(c, h, w).clone()
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        src[:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return out


def ramps(n: int) -> torch.Tensor:
    """Images whose channel 0 is x, channel 1 is y (as (k+1)/64), channel 2 random: any output
    pixel inside the image says which input pixel it came from."""
    k = (torch.arange(32, dtype=torch.float32) + 1) / 64
    images = torch.empty(n, 3, 32, 32)
    images[:, 0] = k[None, None, :]
    images[:, 1] = k[None, :, None]
    images[:, 2] = torch.rand(n, 32, 32)
    return images


def decode_params(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, dx, flipped) of ramp images, read at the centre, which no shift uncovers."""
    src_x = (out[:, 0, 16, 16] * 64 - 1).round().long()
    src_y = (out[:, 1, 16, 16] * 64 - 1).round().long()
    flipped = out[:, 0, 16, 17] < out[:, 0, 16, 16]
    dx = torch.where(flipped, src_x - 15, 16 - src_x)
    return 16 - src_y, dx, flipped


def test_shape_device_and_input_untouched():
    images = torch.rand(8, 3, 32, 32)
    before = images.clone()
    out = augment(images, torch.tensor([MNIST, CIFAR] * 4))
    assert out.shape == images.shape and out.dtype == images.dtype and out.device == images.device
    assert out.data_ptr() != images.data_ptr()
    assert torch.equal(images, before)


def test_outputs_are_exact_shifts_with_mean_fill():
    n = 256
    images = ramps(n)
    source = torch.tensor([MNIST, CIFAR]).repeat(n // 2)
    out = augment(images, source, torch.Generator().manual_seed(0))
    dy, dx, flipped = decode_params(out)
    for i in range(n):
        expected = reference(images[i], int(dy[i]), int(dx[i]), bool(flipped[i]))
        assert torch.allclose(out[i], expected, atol=1e-6), i


def test_shift_range_and_flip_rule():
    n = 4000
    images = ramps(n)
    source = torch.tensor([MNIST, CIFAR]).repeat(n // 2)
    dy, dx, flipped = decode_params(augment(images, source, torch.Generator().manual_seed(1)))
    for d in (dy, dx):
        counts = torch.bincount(d + 4, minlength=9)
        assert len(counts) == 9  # nothing outside -4..4
        assert int(counts.min()) > 0.75 * n / 9 and int(counts.max()) < 1.25 * n / 9  # ~uniform
    assert not flipped[source == MNIST].any()  # digits: never
    rate = flipped[source == CIFAR].float().mean().item()
    assert 0.45 < rate < 0.55  # CIFAR: p = 0.5 (n = 2000: sd 0.011)


def test_fill_is_each_images_own_mean_colour():
    images = ramps(64)
    images[:, 2] *= torch.rand(64, 1, 1)  # a different mean colour per image
    out = augment(images, torch.full((64,), CIFAR), torch.Generator().manual_seed(2))
    dy, dx, _ = decode_params(out)
    mean = images.mean((2, 3))
    blank = torch.zeros(64, 32, 32, dtype=torch.bool)
    for i in range(64):
        y, x = int(dy[i]), int(dx[i])
        blank[i, : max(y, 0)] = blank[i, 32 + min(y, 0):] = True
        blank[i, :, : max(x, 0)] = blank[i, :, 32 + min(x, 0):] = True
        assert torch.allclose(out[i][:, blank[i]], mean[i][:, None], atol=1e-6)
        assert not torch.isclose(out[i][0, ~blank[i]], mean[i, 0]).any()  # the rest is image
    assert blank.any(dim=(1, 2)).float().mean() > 0.7  # most images were shifted


def test_generator_makes_it_deterministic():
    images, source = torch.rand(32, 3, 32, 32), torch.randint(0, 2, (32,))
    a = augment(images, source, torch.Generator().manual_seed(5))
    b = augment(images, source, torch.Generator().manual_seed(5))
    c = augment(images, source, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_gpu_like_on_cpu():
    images, source = torch.rand(128, 3, 32, 32), torch.randint(0, 2, (128,))
    cpu = augment(images, source, torch.Generator().manual_seed(7))
    gpu = augment(images.cuda(), source.cuda(), torch.Generator().manual_seed(7))
    assert gpu.device.type == "cuda"
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-6)
    assert augment(images.cuda(), source.cuda()).device.type == "cuda"  # global CUDA generator
