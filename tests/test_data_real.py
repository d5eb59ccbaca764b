"""The paper's five datasets built from the real offline bundle (CIFAR-10 JPEG tarball + MNIST's
10,000 test digits). Slow: the first test decodes the bundle (about 10 s), the rest share it.
The task suite's hybrid variants are checked against docs/suite.md in tests/test_suite.py."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from routing_rl.data import SOURCES, augment, load_dataset

pytestmark = pytest.mark.slow
MNIST, CIFAR = SOURCES.index("mnist"), SOURCES.index("cifar")

# MNIST's test set split 80/20 per class (seed 0); CIFAR-10's own split.
MNIST_TRAIN = [784, 908, 826, 808, 786, 714, 766, 822, 779, 807]
MNIST_TEST = [196, 227, 206, 202, 196, 178, 192, 206, 195, 202]
EXPECTED_COUNTS = {
    "mnist": (MNIST_TRAIN, MNIST_TEST),
    "cifar10": ([5000] * 10, [1000] * 10),
    "cifar2": ([5000, 45000], [1000, 9000]),
    "cifar5": ([5000] * 4 + [30000], [1000] * 4 + [6000]),
    # digits 0-4 of the split; CIFAR test: as many per class as the digits have (1027 / 5)
    "hybrid": (MNIST_TRAIN[:5] + [5000] * 5, MNIST_TEST[:5] + [205] * 5),
}


@pytest.fixture(scope="module")
def real(real_data_dir, real_cache_dir):
    bundle = ("cifar10-jpg.tar.gz", "mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz")
    if not all((real_data_dir / f).is_file() for f in bundle) or (real_data_dir / "MNIST").exists():
        pytest.skip(f"these counts are for the offline bundle (CIFAR-10 JPEG tarball and MNIST's "
                    f"test set only); {real_data_dir} holds something else")
    return {
        name: load_dataset(name, data_dir=real_data_dir, cache_dir=real_cache_dir, download=False)
        for name in EXPECTED_COUNTS
    }


@pytest.mark.parametrize("name", EXPECTED_COUNTS)
def test_class_counts_shapes_and_range(real, name):
    ds = real[name]
    for split, expected in zip((ds.train, ds.test), EXPECTED_COUNTS[name]):
        assert torch.bincount(split.labels, minlength=len(ds.classes)).tolist() == expected
        assert split.images.shape == (sum(expected), 3, 32, 32)
        assert split.images.dtype == torch.float32
        lo, hi = float(split.images.min()), float(split.images.max())
        assert lo == 0.0 and 0.99 <= hi <= 1.0
    assert ds.description["class_counts"]["train"] == EXPECTED_COUNTS[name][0]


def test_sources_and_description(real, real_data_dir):
    for name, ds in real.items():
        sources = ds.train.source.tolist() + ds.test.source.tolist()
        if name == "mnist":
            assert set(sources) == {MNIST}
        elif name == "hybrid":
            assert set(sources) == {MNIST, CIFAR}
        else:
            assert set(sources) == {CIFAR}
    found = real["hybrid"].description["sources"]
    assert found["cifar"]["layout"] == "image-folder-tarball"
    assert found["cifar"]["path"] == str(real_data_dir / "cifar10-jpg.tar.gz")
    assert found["mnist"]["layout"] == "mnist-idx" and "test set only" in found["mnist"]["split"]
    # the hybrid's test set is half digits, half CIFAR
    assert real["hybrid"].description["source_counts"]["test"] == {"mnist": 1027, "cifar": 1025}


def test_cifar_is_gamma_decoded(real):
    images = real["cifar10"].test.images
    # JPEG pixel values are multiples of 1/255 before decoding: v ** (1 / 2.2) * 255 is whole
    undone = images[:50].pow(1 / 2.2).mul(255)
    assert torch.allclose(undone, undone.round(), atol=2e-3)
    assert 0.15 < float(images.mean()) < 0.35  # linear light is darker than sRGB (~0.47)
    assert torch.equal(real["cifar2"].train.images, real["cifar10"].train.images)


def test_mnist_resized_bilinear(real, real_data_dir):
    from routing_rl.data.layouts import read_idx

    ds = real["mnist"]
    raw = torch.from_numpy(read_idx(real_data_dir / "mnist" / "t10k-images-idx3-ubyte.gz").copy())
    resized = F.interpolate(raw[:, None].float() / 255, size=(32, 32), mode="bilinear", align_corners=False)
    # every training digit is one of the resized test-set digits (spot-check the first ten)
    flat = resized.flatten(1)
    for image in ds.train.images[:10, 0]:
        assert (flat - image.flatten()).abs().amax(1).min() < 1e-6
    assert torch.equal(ds.train.images[:, 0], ds.train.images[:, 2])


def fit_colours(images: torch.Tensor, grey: torch.Tensor):
    """Least-squares (c1, c2) per image and channel from ``images = c1 + (c2 - c1) * grey``."""
    g = grey.flatten(1).double()
    y = images.flatten(2).double()
    n = g.shape[1]
    sg, sgg = g.sum(1), (g * g).sum(1)
    sy, sgy = y.sum(2), (y * g[:, None]).sum(2)
    slope = (n * sgy - sg[:, None] * sy) / (n * sgg - sg * sg)[:, None]
    c1 = (sy - slope * sg[:, None]) / n
    residual = (c1[:, :, None] + slope[:, :, None] * g[:, None] - y).abs().max()
    return c1, c1 + slope, float(residual)


def test_hybrid_recolour_on_real_digits(real):
    hybrid, mnist = real["hybrid"], real["mnist"]
    for h, m in ((hybrid.train, mnist.train), (hybrid.test, mnist.test)):
        digits = h.images[h.source == MNIST]
        grey = m.images[m.labels < 5][:, 0]  # the same digits, in the same order, uncoloured
        assert torch.equal(h.labels[h.source == MNIST], m.labels[m.labels < 5])
        c1, c2, residual = fit_colours(digits, grey)
        assert residual < 1e-4  # black -> c1, white -> c2, linear in between
        distance = (c2 - c1).norm(dim=1)
        assert float(distance.min()) >= 0.3 - 1e-4
        assert float(c1.min()) > -1e-4 and float(c2.max()) < 1 + 1e-4
        assert float(distance.std()) > 0.1  # colours really vary from digit to digit


def test_hybrid_is_the_same_on_every_build(real, real_cache_dir, real_data_dir, tmp_path):
    # a second cache holding only the decoded sources: the hybrid is rebuilt from them
    for entry in real_cache_dir.glob("source-*.pt"):
        shutil.copy(entry, tmp_path / entry.name)
    again = load_dataset("hybrid", data_dir=real_data_dir, cache_dir=tmp_path, download=False)
    assert list(tmp_path.glob("dataset-hybrid-*.pt"))  # it was rebuilt, not copied
    for a, b in ((real["hybrid"].train, again.train), (real["hybrid"].test, again.test)):
        assert torch.equal(a.images, b.images)
        assert torch.equal(a.labels, b.labels) and torch.equal(a.source, b.source)


def shifts_matching(out: torch.Tensor, image: torch.Tensor, flip: bool) -> list[tuple[int, int]]:
    """Every (dy, dx) in -4..4 for which ``out`` is ``image`` (flipped) moved by (dy, dx),
    blanks filled with the image's mean colour."""
    src = image.flip(-1) if flip else image
    mean = image.mean((1, 2))
    padded = mean[:, None, None].expand(3, 40, 40).clone()
    padded[:, 4:36, 4:36] = src
    crops = padded.unfold(1, 32, 1).unfold(2, 32, 1)  # (3, 9, 9, 32, 32): offset (oy, ox)
    close = ((crops - out[:, None, None]).abs() <= 1e-6).flatten(3).all(-1).all(0)  # (9, 9)
    return [(4 - int(oy), 4 - int(ox)) for oy, ox in torch.nonzero(close)]


def test_augment_flip_rule_and_fill_on_real_images(real):
    test = real["hybrid"].test
    pick = torch.cat([torch.nonzero(test.source == s).flatten()[::8][:60] for s in (MNIST, CIFAR)])
    images, source = test.images[pick], test.source[pick]
    generator = torch.Generator().manual_seed(0)
    flips = {MNIST: 0, CIFAR: 0}
    shifted = 0
    for _ in range(4):
        out = augment(images, source, generator)
        for o, image, s in zip(out, images, source.tolist()):
            plain, flipped = shifts_matching(o, image, False), shifts_matching(o, image, True)
            assert plain or flipped, "output is not a mean-filled shift of its input"
            if s == MNIST:
                assert plain  # digits are never flipped
            flips[s] += not plain
            shifted += any(d != (0, 0) for d in plain + flipped)
    assert flips[MNIST] == 0
    assert 80 <= flips[CIFAR] <= 160  # 240 CIFAR draws at p = 0.5 (sd 7.7)
    assert shifted > 400  # 80/81 of the 480 draws move the image


def test_validation_split_on_real_hybrid(real):
    train, val = real["hybrid"].validation_split(0.1, seed=0)
    counts = torch.bincount(val.labels, minlength=10).tolist()
    assert counts == [round(0.1 * n) for n in EXPECTED_COUNTS["hybrid"][0]]
    assert len(train) + len(val) == len(real["hybrid"].train)
