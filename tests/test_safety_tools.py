"""Issue 25 outside the run folders: figures and latency reports never mix tasks, their bad
inputs are one line; the envs answer API misuse with Gymnasium's errors; damaged data, a
data folder that is a file and an unusable cache are one line each (tiny synthetic data)."""

from __future__ import annotations

import csv
import errno
import io
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from synthetic_data import tar_folder, write_cifar_pickles, write_image_folder, write_mnist_idx

import routing_rl  # noqa: F401  (registers the ids)
from routing_rl.app import figures, latency
from routing_rl.app.cli import main as train_main
from routing_rl.data import SOURCES, RoutingDataset, Split, cache, load_dataset
from routing_rl.envs import RoutingSB3VecEnv

ENV_ID = "routing_rl/HybridRouting-v0"
REPO = Path(__file__).resolve().parents[1]


# --- figures and latency reports: one task per figure --------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Finished smoke runs: a static net and an actor on hybrid, an actor on MNIST."""
    root = tmp_path_factory.mktemp("tool-runs")
    write_mnist_idx(root / "data" / "MNIST" / "raw")
    write_cifar_pickles(root / "data" / "cifar-10-batches-py")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(root / "cache"))
        for name, extra in (("static", ["--agent", "static", "--arch", "static-1"]), ("actor", ["--agent", "actor"]),
                            ("actor-mnist", ["--agent", "actor", "--dataset", "mnist"])):
            assert train_main(["--preset", "smoke", "--iterations", "2", "--eval-every", "2", "--checkpoint-every", "2",
                               "--data-dir", str(root / "data"), "--download", "false", "--validation-fraction", "0.4",
                               "--logdir", str(root), "--run-name", name, "--json", *extra]) == 0
    return root


def test_figures_split_runs_of_two_datasets_into_one_folder_each(runs, tmp_path, capsys):
    out = tmp_path / "figures"
    figures.write_figures([runs / "static", runs / "actor", runs / "actor-mnist"], out)
    assert sorted(p.name for p in out.iterdir()) == ["hybrid", "mnist"], "one folder per task, nothing mixed above them"
    hybrid = (out / "hybrid" / "accuracy_macs.csv").read_text()
    assert "actor-mnist" not in hybrid and str(runs / "static") in hybrid
    mnist_report = (out / "mnist" / "report.md").read_text()
    assert mnist_report.startswith(f"Task: {ENV_ID} on mnist")
    assert "Best static net" not in mnist_report, "the MNIST actor is never judged against the hybrid static nets"
    assert "| static nets |" not in mnist_report
    assert (out / "hybrid" / "report.md").read_text().startswith(f"Task: {ENV_ID} on hybrid")


def test_runs_of_one_task_found_in_different_folders_stay_together(runs):
    static, actor = (json.loads((runs / name / "metrics.json").read_text()) for name in ("static", "actor"))
    actor["dataset"]["sources"]["mnist"]["path"] = "/elsewhere/MNIST/raw"  # the same data copied elsewhere
    assert list(figures.by_task([static, actor])) == ["hybrid"]
    actor["dataset"]["sizes"]["test"] += 1  # another test set: another task
    assert list(figures.by_task([static, actor])) == ["hybrid", "hybrid-2"]


@pytest.mark.parametrize("content, message", [
    ("{}", "lacks run, agent, arch, k_cpt, test, structure, history"),
    ("[]", "holds a JSON list, not a run's metrics object"),
    ('{"run": ', "cannot be read as JSON"),
])
def test_figures_name_a_metrics_file_that_holds_no_run(content, message, runs, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metrics.json").write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        figures.main([str(runs / "static"), str(broken), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"{broken / 'metrics.json'} {message}" in err
    assert not (tmp_path / "out").exists(), "nothing is written before every run is read"


@pytest.mark.parametrize("out", ["afile", "afile/below"])
def test_figures_refuse_an_out_folder_that_is_a_file(out, runs, tmp_path, capsys):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        figures.main([str(runs / "static"), "--out", str(tmp_path / out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "is a file, not a folder; choose another --out" in err
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.slow  # a fresh interpreter imports torch and SB3
def test_a_sweep_refuses_a_figures_folder_that_is_a_file_before_training(tmp_path):
    (tmp_path / "afile").write_text("mine")
    result = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), "--agents", "actor", "--k-cpts", "0",
                             "--figures", str(tmp_path / "afile"), "--logdir", str(tmp_path / "runs")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.strip().endswith(f"--figures {tmp_path / 'afile'} is a file, not a folder; choose another --figures")
    assert not (tmp_path / "runs").exists()


def test_a_latency_point_is_matched_only_within_its_task():
    def point(task, cost, accuracy, seconds):
        return {"task": task, "cost": cost, "batch_size": 1, "accuracy": accuracy, "seconds_per_image": seconds}

    points = [point("mnist", "latency", 0.90, 1e-3), point("hybrid", "macs", 0.90, 5e-4), point("mnist", "macs", 0.901, 2e-3)]
    found = latency.matches(points)
    assert len(found) == 1 and found[0]["macs"]["task"] == "mnist" and found[0]["time_ratio"] == pytest.approx(0.5)
    assert latency.matches(points[:2]) == [], "the hybrid point is not the MNIST point's rival"


def test_the_latency_report_writes_one_folder_per_task(runs, tmp_path, capsys):
    out = tmp_path / "latency"
    assert latency.report_main([str(runs / "actor"), str(runs / "actor-mnist"), "--batch-sizes", "2", "--examples", "4",
                                "--repeats", "1", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["hybrid", "mnist"]
    for task, run in (("mnist", "actor-mnist"), ("hybrid", "actor")):
        rows = list(csv.DictReader(io.StringIO((out / task / "latency.csv").read_text())))
        assert [(row["run"], row["task"]) for row in rows] == [(str(runs / run), task)]


@pytest.mark.parametrize("flags, message", [
    (["--batch-sizes", "0"], "argument --batch-sizes: expected a positive integer, got '0'"),
    (["--batch-sizes", "64", "-1"], "argument --batch-sizes: expected a positive integer, got '-1'"),
    (["--repeats", "0"], "argument --repeats: expected a positive integer, got '0'"),
    (["--examples", "-1"], "argument --examples: expected a positive integer, got '-1'"),
    (["--examples", "0"], "argument --examples: expected a positive integer, got '0'"),
])
def test_the_latency_report_refuses_counts_below_one(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        latency.report_main([str(tmp_path), *flags, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.strip().splitlines() == [f"latency_report.py: error: {message}"]


# --- envs: Gymnasium's own errors ------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset():
    generator = torch.Generator().manual_seed(0)
    split = Split(torch.rand(12, 3, 32, 32, generator=generator), torch.randint(3, (12,), generator=generator),
                  torch.randint(2, (12,), generator=generator))
    return RoutingDataset("tiny", ("a", "b", "c"), split, split, {}, SOURCES)


MAKERS = {
    "gym.make": lambda **kw: gym.make(ENV_ID, **kw),
    "gym.make_vec": lambda **kw: gym.make_vec(ENV_ID, num_envs=3, **kw),
    "RoutingSB3VecEnv": lambda **kw: RoutingSB3VecEnv(3, **kw),
}


@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize("mode", ["human", "rgb_array"])
@pytest.mark.filterwarnings("ignore:.*not in the possible render_modes")  # gym.make's own warning comes first
def test_an_unsupported_render_mode_is_gymnasiums_unsupported_mode(maker, mode, dataset):
    with pytest.raises(gym.error.UnsupportedMode, match=f"render_mode='{mode}'"):
        MAKERS[maker](dataset=dataset, render_mode=mode)
    assert MAKERS[maker](dataset=dataset, render_mode=None, train=False).render_mode is None


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_a_device_this_machine_lacks_is_refused_before_anything_is_built(maker, dataset, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device 'cuda' asked for, but CUDA is not available here; use --device=cpu or auto"):
        MAKERS[maker](dataset=dataset, device="cuda")
    with pytest.raises(ValueError, match="unknown device 'tpu'; use auto, cpu, cuda or cuda:N"):
        MAKERS[maker](dataset=dataset, device="tpu")
    assert MAKERS[maker](dataset=dataset, device="auto", train=False).unwrapped.net.leaf_macs.device.type == "cpu"


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_stepping_before_reset_raises_reset_needed(maker, dataset):
    env = MAKERS[maker](dataset=dataset, train=False).unwrapped  # below gym.make's own order check
    action = 0 if maker == "gym.make" else np.zeros(3, dtype=np.int64)
    with pytest.raises(gym.error.ResetNeeded, match=r"step\(\) before calling reset\(\)"):
        env.step(action)
    env.reset()
    assert np.all(np.asarray(env.step(action)[1]) < 0), "after reset a step is charged its MACs"


# --- data: one line per damaged copy -------------------------------------------------------


def truncated_gz(data):
    write_mnist_idx(data)
    path = data / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "mnist", path, "is cut short (Compressed file ended before the end-of-stream marker was reached)"


def crc_failure(data):
    write_mnist_idx(data)
    path = data / "train-labels-idx1-ubyte.gz"
    blob = bytearray(path.read_bytes())
    blob[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    path.write_bytes(bytes(blob))
    return "mnist", path, "is damaged (CRC check failed"


def cut_tar(data):
    write_image_folder(data.parent / "folder", "cifar")
    path = data / "cifar.tar.gz"
    data.mkdir()
    tar_folder(data.parent / "folder", path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    return "cifar10", path, "is cut short"


def undecodable_jpeg(data):
    write_image_folder(data, "cifar")
    first = sorted((data / "train" / "cat").iterdir())[0]
    first.unlink()
    path = first.with_suffix(".jpg")
    path.write_bytes(b"\xff\xd8\xff\xe0 only the start of a JPEG")
    return "cifar10", path, "cannot be decoded as an image"


def cli(data_env, dataset, data_dir, *extra):
    return ["--preset", "smoke", "--iterations", "2", "--dataset", dataset, "--data-dir", str(data_dir),
            "--download", "false", "--logdir", str(data_env / "runs"), *extra]


@pytest.mark.parametrize("damage", [truncated_gz, crc_failure, cut_tar, undecodable_jpeg])
def test_a_damaged_copy_is_one_line_naming_the_file_and_the_fix(damage, data_env, capsys):
    dataset, path, problem = damage(data_env / "data")
    with pytest.raises(SystemExit) as exit_info:
        train_main(cli(data_env, dataset, data_env / "data"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path} {problem}" in err and err.strip().endswith("copy or download that file again")
    with pytest.raises(SystemExit):
        train_main(cli(data_env, dataset, data_env / "data", "--verbose"))
    details = capsys.readouterr().err
    assert "Looked in:" in details and "Accepted layouts:" in details and f"unreadable: {path}" in details
    assert not (data_env / "runs").exists()


def test_a_data_dir_that_is_a_file_is_called_a_file(data_env, capsys):
    passwd = data_env / "passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\n")
    with pytest.raises(SystemExit) as exit_info:
        train_main(cli(data_env, "mnist", passwd))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"data folder {passwd} is a file, not a folder" in err and "does not exist" not in err


def test_a_cache_that_is_a_file_is_one_line(data_env, monkeypatch, capsys):
    write_mnist_idx(data_env / "data")
    (data_env / "cache-file").write_text("not a folder")
    monkeypatch.setenv("ROUTING_RL_CACHE", str(data_env / "cache-file"))
    with pytest.raises(SystemExit) as exit_info:
        train_main(cli(data_env, "mnist", data_env / "data"))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"$ROUTING_RL_CACHE: {data_env / 'cache-file'} is a file, not a folder" in err
    assert (data_env / "cache-file").read_text() == "not a folder"


def test_a_read_only_cache_is_warned_about_once_and_the_data_used_from_memory(data_env, monkeypatch):
    write_mnist_idx(data_env / "data")
    expected = load_dataset("mnist", data_dir=data_env / "data", download=False, cache_dir=data_env / "writable")

    def read_only(path, write):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(cache, "atomic_write", read_only)
    with pytest.warns(UserWarning, match=r"cannot write into the cache folder .* \(Read-only file system\); going on "
                                         r"without a cache") as warned:
        got = load_dataset("mnist", data_dir=data_env / "data", download=False)
    assert len(warned) == 1, "one warning, though two entries (the source, the dataset) were not saved"
    assert torch.equal(got.train.images, expected.train.images) and torch.equal(got.test.labels, expected.test.labels)
    assert not (data_env / "cache").exists()


def test_a_full_disk_inside_torch_save_is_also_only_a_warning(tmp_path, monkeypatch):
    def full(obj, stream):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] . unexpected pos 704 vs 598")  # as torch.save does

    monkeypatch.setattr(cache.torch, "save", full)
    with pytest.warns(UserWarning, match=r"\(No space left on device\)"):
        cache.save_entry(tmp_path / "c" / "entry.pt", {"x": torch.zeros(1)})
    assert list((tmp_path / "c").iterdir()) == []


def test_an_unrelated_error_while_saving_is_not_swallowed(tmp_path, monkeypatch):
    monkeypatch.setattr(cache.torch, "save", lambda obj, stream: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        cache.save_entry(tmp_path / "c" / "entry.pt", {"x": torch.zeros(1)})
