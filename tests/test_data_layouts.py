"""The data layer on tiny synthetic copies of every accepted layout (no network, no real data)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from routing_rl.data import (
    DATASETS, SOURCES, DataNotFoundError, RoutingDataset, Split, load_dataset,
)
from routing_rl.data import __main__ as cli
from routing_rl.data import cache, fetch, sources
from routing_rl.data.layouts import CIFAR10_CLASSES
from synthetic_data import (
    CIFAR_PER_CLASS,
    MNIST_PER_CLASS,
    tar_folder,
    write_cifar_pickles,
    write_idx,
    write_image_folder,
    write_mnist_idx,
)

REAL_ONLINE = fetch.online  # before the autouse fixture replaces it


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Every test gets its own cache and no data folder from the environment; the network
    probe says offline so that nothing here ever tries to download."""
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROUTING_RL_DATA_DIR", raising=False)
    monkeypatch.setattr(fetch, "online", lambda url, timeout=3.0: "offline (test)")


def gamma(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((pixels / 255.0) ** 2.2).float()


def check_split(split: Split, n: int, classes: int) -> None:
    assert len(split) == n
    assert split.images.shape == (n, 3, 32, 32) and split.images.dtype == torch.float32
    assert split.labels.dtype == torch.int64 and split.source.dtype == torch.int64
    assert 0.0 <= float(split.images.min()) and float(split.images.max()) <= 1.0
    assert int(split.labels.min()) >= 0 and int(split.labels.max()) < classes


# --- every layout builds -------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout", ["idx-gz", "idx-plain", "torchvision-raw", "image-folder", "image-tarball"]
)
def test_mnist_from_each_layout(tmp_path, layout):
    data = tmp_path / "data"
    if layout == "idx-gz":
        truth = write_mnist_idx(data / "digits", gz=True)
    elif layout == "idx-plain":
        truth = write_mnist_idx(data, gz=False)
    elif layout == "torchvision-raw":
        truth = write_mnist_idx(data / "MNIST" / "raw", gz=False)
    elif layout == "image-folder":
        truth = write_image_folder(data / "mnist-png", "mnist")
    else:
        truth = write_image_folder(tmp_path / "tree", "mnist")
        data.mkdir()
        tar_folder(tmp_path / "tree", data / "my-digits.tar.gz", prefix="digits/")
    ds = load_dataset("mnist", data_dir=data, download=False)
    assert ds.classes == tuple(str(d) for d in range(10))
    for split in ("train", "test"):
        images, labels = truth[split]
        s = getattr(ds, split)
        check_split(s, len(labels), 10)
        assert torch.equal(s.labels, torch.from_numpy(labels.astype(np.int64)))
        assert torch.all(s.source == SOURCES.index("mnist"))
        assert torch.equal(s.images[:, 0], s.images[:, 1]) and torch.equal(s.images[:, 0], s.images[:, 2])
        # bilinear 28 -> 32 keeps the mean brightness to within interpolation error
        brightness = torch.from_numpy(images / 255.0).float().mean((1, 2))
        assert torch.allclose(s.images[:, 0].mean((1, 2)), brightness, atol=0.02)
    assert ds.description["sources"]["mnist"]["found_in"] == "data-dir"


def test_mnist_resize_is_bilinear():
    from routing_rl.data.datasets import resize_digits

    constant = torch.full((2, 28, 28), 200, dtype=torch.uint8)
    assert torch.allclose(resize_digits(constant), torch.full((2, 1, 32, 32), 200 / 255))
    ramp = torch.arange(28, dtype=torch.uint8).repeat(28, 1)[None] * 9  # 0..243 along x
    out = resize_digits(ramp)[0, 0]
    expected = torch.nn.functional.interpolate(
        ramp[None].float() / 255, size=(32, 32), mode="bilinear", align_corners=False)[0, 0]
    assert torch.allclose(out, expected)


@pytest.mark.parametrize("layout", ["pickles", "python-tarball", "image-folder", "image-tarball"])
def test_cifar_from_each_layout(tmp_path, layout):
    data = tmp_path / "data"
    if layout == "pickles":
        truth = write_cifar_pickles(data / "cifar-10-batches-py")
    elif layout == "python-tarball":
        truth = write_cifar_pickles(tmp_path / "cifar-10-batches-py")
        data.mkdir()
        tar_folder(tmp_path / "cifar-10-batches-py", data / "cifar-10-python.tar.gz", "cifar-10-batches-py/")
    elif layout == "image-folder":
        truth = write_image_folder(data, "cifar")
    else:
        truth = write_image_folder(tmp_path / "tree", "cifar")
        data.mkdir()
        tar_folder(tmp_path / "tree", data / "cifar.tgz")
    ds = load_dataset("cifar10", data_dir=data, download=False)
    assert ds.classes == CIFAR10_CLASSES
    for split in ("train", "test"):
        images, labels = truth[split]
        s = getattr(ds, split)
        check_split(s, len(labels), 10)
        assert torch.equal(s.labels, torch.from_numpy(labels.astype(np.int64)))
        assert torch.all(s.source == SOURCES.index("cifar"))
        assert torch.allclose(s.images, gamma(images), atol=1e-6)  # lossless: exact gamma decode
    assert ds.description["sources"]["cifar"]["layout"].startswith(
        {"pickles": "cifar-python-batches", "python-tarball": "cifar-python-tarball",
         "image-folder": "image-folder", "image-tarball": "image-folder-tarball"}[layout])


def test_image_folder_reads_jpeg_too(tmp_path):
    write_image_folder(tmp_path / "data", "cifar", jpeg_first=True)
    ds = load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    assert len(ds.train) == 10 * CIFAR_PER_CLASS["train"]


def test_wrong_image_size_is_reported(tmp_path):
    folder = tmp_path / "data"
    for split in ("train", "test"):
        (folder / split / "cat").mkdir(parents=True)
        Image.new("RGB", (64, 64)).save(folder / split / "cat" / "0.png")
    with pytest.raises(DataNotFoundError, match=r"expected \(3, 32, 32\)"):
        load_dataset("cifar10", data_dir=folder, download=False)


@pytest.mark.parametrize("name,classes", [
    ("cifar2", ("horse", "other")),
    ("cifar5", ("cat", "dog", "deer", "horse", "other")),
])
def test_cifar_relabelled(tmp_path, name, classes):
    truth = write_cifar_pickles(tmp_path / "data" / "cifar-10-batches-py")
    ds = load_dataset(name, data_dir=tmp_path / "data", download=False)
    assert ds.classes == classes
    for split in ("train", "test"):
        _, labels = truth[split]
        expected = [classes.index(CIFAR10_CLASSES[y]) if CIFAR10_CLASSES[y] in classes else len(classes) - 1
                    for y in labels]
        assert getattr(ds, split).labels.tolist() == expected
    per_class = CIFAR_PER_CLASS["train"]
    others = 10 - (len(classes) - 1)
    assert ds.description["class_counts"]["train"] == [per_class] * (len(classes) - 1) + [per_class * others]


def test_hybrid_from_synthetic(tmp_path):
    data = tmp_path / "data"
    mnist = write_mnist_idx(data / "mnist")
    cifar = write_cifar_pickles(data / "cifar-10-batches-py")
    ds = load_dataset("hybrid", data_dir=data, download=False)
    assert ds.classes == ("0", "1", "2", "3", "4", "airplane", "automobile", "deer", "frog", "horse")
    n_digit_train = 5 * MNIST_PER_CLASS["train"]
    n_cifar_train = 5 * CIFAR_PER_CLASS["train"]
    check_split(ds.train, n_digit_train + n_cifar_train, 10)
    assert ds.train.source.tolist() == [0] * n_digit_train + [1] * n_cifar_train
    # test: every digit 0-4, and per CIFAR class as many as the digits have (here more than exist)
    expected = [MNIST_PER_CLASS["test"]] * 5 + [CIFAR_PER_CLASS["test"]] * 5
    assert ds.description["class_counts"]["test"] == expected
    # CIFAR part: the right images, gamma-decoded, relabelled 5..9
    images, labels = cifar["train"]
    keep = np.isin(labels, [0, 1, 4, 6, 7])
    cifar_part = ds.train.images[ds.train.source == 1]
    assert torch.allclose(cifar_part, gamma(images[keep]), atol=1e-6)
    assert ds.train.labels[ds.train.source == 1].tolist() == [
        {0: 5, 1: 6, 4: 7, 6: 8, 7: 9}[y] for y in labels[keep]]
    # digit part: recoloured, each channel an affine map of the grey digit
    grey = load_dataset("mnist", data_dir=data, download=False).train
    grey = grey.images[grey.labels < 5][:, 0]
    digits_part = ds.train.images[ds.train.source == 0]
    assert not torch.equal(digits_part[:, 0], digits_part[:, 1])
    c1, c2, residual = fit_colours(digits_part, grey)
    assert residual < 1e-5
    assert torch.all((c2 - c1).norm(dim=1) >= 0.3 - 1e-5)
    assert mnist["train"][1][mnist["train"][1] < 5].tolist() == ds.train.labels[ds.train.source == 0].tolist()


def fit_colours(images: torch.Tensor, grey: torch.Tensor):
    """Least-squares (c1, c2) per image and channel from ``images = c1 + (c2 - c1) * grey``."""
    g = grey.flatten(1).double()  # (N, P)
    y = images.flatten(2).double()  # (N, 3, P)
    n = g.shape[1]
    sg, sgg = g.sum(1), (g * g).sum(1)
    sy, sgy = y.sum(2), (y * g[:, None]).sum(2)
    det = (n * sgg - sg * sg)[:, None]
    slope = (n * sgy - sg[:, None] * sy) / det
    c1 = (sy - slope * sg[:, None]) / n
    fit = c1[:, :, None] + slope[:, :, None] * g[:, None]
    return c1, c1 + slope, float((fit - y).abs().max())


def test_random_colour_pairs_respect_distance():
    from routing_rl.data.datasets import random_colour_pairs

    colours = random_colour_pairs(5000, torch.Generator().manual_seed(1))
    assert colours.shape == (5000, 2, 3)
    assert float((colours[:, 0] - colours[:, 1]).norm(dim=1).min()) >= 0.3
    assert 0 <= float(colours.min()) and float(colours.max()) <= 1
    again = random_colour_pairs(5000, torch.Generator().manual_seed(1))
    assert torch.equal(colours, again)


# --- where the data comes from ----------------------------------------------------------------


def test_test_only_mnist_is_split_80_20_per_class(tmp_path):
    truth = write_mnist_idx(tmp_path / "data", splits=("test",))
    ds = load_dataset("mnist", data_dir=tmp_path / "data", download=False)
    per_class = MNIST_PER_CLASS["test"]
    assert ds.description["class_counts"]["train"] == [round(0.8 * per_class)] * 10
    assert ds.description["class_counts"]["test"] == [per_class - round(0.8 * per_class)] * 10
    info = ds.description["sources"]["mnist"]
    assert "test set only" in info["split"] and info["split_seed"] == 0
    # the two parts are disjoint and together are the whole test set
    mean = torch.from_numpy(truth["test"][0]).float().div(255).mean((1, 2))
    parts = torch.cat([ds.train.images, ds.test.images])[:, 0].mean((1, 2))
    assert torch.allclose(parts.sort().values, mean.sort().values, atol=0.02)
    again = load_dataset("mnist", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache2", download=False)
    assert torch.equal(again.train.images, ds.train.images) and torch.equal(again.test.labels, ds.test.labels)


def test_complete_copy_preferred_over_test_only(tmp_path):
    write_mnist_idx(tmp_path / "data" / "a-test-only", splits=("test",))
    write_mnist_idx(tmp_path / "data" / "b-full")
    ds = load_dataset("mnist", data_dir=tmp_path / "data", download=False)
    assert ds.description["sources"]["mnist"]["path"].endswith("b-full")
    assert len(ds.train) == 10 * MNIST_PER_CLASS["train"]


def test_sources_found_beside_an_image_folder(tmp_path):
    write_image_folder(tmp_path / "data", "cifar")  # data/train, data/test ...
    write_mnist_idx(tmp_path / "data" / "more" / "mnist")  # ... and MNIST two levels down
    ds = load_dataset("hybrid", data_dir=tmp_path / "data", download=False)
    assert ds.description["sources"]["cifar"]["layout"] == "image-folder"
    assert ds.description["sources"]["mnist"]["path"] == str(tmp_path / "data" / "more" / "mnist")
    json.dumps(ds.description)  # JSON-serialisable


def test_other_idx_datasets_are_not_mistaken_for_mnist(tmp_path):
    write_mnist_idx(tmp_path / "data" / "FashionMNIST" / "raw")
    with pytest.raises(DataNotFoundError):
        load_dataset("mnist", data_dir=tmp_path / "data", download=False)


def test_data_dir_from_environment(tmp_path, monkeypatch):
    write_cifar_pickles(tmp_path / "mine" / "cifar-10-batches-py")
    monkeypatch.setenv("ROUTING_RL_DATA_DIR", str(tmp_path / "mine"))
    ds = load_dataset("cifar2")
    assert ds.description["sources"]["cifar"]["path"] == str(tmp_path / "mine" / "cifar-10-batches-py")
    assert (tmp_path / "cache").is_dir()  # ROUTING_RL_CACHE, set by the fixture


def test_cache_dir_respects_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("ROUTING_RL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "routing-rl"


class FakeMNIST:
    """Stands in for torchvision.datasets.MNIST: 'downloads' tiny IDX files."""

    mirrors = ["https://example.invalid/mnist/"]
    calls = 0

    def __init__(self, root, train=True, download=False):
        FakeMNIST.calls += 1
        write_mnist_idx(Path(root) / "MNIST" / "raw", gz=False)


def test_download_used_when_no_complete_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "online", lambda url, timeout=3.0: None)
    monkeypatch.setattr(torchvision.datasets, "MNIST", FakeMNIST)
    FakeMNIST.calls = 0
    write_mnist_idx(tmp_path / "data", splits=("test",))  # test-only: downloading is preferred
    ds = load_dataset("mnist", data_dir=tmp_path / "data")
    info = ds.description["sources"]["mnist"]
    assert info["found_in"] == "download" and FakeMNIST.calls == 1
    assert info["path"] == str(tmp_path / "cache" / "downloads" / "MNIST" / "raw")
    assert len(ds.train) == 10 * MNIST_PER_CLASS["train"]
    load_dataset("mnist", data_dir=tmp_path / "data")  # already downloaded: no second download
    assert FakeMNIST.calls == 1


def test_download_cifar(tmp_path, monkeypatch):
    class FakeCIFAR10:
        url = "https://example.invalid/cifar-10-python.tar.gz"

        def __init__(self, root, train=True, download=False):
            write_cifar_pickles(Path(root) / "cifar-10-batches-py")

    monkeypatch.setattr(fetch, "online", lambda url, timeout=3.0: None)
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    ds = load_dataset("cifar10", cache_dir=tmp_path / "elsewhere")
    assert ds.description["sources"]["cifar"]["found_in"] == "download"
    expected = tmp_path / "elsewhere" / "downloads" / "cifar-10-batches-py"
    assert ds.description["sources"]["cifar"]["path"] == str(expected)


def test_online_probe_reports_unreachable_hosts():
    assert "cannot reach nowhere.invalid" in REAL_ONLINE("https://nowhere.invalid/x", timeout=2)


def test_offline_download_falls_back_to_test_only_copy(tmp_path):
    write_mnist_idx(tmp_path / "data", splits=("test",))
    ds = load_dataset("mnist", data_dir=tmp_path / "data")  # download allowed, probe says offline
    assert ds.description["sources"]["mnist"]["found_in"] == "data-dir"
    assert "test set only" in ds.description["sources"]["mnist"]["split"]


def test_failed_download_is_folded_into_one_error(tmp_path, monkeypatch):
    class Broken(FakeMNIST):
        def __init__(self, root, train=True, download=False):
            raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")

    monkeypatch.setattr(fetch, "online", lambda url, timeout=3.0: None)
    monkeypatch.setattr(torchvision.datasets, "MNIST", Broken)
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("hybrid", data_dir=tmp_path / "nowhere")
    message = str(info.value)
    assert "'hybrid'" in message and "MNIST" in message
    assert "Error downloading train-images-idx3-ubyte.gz" in message
    assert str(tmp_path / "nowhere") in message and "does not exist" in message
    assert "--data-dir" in message and len(message.splitlines()) == 1
    assert "cifar-10-batches-py" in info.value.details and "train/<class>" in info.value.details  # --verbose
    assert info.value.__context__ is None and info.value.__cause__ is None  # no chained traceback
    assert isinstance(info.value, FileNotFoundError)


def test_nothing_found_offline(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("cifar5")
    message = str(info.value)
    assert "No CIFAR-10 data found for dataset 'cifar5'" in message
    assert "no data folder given" in message and "ROUTING_RL_DATA_DIR" in message
    assert "offline (test)" in message and str(tmp_path / "cache" / "downloads") in message


def test_unknown_dataset():
    with pytest.raises(ValueError, match="cifar10.*hybrid"):
        load_dataset("svhn")


# --- the cache ---------------------------------------------------------------------------


def test_second_load_comes_from_cache(tmp_path, monkeypatch):
    write_mnist_idx(tmp_path / "data")
    write_cifar_pickles(tmp_path / "data" / "cifar-10-batches-py")
    first = {name: load_dataset(name, data_dir=tmp_path / "data", download=False) for name in DATASETS}

    def no_reading(self):
        raise AssertionError("source re-read despite the cache")

    monkeypatch.setattr(sources.Candidate, "read", no_reading)
    for name in DATASETS:
        again = load_dataset(name, data_dir=tmp_path / "data", download=False)
        assert again.description == first[name].description
        for split in ("train", "test"):
            a, b = getattr(first[name], split), getattr(again, split)
            assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
            assert torch.equal(a.source, b.source)
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_changed_source_rebuilds_cache(tmp_path):
    write_mnist_idx(tmp_path / "data", gz=False)
    before = load_dataset("mnist", data_dir=tmp_path / "data", download=False)
    images = np.full((10 * MNIST_PER_CLASS["train"], 28, 28), 255, dtype=np.uint8)
    write_idx(tmp_path / "data" / "train-images-idx3-ubyte", images)
    after = load_dataset("mnist", data_dir=tmp_path / "data", download=False)
    assert not torch.equal(before.train.images, after.train.images)
    assert torch.all(after.train.images == 1.0)


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    write_cifar_pickles(tmp_path / "data" / "cifar-10-batches-py")
    first = load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    for entry in (tmp_path / "cache").glob("*.pt"):
        entry.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match=r"cache file .*\.pt cannot be read .*; rebuilding it"):
        again = load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    assert torch.equal(first.train.images, again.train.images)


def test_cache_writes_are_atomic(tmp_path, monkeypatch):
    def failing_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(cache.torch, "save", failing_save)
    with pytest.warns(UserWarning, match="disk full"):  # the cache only saves time: warned, not fatal
        cache.save_entry(tmp_path / "c" / "entry.pt", {"x": torch.zeros(1)})
    assert list((tmp_path / "c").iterdir()) == []


def test_cache_key_has_version_and_file_identity(tmp_path, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"1")
    key = {"files": cache.file_identity([f])}
    first = cache.cache_path(tmp_path, "x", key)
    monkeypatch.setattr(cache, "FORMAT_VERSION", cache.FORMAT_VERSION + 1)
    assert cache.cache_path(tmp_path, "x", key) != first
    f.write_bytes(b"22")
    assert cache.file_identity([f]) != key["files"]


def test_cached_tensors_are_private_copies(tmp_path):
    write_cifar_pickles(tmp_path / "data" / "cifar-10-batches-py")
    load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    a = load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    original = a.train.images.clone()
    a.train.images.mul_(0)  # in place on a memory-mapped cache entry
    b = load_dataset("cifar10", data_dir=tmp_path / "data", download=False)
    assert torch.equal(b.train.images, original)


# --- containers, validation split, CLI ------------------------------------------------------


def small_dataset() -> RoutingDataset:
    labels = torch.arange(10).repeat_interleave(20)
    images = torch.rand(200, 3, 32, 32)
    images[:, 0, 0, 0] = torch.arange(200)  # an id per example
    split = Split(images, labels, torch.zeros(200, dtype=torch.long))
    return RoutingDataset("t", tuple("abcdefghij"), split, split, {}, SOURCES)


def test_validation_split_is_stratified_and_deterministic():
    ds = small_dataset()
    train, val = ds.validation_split(0.1, seed=3)
    assert len(train) == 180 and len(val) == 20
    assert torch.bincount(val.labels).tolist() == [2] * 10
    again_train, again_val = ds.validation_split(0.1, seed=3)
    assert torch.equal(val.images, again_val.images) and torch.equal(train.labels, again_train.labels)
    other = ds.validation_split(0.1, seed=4)[1]
    assert not torch.equal(other.images, val.images)
    ids = torch.cat([train.images[:, 0, 0, 0], val.images[:, 0, 0, 0]]).long()
    assert sorted(ids.tolist()) == list(range(200))  # disjoint, and together everything


def test_split_basics():
    split = small_dataset().train
    assert len(split) == 200
    moved = split.to("cpu")
    assert torch.equal(moved.labels, split.labels)
    with pytest.raises(ValueError):
        Split(torch.zeros(3, 3, 32, 32), torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long))


def test_cli_json(tmp_path, capsys):
    write_mnist_idx(tmp_path / "data", splits=("test",))
    assert cli.main(["mnist", "--data-dir", str(tmp_path / "data"), "--json", "--no-download"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dataset"] == "mnist"
    assert report["splits"]["train"]["size"] == 40 and report["splits"]["test"]["size"] == 10
    assert report["splits"]["train"]["class_counts"]["3"] == 4
    assert report["splits"]["test"]["image_shape"] == [3, 32, 32]
    lo, hi = report["splits"]["train"]["value_range"]
    assert 0 <= lo <= hi <= 1
    assert "test set only" in report["sources"]["mnist"]["split"]
    assert report["load_seconds"] >= 0


def test_cli_text_and_error(tmp_path, capsys):
    write_cifar_pickles(tmp_path / "data" / "cifar-10-batches-py")
    assert cli.main(["cifar2", "--data-dir", str(tmp_path / "data"), "--no-download"]) == 0
    out = capsys.readouterr().out
    assert "horse: 3, other: 27" in out and "cifar-python-batches" in out
    assert cli.main(["mnist", "--data-dir", str(tmp_path / "data"), "--no-download"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No MNIST data found for dataset 'mnist'") and "Traceback" not in err
