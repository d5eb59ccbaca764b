"""docs/tensorboard.md lists, per agent, the TensorBoard tags its runs write: each agent trains
for two iterations on tiny synthetic data, and the tags in its run folder are the page's ✓ rows
for that agent, no more and no fewer (issue 48)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.app.cli import main
from routing_rl.training.config import AGENTS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "tensorboard.md"
COLUMNS = {"critics": ("pragmatic-critic", "optimistic-critic")}
"""Page columns that stand for several agents."""
HPARAMS = {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
"""What TensorBoard's HPARAMS tab reads."""


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "tensorboard-doc-cache"))


def documented() -> dict[str, set[str]]:
    """agent -> the tags the page marks ✓ for it (not (✓): those need another setting)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    header, *body = rows
    assert header[:2] == ["tag", "what it shows"], header
    tags: dict[str, set[str]] = {agent: set() for agent in AGENTS}
    for row in body[1:]:  # after the --- row
        (tag,) = re.findall(r"`([^`]+)`", row[0])
        for column, cell in zip(header[2:], row[2:]):
            for agent in COLUMNS.get(column, (column,)):
                if cell.startswith("✓"):
                    tags[agent].add(tag)
    return tags


def written(run_dir: Path) -> set[str]:
    """The run's tags, names of leaves, junctions and sources as the page's placeholders."""
    events = EventAccumulator(str(run_dir)).Reload()
    kinds = events.Tags()
    tags = set(kinds["scalars"]) | set(kinds["histograms"]) | set(kinds["images"])
    assert HPARAMS <= set(events.PluginTagToContent("hparams")), "the HPARAMS tab's entries"
    placeholders = {"routing/val_fraction/": "<leaf>", "charts/val_source_accuracy/": "<source>",
                    "routing/scores/": "<junction>"}
    return {next((prefix + name for prefix, name in placeholders.items() if tag.startswith(prefix)), tag)
            for tag in tags}


def test_the_page_has_a_column_for_every_agent():
    assert set(documented()) == set(AGENTS) and all(documented().values())


@pytest.mark.parametrize("agent", AGENTS)
def test_the_tags_an_agent_writes_are_the_ones_the_page_lists(agent, tiny_data, tmp_path):
    sb3 = ["--n-envs", "8", "--sb3-kwargs"]  # short rollouts, learning at once: SB3 logs its training within 2 iterations
    extra = {"static": ["--arch", "static-1"], "dqn": [*sb3, '{"learning_starts": 8, "buffer_size": 512}'],
             "ppo": [*sb3, '{"n_steps": 2}'], "a2c": [*sb3, '{"n_steps": 2}']}.get(agent, [])
    assert main(["--agent", agent, *extra, "--preset", "smoke", "--iterations", "2", "--eval-every", "2",
                 "--checkpoint-every", "2", "--data-dir", str(tiny_data), "--download", "false",
                 "--validation-fraction", "0.4", "--logdir", str(tmp_path), "--run-name", "run"]) == 0
    tags, listed = written(tmp_path / "run"), documented()[agent]
    assert tags == listed, f"written, not on the page: {sorted(tags - listed)}; on the page, not written: {sorted(listed - tags)}"
