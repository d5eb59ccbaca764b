"""docs/flags.md is the command line's parser, written out: regenerated here, it must match."""

from pathlib import Path

import pytest

from routing_rl.app import flags
from routing_rl.app.cli import build_parser
from routing_rl.training.config import AGENTS, DEFAULT_PRESET, make_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def page() -> str:
    return flags.markdown()


def row(page: str, flag: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| `{flag}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_flag_page_is_current(page):
    assert (REPO / "docs" / "flags.md").read_text() == page, f"docs/flags.md is stale; regenerate it: {flags.REGENERATE}"


def test_every_option_of_the_parser_is_on_the_page_with_its_help():
    parser = build_parser()
    parser.add_argument("--brand-new", action="store_true", help="a flag added after the page was written")
    written = flags.markdown(parser)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert row(written, action.option_strings[0])[4] == (action.help or "").replace("|", "\\|"), action.dest
    assert row(written, "--brand-new")[1] == "switch"


def test_a_default_that_depends_on_the_agent_is_given_per_agent(page):
    default = row(page, "--tau")[2]
    taus = {agent: make_config(DEFAULT_PRESET, agent=agent).resolved_tau for agent in AGENTS}
    assert len(set(taus.values())) > 1, "tau's default no longer depends on the agent: test another flag"
    for agent, tau in taus.items():
        group = next(part for part in default.split("; ") if agent in part.split(": ")[1].split(", "))
        assert float(group.split(":")[0]) == tau, (agent, default)


def test_refused_by_names_the_agents_whose_validation_refuses_the_flag(page):
    def refuses(agent: str) -> bool:
        try:
            make_config(DEFAULT_PRESET, agent=agent, compile=True)
        except ValueError:
            return True
        return False

    refusing = [agent for agent in AGENTS if refuses(agent)]
    assert 0 < len(refusing) < len(AGENTS), "every agent or none refuses --compile: test another flag"
    assert row(page, "--compile")[3] == ", ".join(refusing)
