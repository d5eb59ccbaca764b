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


# --- the tools' own flags: one line, exit status 2, before any work (issue 48) ----------------


def one_line_exit(run, capsys) -> str:
    """``run()`` exits with status 2 and one line on stderr: that line."""
    with pytest.raises(SystemExit) as exit_info:
        run()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1, err
    return err[0]


def suite_args(tmp_path, *extra):
    """A suite command that would fail on its missing data if it started training."""
    (tmp_path / "no-data").mkdir(exist_ok=True)
    return ["--agent", "actor", "--tasks", "hybrid", "--preset", "smoke", "--workers", "0", "--download", "false",
            "--data-dir", str(tmp_path / "no-data"), "--logdir", str(tmp_path / "runs"), *extra]


@pytest.mark.parametrize("pair, flag", [
    ("seed=1", "--seeds"), ("k_cpt=1e-9", "--k-cpts"), ("agent=critic", "--agent"), ("preset=quick", "--preset"),
    ("logdir=elsewhere", "--logdir"), ("static_lr=0.1", "--static-lr"), ("device=cpu", "--device"),
    ("lr=abc", "--static-lr (static nets and threshold) or --learner-set lr=VALUE (learners)"),
    ("validation_fraction=0.2", "--validation-fraction"),
])
def test_suite_set_refuses_a_field_the_suite_sets_and_names_its_flag(pair, flag, tmp_path, capsys):
    from routing_rl.app import suite

    assert suite.main(suite_args(tmp_path, "--set", pair)) == 2
    field = pair.split("=")[0]
    assert capsys.readouterr().err.strip() == f"suite.py: error: --set {field}: the suite sets it from {flag}; give it there"
    assert not (tmp_path / "runs").exists()


def test_suite_set_refuses_run_names(tmp_path, capsys):
    from routing_rl.app import suite

    assert suite.main(suite_args(tmp_path, "--set", "run_name=mine")) == 2
    assert capsys.readouterr().err.strip() == "suite.py: error: --set run_name: the suite names every run itself; drop it"


@pytest.mark.parametrize("where, message", [
    ("folder", "is a folder, not a file; choose another --json"),
    ("afile/suite.json", "lies under"),
])
def test_suite_checks_its_json_path_before_training(where, message, tmp_path, capsys):
    from routing_rl.app import suite

    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("mine")
    assert suite.main(suite_args(tmp_path, "--json", str(tmp_path / where))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--json {tmp_path / where} {message}" in err[0]
    assert not (tmp_path / "runs").exists() and (tmp_path / "afile").read_text() == "mine"


def test_suite_checks_the_learners_settings_before_the_static_nets_train(tmp_path, capsys):
    from routing_rl.app import suite

    assert suite.main(suite_args(tmp_path, "--learner-set", "lr=abc")) == 2
    assert capsys.readouterr().err.strip() == "suite.py: error: lr must be a number or null, got 'abc'"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("fraction", ["nan", "1", "inf"])
def test_a_validation_fraction_out_of_range_is_named(fraction, tmp_path, capsys):
    err = one_line_exit(lambda: train_main(["--preset", "smoke", "--validation-fraction", fraction,
                                            "--logdir", str(tmp_path)]), capsys)
    assert err == f"train_agent.py: error: validation_fraction must be in (0, 1), got {float(fraction)}"


@pytest.fixture(scope="module")
def experiments():
    sys.path.insert(0, str(REPO / "experiments"))
    import reward_scale
    import rl_benchmark

    yield {"rl_benchmark": rl_benchmark, "reward_scale": reward_scale}
    sys.path.remove(str(REPO / "experiments"))


@pytest.mark.parametrize("flags, message", [
    (["--episodes", "0"], "argument --episodes: expected a positive integer, got '0'"),
    (["--n-timesteps", "0"], "argument --n-timesteps: expected a positive integer, got '0'"),
    (["--seeds", "0", "4294967295"], "argument --seeds: expected an integer in 0 ... 4294967294, got '4294967295'"),
])
def test_the_rl_benchmark_refuses_empty_budgets_before_training(flags, message, experiments, capsys, monkeypatch):
    monkeypatch.setattr(experiments["rl_benchmark"], "benchmark", lambda *a, **k: pytest.fail("trained"))
    assert one_line_exit(lambda: experiments["rl_benchmark"].main(flags), capsys) == f"rl_benchmark.py: error: {message}"


def test_reward_scale_refuses_zero_steps_and_ends_an_episode_for_a_few(experiments, tiny_data, tmp_path, capsys,
                                                                     monkeypatch):
    main = experiments["reward_scale"].main
    assert one_line_exit(lambda: main([ENV_ID, "--steps", "0"]), capsys) == (
        "reward_scale.py: error: argument --steps: expected a positive integer, got '0'")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    main([ENV_ID, "--steps", "3", "--env-kwargs", json.dumps({"data_dir": str(tiny_data), "download": False})])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 6 and all(r["episodes"] >= 1 for r in records)  # the deepest exit takes 7 steps
    deepest = [r for r in records if r["policy"] == "deepest"]
    assert all(r["episodes"] == 1 and r["c_err_quantiles"]["1.0"] >= 0 for r in deepest)


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "99999999", "--out", "{tmp}/p.json"], "--batch-size 99999999 needs about"),
    (["--out", "{tmp}/afile/p.json"], "--out {tmp}/afile/p.json lies under {tmp}/afile, which is a file"),
    (["--out", "{tmp}"], "--out {tmp} is a folder, not a file; choose another --out"),
])
def test_profile_latency_refuses_what_it_cannot_time_or_write_before_timing(flags, message, tmp_path, capsys,
                                                                            monkeypatch):
    from routing_rl.training import footprint

    (tmp_path / "afile").write_text("mine")
    monkeypatch.setattr(footprint, "available_bytes", lambda device: 8 * 2**30)  # this machine's free memory aside
    monkeypatch.setattr(latency, "profile_latency", lambda *a, **k: pytest.fail("timed"))
    err = one_line_exit(lambda: latency.profile_main([f.format(tmp=tmp_path) for f in flags]), capsys)
    assert err.startswith("profile_latency.py: error: ") and message.format(tmp=tmp_path) in err
    assert (tmp_path / "afile").read_text() == "mine" and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("pair, message", [
    ("seed=1", "the reproduction sets it from --seeds; give it there"),
    ("agent=critic", "the reproduction sets it from --figure; give it there"),
    ("static_lr=0.1", "the reproduction sets it from --static-lr; give it there"),
    ("run_name=mine", "the reproduction names every run itself; drop it"),
])
def test_reproduce_set_refuses_a_field_it_sets_itself(pair, message, tmp_path, capsys):
    from routing_rl.app import reproduce

    assert reproduce.main(["--figure", "hybrid", "--dry-run", "--logdir", str(tmp_path / "runs"), "--set", pair]) == 2
    assert capsys.readouterr().err.strip() == f"reproduce_paper.py: error: --set {pair.split('=')[0]}: {message}"
