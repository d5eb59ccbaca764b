"""docs/plugins.md works as written: its code blocks run, in order, from a fresh folder
outside the checkout, with the guide's package on PYTHONPATH; the settings its task is
registered with are what its runs train with, through ``experiments/train_agent.py`` too."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import guide_blocks, run_guide

CHECKOUT = Path(__file__).resolve().parents[1]
GUIDE = CHECKOUT / "docs" / "plugins.md"


def blocks() -> list[tuple[str, str | None, str]]:
    return guide_blocks(GUIDE)


def test_the_guide_has_a_task_a_registration_training_evaluation_and_plots():
    kinds = [(language, title) for language, title, _ in blocks()]
    assert ("python", "mytasks/blobs.py") in kinds and ("python", "mytasks/__init__.py") in kinds
    assert ("python", "mytasks/clips.py") in kinds, "a task of sequences"
    shell = "\n".join(code for language, _, code in blocks() if language == "bash")
    assert "--env mytasks:mytasks/Blobs-v0" in shell and "routing_rl.app.figures" in shell
    registering = [code for _, title, code in blocks() if title == "mytasks/__init__.py"][-1]
    assert registering.count("k_cpt=1e-4") == 2, "each task carries its k_cpt"
    assert shell.count("--k-cpt") == 1, "one command overrides the registered k_cpt, to show how; the others take it"
    assert "--env mytasks:mytasks/Clips-v0" in shell
    evaluations = [code for language, title, code in blocks() if language == "python" and "evaluate(" in code]
    assert len(evaluations) == 2 and all("task=task" in code for code in evaluations), "evaluate(...) as sequences need it"


def test_the_guide_runs_exactly_as_written(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = run_guide(GUIDE, tmp_path, env)
    outputs, errors = [block.stdout for block in done], [block.stderr for block in done]

    assert not (CHECKOUT / "mytasks").exists(), "the package lives outside the checkout"
    for run in ("blobs-actor", "blobs-critic", "blobs-dqn", "clips-actor", "clips-dqn"):
        assert json.loads((tmp_path / "runs" / run / "config.json").read_text())["k_cpt"] == 1e-4, "the registered k_cpt"
    assert json.loads((tmp_path / "runs" / "blobs-actor-1e-3" / "config.json").read_text())["k_cpt"] == 1e-3
    notes = [line for text in errors for line in text.splitlines() if ": note: " in line]
    assert notes == ["python -m routing_rl.app.cli: note: --k-cpt 1e-3 overrides the k_cpt 0.0001 that "
                     "mytasks:mytasks/Blobs-v0 is registered with"], notes

    # the same task through the checkout's experiments/train_agent.py: registered k_cpt, flags override it visibly
    for run, flags in (("static-registered", []), ("static-flagged", ["--k-cpt", "2e-4"])):
        done = subprocess.run([sys.executable, str(CHECKOUT / "experiments" / "train_agent.py"), "--env",
                               "mytasks:mytasks/Blobs-v0", "--agent", "static", "--preset", "smoke", "--logdir", "runs",
                               "--run-name", run, "--json", *flags], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        config = json.loads((tmp_path / "runs" / run / "config.json").read_text())
        assert config["k_cpt"] == (2e-4 if flags else 1e-4) and config["arch"] == "static-exit2"
        assert json.loads(done.stdout)["k_cpt"] == config["k_cpt"]
        assert ("train_agent.py: note: --k-cpt 2e-4 overrides the k_cpt 0.0001" in done.stderr) == bool(flags), done.stderr
    for agent in ("actor", "critic", "dqn"):
        metrics = json.loads((tmp_path / "runs" / f"blobs-{agent}" / "metrics.json").read_text())
        assert metrics["classes"] == ["red", "green", "blue"] and metrics["sources"] == ["clear", "noisy"]
        assert metrics["env"] == "mytasks:mytasks/Blobs-v0" and metrics["dataset"]["name"] == "blobs"
        leaf = next(iter(metrics["test"][0]["leaves"].values()))
        assert set(leaf["by_class"]) == {"red", "green", "blue"} and set(leaf["by_source"]) == {"clear", "noisy"}
    for agent in ("actor", "dqn"):
        metrics = json.loads((tmp_path / "runs" / f"clips-{agent}" / "metrics.json").read_text())
        assert metrics["sources"] == ["steady", "switching"] and metrics["dataset"]["frames"] == 8
        assert set(metrics["test"][0]["leaves"]) == {"reuse", "classify"}
        assert metrics["test"][0]["examples"] % 8 == 0, "every frame of the test clips is judged"
    assert "(300, 8, 8) (300, 8)" in "".join(outputs) and "8 frames" in "".join(outputs)
    assert re.search(r"clips: accuracy \d\.\d{3} per frame, \d+% of frames reused", "".join(outputs))
    evaluation = next(text for text in outputs if "MACs per example" in text)
    assert re.search(r"accuracy \d\.\d{3} at \d+ MACs per example", evaluation)
    assert "'clear'" in evaluation and "'noisy'" in evaluation
    for name in ("accuracy_macs.png", "accuracy_macs.csv", "node_link.png", "report.md"):
        assert (tmp_path / "figures" / name).is_file(), name
    assert "clear / noisy" in (tmp_path / "figures" / "report.md").read_text()
