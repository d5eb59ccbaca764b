"""docs/own-network.md works as written: its python and bash blocks run, in order, from a fresh
folder outside the checkout, on tiny synthetic CIFAR-10 files; ``text`` blocks (the real-data
schedules) are shown, not run."""

import json
import os
import re
import sys
from pathlib import Path

from helpers import guide_blocks, run_guide

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "own-network.md"
MEASURED = "## Measured results"


def blocks() -> list[tuple[str, str | None, str]]:
    return guide_blocks(GUIDE)


def test_the_guide_covers_the_wrapper_both_modes_and_the_protocols_and_links_its_results():
    text = GUIDE.read_text()
    shell = "\n".join(code for language, _, code in blocks() if language == "bash")
    assert "--arch resnet20-exits" in shell and "--env mynets:mynets/FrozenResNet20-v0" in shell
    assert "--env mynets:mynets/ResNet18-v0" in shell and "routing_rl.app.protocols" in shell
    assert any(title == "mynets/__init__.py" and "routable(" in code for _, title, code in blocks())
    assert MEASURED in text and "(results/own-network.md)" in text.split(MEASURED)[1], "the results page is linked"
    assert (GUIDE.parent / "results" / "own-network.md").is_file()
    assert not re.search(r"\d+\.\d+ ?%", text), "measurements live on the results page, not in the guide"


def cifar_folder(root: Path, monkeypatch) -> Path:
    """Synthetic CIFAR-10 pickles with 10 training images per class: the guide's commands keep
    their default validation fraction (a tenth), which needs more than the shared tiny set's 3."""
    import synthetic_data

    monkeypatch.setattr(synthetic_data, "CIFAR_PER_CLASS", {"train": 10, "test": 3})
    synthetic_data.write_cifar_pickles(root / "cifar-10-batches-py")
    return root


def test_the_guide_runs_exactly_as_written(tmp_path, monkeypatch):
    data = cifar_folder(tmp_path / "data", monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(work), OMP_NUM_THREADS="1", ROUTING_RL_DATA_DIR=str(data),
               ROUTING_RL_CACHE=str(tmp_path / "cache"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    outputs = [block.stdout for block in run_guide(GUIDE, work, env)]

    printed = "".join(outputs)
    assert re.findall(r"exit(\d): [\d.]+M MACs", printed) == ["1", "2", "3", "4"]
    assert "hands on 2 values at exit 'layer2.0.conv2': a skip connection crosses it" in printed
    assert re.search(r"[\d.]+M MACs per image, exits \[\d+, \d+, \d+\]", printed)
    for run in ("plain-resnet20", "resnet20-threshold", "resnet20-actor", "resnet18-actor", "frozen-threshold",
                "frozen-actor", "frozen-resnet18-critic"):
        metrics = json.loads((work / "runs" / run / "metrics.json").read_text())
        assert 0 <= metrics["test_accuracy"] <= 1, run
    frozen = json.loads((work / "runs" / "frozen-actor" / "metrics.json").read_text())
    assert frozen["dataset"]["frozen_backbone"]["arch"] == "resnet20-exits"
    assert len(list((tmp_path / "cache").glob("frozen-*.pt"))) == 2, "one feature cache per frozen backbone"
    assert {"protocols.png", "protocols.csv", "protocols.md"} <= {p.name for p in (work / "protocols").iterdir()}
    assert "| actor |" in (work / "protocols" / "protocols.md").read_text()
    assert not (Path(__file__).resolve().parents[1] / "mynets").exists(), "the package lives outside the checkout"
