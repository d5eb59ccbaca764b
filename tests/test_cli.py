"""experiments/train_agent.py end to end: every agent on tiny synthetic data, the run
directory, resume, TensorBoard tags, user mistakes, and the figure scripts."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.app import runs
from routing_rl.app.cli import main
from routing_rl.training import acceleration
from routing_rl.training.config import AGENTS
from routing_rl.app.figures import write_figures
from routing_rl.app.sweep import run_sweep, sweep_configs

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "train_agent.py"


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "cli-cache"))


def smoke_args(tiny_data, logdir, agent, *extra):
    return ["--agent", agent, "--preset", "smoke", "--iterations", "4", "--eval-every", "2", "--checkpoint-every", "2",
            "--data-dir", str(tiny_data), "--download", "false", "--validation-fraction", "0.4", "--logdir", str(logdir), "--run-name", agent, *extra]


def tags(run_dir: Path) -> set[str]:
    found = set()
    for events in run_dir.glob("**/events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0, "histograms": 0})
        accumulator.Reload()
        found |= set(accumulator.Tags()["scalars"]) | set(accumulator.Tags()["images"]) | set(accumulator.Tags()["histograms"])
    return found


AGENT_ARGS = {
    "static": ["--arch", "static-2"],
    "actor": [],
    "pragmatic-critic": ["--policy", "eps-greedy"],
    "optimistic-critic": [],
    "threshold": [],
    "dqn": ["--policy", "eps-greedy"],
    "ppo": [],
    "a2c": [],
}


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_trains_end_to_end(agent, tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, agent, *AGENT_ARGS[agent], "--json")) == 0
    printed = json.loads(capsys.readouterr().out)
    run_dir = tmp_path / agent
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert printed["test_accuracy"] == metrics["test_accuracy"]
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_mean_macs"] > 0
    assert json.loads((run_dir / "config.json").read_text())["agent"] == agent
    assert metrics["dataset"] and metrics["structure"]["nodes"]
    leaves = metrics["test"][0]["leaves"]
    assert sum(leaf["fraction"] for leaf in leaves.values()) == pytest.approx(1.0)
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert any(run_dir.glob("checkpoint*")), "a checkpoint is written at the end"
    assert "charts/val_accuracy" in tags(run_dir) or agent in ("dqn", "ppo", "a2c")
    if agent == "threshold":
        *budgets, fitted = metrics["test"]
        assert len(budgets) == 3 and [b["budget"] for b in budgets] == sorted(b["budget"] for b in budgets)
        assert all(entry["label"].startswith("budget") for entry in budgets)
        assert fitted["label"].startswith("fitted to the validation cost at k_cpt")


def test_tensorboard_has_the_main_tags(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "actor")) == 0
    found = tags(tmp_path / "actor")
    for tag in ("losses/total", "losses/c_err", "losses/c_cpt", "charts/lr", "charts/tau", "charts/val_accuracy",
                "charts/val_mean_macs", "charts/examples_per_second", "routing/val_fraction/exit1"):
        assert tag in found, f"{tag} missing from {sorted(found)}"
    assert any(tag.startswith("figures/node_link") for tag in found)
    assert "routing/scores/col1" in found


def test_sweep_skips_finished_runs_and_resumes_interrupted_ones(tiny_data, cache, tmp_path):
    overrides = dict(iterations=2, eval_every=1, checkpoint_every=1, data_dir=str(tiny_data), download=False,
                     validation_fraction=0.4, logdir=str(tmp_path))
    configs = sweep_configs(["actor"], [0.0, 4e-9], static_columns=[1], preset="smoke", **overrides)
    assert [c.run_name for c in configs] == ["static-static-1-k4e-09-s0", "actor-chain-k0-s0", "actor-chain-k4e-09-s0"]
    log = []
    run_dirs = run_sweep(configs, log.append)
    assert all((d / "metrics.json").is_file() for d in run_dirs)
    (run_dirs[1] / "metrics.json").unlink()
    log.clear()
    run_sweep(configs, log.append)
    states = sorted(line.split(": ")[:2] for line in log if line.startswith("["))  # finished runs are named first
    assert [state for _, state in states] == ["complete, skipped", "resuming", "complete, skipped"]


def test_sweep_gives_static_nets_their_own_learning_rate():
    configs = sweep_configs(["actor"], [4e-9], static_columns=[2, 8], preset="smoke", static_lr=0.02)
    assert {c.run_name: c.options.lr for c in configs} == {"static-static-2-k4e-09-s0": 0.02, "static-static-8-k4e-09-s0": 0.02,
                                                   "actor-chain-k4e-09-s0": 0.1}


def test_dynamic_k_cpt_run_reports_every_k_cpt(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "actor", "--k-cpt", "dynamic")) == 0
    metrics = json.loads((tmp_path / "actor" / "metrics.json").read_text())
    assert [entry["k_cpt"] for entry in metrics["test"]] == [0.0, 1e-9, 2e-9, 4e-9, 8e-9, 1.6e-8, 3.2e-8, 6.4e-8]


def test_a_latency_cost_run_records_its_profile(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "actor", "--cost", "latency", "--latency-batch", "4")) == 0
    run_dir = tmp_path / "actor"
    saved = json.loads((run_dir / "cost.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["cost"] == saved and saved["unit"] == "MAC-equivalents"
    assert saved["profile"]["batch_size"] == 4
    assert set(saved["node_cost"]) == {node["name"] for node in metrics["structure"]["nodes"]}


def test_latency_report_compares_mac_and_latency_cost_runs(tiny_data, cache, tmp_path, capsys):
    from routing_rl.app.latency import profile_main, report_main

    profile = tmp_path / "profile.json"
    assert profile_main(["--arch", "chain", "--batch-size", "2", "--repeats", "1", "--out", str(profile)]) == 0
    assert main(smoke_args(tiny_data, tmp_path, "actor", "--run-name", "macs")) == 0
    assert main(smoke_args(tiny_data, tmp_path, "actor", "--run-name", "latency", "--cost", "latency",
                           "--latency-profile", str(profile))) == 0
    recorded = json.loads((tmp_path / "latency" / "cost.json").read_text())["profile"]
    assert recorded == json.loads(profile.read_text())["profile"], "the run charges the given profile"
    out = tmp_path / "report"
    runs_ = [str(tmp_path / "macs"), str(tmp_path / "latency")]
    assert report_main([*runs_, "--batch-sizes", "1", "4", "--examples", "6", "--repeats", "1", "--out", str(out)]) == 0
    rows = (out / "latency.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 and "seconds_per_image" in rows[0]
    points = list(csv.DictReader(io.StringIO((out / "latency.csv").read_text())))
    # on a chain MACs and measured time both grow with depth: the same oracle routing
    assert {p["oracle_same_as_macs"] for p in points} == {"True"}
    assert all(float(p["oracle_seconds_per_image"]) > 0 and 0 <= float(p["oracle_accuracy"]) <= 1 for p in points)
    assert (out / "accuracy_time_b1.png").stat().st_size > 0 and (out / "accuracy_time_b4.png").is_file()
    assert "| latency | 4e-09 | 4 |" in (out / "latency.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(smoke_args(tiny_data, tmp_path, "actor", "--run-name", "bad", "--cost", "latency",
                        "--latency-profile", str(tmp_path / "missing.json")))
    assert exit_info.value.code == 2 and "cannot read the latency profile" in capsys.readouterr().err


def test_an_interrupted_run_resumes(tiny_data, cache, tmp_path, capsys, monkeypatch):
    from routing_rl.agents.actor import ActorLearner

    original = ActorLearner.train_step

    def interrupted(self, batch, iteration):
        if iteration == 3:
            raise KeyboardInterrupt
        return original(self, batch, iteration)

    monkeypatch.setattr(ActorLearner, "train_step", interrupted)
    assert main(smoke_args(tiny_data, tmp_path, "actor")) == 130
    run_dir = tmp_path / "actor"
    assert not (run_dir / "metrics.json").exists()
    monkeypatch.setattr(ActorLearner, "train_step", original)
    with pytest.raises(SystemExit) as stop:
        main(["--resume", str(run_dir), "--lr", "0.5"])
    assert stop.value.code == 2
    assert "only device, data_dir, download, channels_last, compile, cuda_graphs may change, not lr" in capsys.readouterr().err
    assert main(["--resume", str(run_dir), "--device", "cpu"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [entry["iteration"] for entry in metrics["history"]] == [2, 4]


def test_existing_run_is_never_overwritten_silently(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "static", "--arch", "static-1")) == 0
    with pytest.raises(SystemExit) as stop:
        main(smoke_args(tiny_data, tmp_path, "static", "--arch", "static-1"))
    assert stop.value.code == 2
    assert "already exists" in capsys.readouterr().err
    assert main(smoke_args(tiny_data, tmp_path, "static", "--arch", "static-1", "--overwrite")) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--agent", "sarsa"], "unknown agent 'sarsa'"),
        (["--env", "routing_rl/Nowhere-v0"], "unknown env 'routing_rl/Nowhere-v0'"),
        (["--env", "no_such_module:plugins/Task-v0"], "cannot import 'no_such_module'"),
        (["--dataset", "fashion-mnist"], "unknown dataset 'fashion-mnist'"),
        (["--arch", "resnet"], "unknown arch 'resnet'"),
        (["--agent", "actor", "--policy", "eps-greedy"], "agent 'actor' can only use softmax"),
        (["--agent", "static", "--policy", "softmax"], "has no training routing policy"),
        (["--k-cpt=-1e-9"], "k_cpt must be a finite number >= 0"),
        (["--k-cpt", "lots"], "k_cpt must be a number >= 0 (cost per MAC, e.g. 4e-9) or 'dynamic'"),
        (["--iterations", "0"], "expected a positive integer, got '0'"),
        (["--iterations", "many"], "expected a positive integer, got 'many'"),
        (["--batch-size", "-5"], "expected a positive integer, got '-5'"),
        (["--seed", "-1"], "expected an integer >= 0, got '-1'"),
        (["--resume", "/nonexistent/run"], "is not a run directory"),
        (["--k-cpt", "1e30"], "k_cpt must be at most 1 per MAC"),
        (["--lr", "inf"], "lr must be a finite number > 0, got inf"),
        (["--k-dec", "nan"], "k_dec must be a finite number >= 0, got nan"),
        (["--momentum", "-1"], "momentum must be in [0, 1), got -1"),
        (["--tau", "0"], "tau must be a finite number > 0, got 0"),
        (["--probability-floor", "2"], "probability_floor must be in (0, 1)"),
        (["--run-name", ".."], "run_name must be one folder name"),
    ],
)
def test_user_mistakes_end_with_one_line_and_status_2(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*args, "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_script_ends_a_mistake_with_one_line_and_status_2(tmp_path):
    # the cases above call main(); this one runs the script as a user does, imports and all
    result = subprocess.run([sys.executable, str(SCRIPT), "--agent", "sarsa", "--logdir", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "unknown agent 'sarsa'" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_seed_zero_is_a_valid_seed():
    from routing_rl.app.cli import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args(["--seed", "0", "--preset", "smoke"]))
    assert config.seed == 0


def test_figures_from_smoke_runs(tiny_data, cache, tmp_path, capsys):
    for agent, extra in (("static", ["--arch", "static-1"]), ("static2", ["--arch", "static-2"]), ("actor", [])):
        assert main(smoke_args(tiny_data, tmp_path, "static" if agent.startswith("static") else agent, *extra)[:-2]
                    + ["--run-name", agent]) == 0
    written = write_figures([tmp_path / name for name in ("static", "static2", "actor")], tmp_path / "figures")
    names = {path.name for path in written}
    assert {"accuracy_macs.png", "accuracy_macs.csv", "node_link.png", "routing_heatmap.png"} <= names
    rows = (tmp_path / "figures" / "accuracy_macs.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 and rows[0].startswith("series")
    with pytest.raises(ValueError, match="have not finished"):
        write_figures([tmp_path / "nothing-here"], tmp_path / "figures")


def test_run_directory_names_a_missing_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(runs.TrainConfig().to_json())
    with pytest.raises(runs.RunError, match="no checkpoint.pt to resume from"):
        runs.train(resume=tmp_path)


def test_an_sb3_run_resumes_from_its_newest_zip(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "a2c")) == 0
    run_dir = tmp_path / "a2c"
    (run_dir / "metrics.json").unlink()
    assert main(["--resume", str(run_dir)]) == 0
    assert (run_dir / "metrics.json").is_file()


def test_configs_written_before_the_sb3_flags_still_read():
    from routing_rl.training.config import TrainConfig, make_config

    old = json.loads(make_config("smoke").to_json())
    assert TrainConfig.from_json(json.dumps({**old, "extra": {}})) == TrainConfig(**old)
    with pytest.raises(ValueError, match="before --n-envs and --sb3-kwargs"):
        TrainConfig.from_json(json.dumps({**old, "extra": {"n_envs": 8}}))


def test_critic_is_the_pragmatic_critic_and_the_run_ends_with_a_summary(tiny_data, cache, tmp_path, capsys):
    assert main(smoke_args(tiny_data, tmp_path, "critic", "--policy", "eps-greedy")) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "critic"
    config = json.loads((run_dir / "config.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert config["agent"] == metrics["agent"] == "pragmatic-critic"
    assert f"test accuracy {100 * metrics['test_accuracy']:.2f}% at {metrics['test_mean_macs'] / 1e6:.2f}M MACs" in out
    reached = [leaf for leaf, v in metrics["test"][0]["leaves"].items() if v["by_source"]["mnist"]]
    assert "digits" in out and all(leaf in out for leaf in reached)
    assert len(out.splitlines()) <= 24, "one screen"


def test_bf16_where_the_device_emulates_it_is_refused_in_one_line_before_anything_is_written(tiny_data, cache, tmp_path,
                                                                                          capsys, monkeypatch):
    monkeypatch.setattr(acceleration, "native_bf16", lambda device: False)
    with pytest.raises(SystemExit) as stop:
        main(smoke_args(tiny_data, tmp_path, "actor", "--precision", "bf16"))
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "emulated" in error[0] and error[0].endswith("drop --precision bf16")
    assert not (tmp_path / "actor").exists()
