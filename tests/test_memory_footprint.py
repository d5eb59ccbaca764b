"""What keeps a run's memory small: no torchvision import unless a download is tried, rows of
memory-mapped datasets copied without keeping the file resident, clips rendered a slice of
frames at a time, and (slow) smoke runs under a ceiling of peak resident memory."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from routing_rl.data import Split, fetch, mapped
from routing_rl.data.mapped import take_rows

REPO = Path(__file__).resolve().parents[1]
LINUX = platform.system() == "Linux"


def test_download_urls_are_torchvisions():
    import torchvision.datasets

    assert fetch.DOWNLOAD_URLS == {"mnist": torchvision.datasets.MNIST.mirrors[0],
                                   "cifar": torchvision.datasets.CIFAR10.url}


def test_offline_dataset_search_does_not_import_torchvision(tmp_path):
    script = (
        "import sys\n"
        "import routing_rl.app.runs\n"
        "from routing_rl.data import fetch\n"
        "fetch.online = lambda url, timeout=3.0: 'offline (test)'\n"
        f"assert fetch.fetch('mnist', __import__('pathlib').Path({str(tmp_path)!r})) == 'offline (test)'\n"
        "assert 'torchvision' not in sys.modules, 'torchvision imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def mapping_rss_kb(tensor: torch.Tensor) -> int:
    """Resident KiB of the process's mapping that holds ``tensor``."""
    address, rss, inside = tensor.data_ptr(), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and ":" in head[3]:
                low, high = (int(x, 16) for x in head[0].split("-"))
                inside = low <= address < high
            elif inside and head[0] == "Rss:":
                rss = int(head[1])
    return rss


def mapped_file(tmp_path, rows: int = 600) -> torch.Tensor:
    """A ``(rows, 3, 32, 32)`` float tensor saved and memory-mapped back, as the dataset cache does."""
    values = torch.rand(rows, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.save({"images": values}, tmp_path / "entry.pt")
    loaded = torch.load(tmp_path / "entry.pt", weights_only=True, mmap=True)["images"]
    assert torch.equal(loaded, values)
    return loaded


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/smaps")
def test_rows_of_a_mapped_file_are_copied_and_its_pages_unmapped(tmp_path):
    images = mapped_file(tmp_path)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(1))
    reference = images.clone()  # touches every page: the whole file is resident now
    assert mapping_rss_kb(images) >= images.nbytes // 1024
    rows = take_rows(images, order[:100])
    assert torch.equal(rows, reference[order[:100]]) and rows.data_ptr() != images.data_ptr()
    assert mapping_rss_kb(images) < images.nbytes // 1024 // 4  # at most the last few rows' pages stay
    assert torch.equal(images, reference)  # read back from the file unchanged


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/smaps")
def test_a_written_mapping_is_never_released(tmp_path):
    images = mapped_file(tmp_path)
    images[5] = -1.0  # copy-on-write: these pages now exist only in this process
    assert mapped.clean_file_mapping(images.data_ptr(), images.data_ptr() + images.nbytes) is None
    rows = take_rows(images, torch.arange(0, 600, 5))
    assert bool((rows[1] == -1).all()) and bool((images[5] == -1).all())


def test_other_tensors_are_indexed_as_they_are():
    values = torch.rand(40, 3, 4, 4)
    indices = torch.tensor([39, 0, 7, 7, 12] * 5)
    assert torch.equal(take_rows(values, indices), values.index_select(0, indices))
    strided = values.transpose(2, 3)
    assert torch.equal(take_rows(strided, indices), strided.index_select(0, indices))
    assert take_rows(values, torch.tensor([], dtype=torch.long)).shape == (0, 3, 4, 4)
    split = Split(values, torch.arange(40) % 3, torch.zeros(40, dtype=torch.long))
    assert torch.equal(split.subset(indices).images, values[indices])


def test_clips_do_not_depend_on_the_frames_rendered_together(monkeypatch):
    from routing_rl.data import video
    from tests.test_data_video import solid_split

    split = solid_split(30)
    whole = video.make_clips(split, 5, seed=4)
    monkeypatch.setattr(video, "FRAME_SLICE", 7)
    sliced = video.make_clips(split, 5, seed=4)
    assert torch.equal(whole.frames, sliced.frames) and torch.equal(whole.labels, sliced.labels)


GIB = 2**30
# About 0.75 GiB of each peak is torch's CUDA build, whatever the run: ``import torch`` (0.5 GiB),
# ``torch._dynamo`` that torch.optim imports at the first optimiser (0.15 GiB), the CUDA
# libraries' code paged in by their destructors at exit (0.13 GiB): docs/memory.md.


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="ru_maxrss of a child process, in KiB on Linux")
@pytest.mark.parametrize("agent, env, extra, ceiling", [
    ("critic", "routing_rl/HybridRouting-v0", [], GIB),  # measured 0.86 GiB
    ("dqn", "routing_rl/HybridRouting-v0", [], GIB),  # 0.94 GiB (1.11 before)
    ("critic", "routing_rl/VideoRouting-v0", [], GIB),  # 0.92 GiB: the full tree, the default
    # sampled decisions recompute batch-norm statistics on 4,096 frames at batch 512: 1.30-1.39 GiB (1.55)
    ("critic", "routing_rl/VideoRouting-v0", ["--execution", "sampled"], 1.5 * GIB),
])
def test_smoke_runs_stay_under_the_memory_ceiling(agent, env, extra, ceiling, real_data_dir, tmp_path):
    command = [sys.executable, str(REPO / "experiments" / "train_agent.py"), "--agent", agent, "--env", env,
               "--preset", "smoke", "--logdir", str(tmp_path), "--run-name", "smoke", *extra]
    if agent == "critic":
        command += ["--policy", "eps-greedy"]
    # a fresh launcher, so that its children's ru_maxrss is this run's alone
    launcher = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", launcher, *command], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "ROUTING_RL_DATA_DIR": str(real_data_dir)})
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.strip().splitlines()[-1]) * 1024
    assert peak < ceiling, f"{agent} on {env}: peak resident memory {peak / GIB:.2f} GiB"
