"""Shared test setup.

Real-data tests read the offline bundle that sits beside the repository (``../shared/datasets``
from the repo root). When ``ROUTING_RL_DATA_DIR`` is unset and that folder exists, point the
variable there; tests that need it take the ``real_data_dir`` fixture, which skips them with a
clear reason when the folder is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"

if not os.environ.get("ROUTING_RL_DATA_DIR") and SHARED_DATASETS.is_dir():
    os.environ["ROUTING_RL_DATA_DIR"] = str(SHARED_DATASETS)


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The folder with real MNIST / CIFAR-10 files, or skip."""
    value = os.environ.get("ROUTING_RL_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip(
            f"real-data test: no data folder (set ROUTING_RL_DATA_DIR, or put the offline "
            f"bundle at {SHARED_DATASETS})"
        )
    return Path(value)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data folder holding tiny synthetic MNIST IDX files and CIFAR-10 pickles: enough for every dataset."""
    from synthetic_data import write_cifar_pickles, write_mnist_idx

    root = tmp_path_factory.mktemp("tiny-data")
    write_mnist_idx(root / "MNIST" / "raw")
    write_cifar_pickles(root / "cifar-10-batches-py")
    return root


@pytest.fixture(scope="session")
def real_cache_dir(tmp_path_factory) -> Path:
    """One cache folder for every real-data test in the session, so each source is decoded once."""
    return tmp_path_factory.mktemp("routing-rl-cache")


@pytest.fixture
def data_env(tmp_path, monkeypatch):
    """An offline machine with nothing found: an empty cache in ``tmp_path``, no data folder,
    and downloads answered "offline"; returns ``tmp_path``."""
    from routing_rl.data import fetch

    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROUTING_RL_DATA_DIR", raising=False)
    monkeypatch.setattr(fetch, "online", lambda url, timeout=3.0: "offline (test)")
    return tmp_path


@pytest.fixture(autouse=True)
def one_thread():
    """The tests run tiny nets, where a second intra-op thread only adds synchronisation,
    and on a busy machine OpenMP's spinning threads can make a step many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def sb3_scratch_logs(tmp_path_factory):
    """Tests that call SB3's ``learn`` without a logger make SB3 create ``SB3-<date>`` folders
    in the system's temp folder; point them into pytest's own temp tree instead."""
    previous = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))
    yield
    if previous is None:
        os.environ.pop("SB3_LOGDIR")
    else:
        os.environ["SB3_LOGDIR"] = previous
