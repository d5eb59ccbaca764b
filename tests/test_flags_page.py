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


def test_a_default_that_depends_on_the_agent_is_given_per_agent_that_reads_it(page):
    default = row(page, "--tau")[2]
    configs = {agent: make_config(DEFAULT_PRESET, agent=agent) for agent in AGENTS}
    taus = {agent: config.options.tau for agent, config in configs.items() if hasattr(config.options, "tau")}
    assert len(set(taus.values())) > 1, "tau's default no longer depends on the agent: test another flag"
    assert 0 < len(taus) < len(AGENTS), "every agent or none reads --tau: test another flag"
    listed = [agent for part in default.split("; ") for agent in part.split(": ")[1].split(", ")]
    assert sorted(listed) == sorted(taus), default
    for agent, tau in taus.items():
        group = next(part for part in default.split("; ") if agent in part.split(": ")[1].split(", "))
        assert float(group.split(":")[0]) == tau, (agent, default)


def test_refused_by_names_the_agents_that_do_not_read_a_learners_option(page):
    readers = [agent for agent in AGENTS if hasattr(make_config(DEFAULT_PRESET, agent=agent).options, "k_ure")]
    assert readers == ["pragmatic-critic", "optimistic-critic"]
    assert row(page, "--k-ure")[3] == ", ".join(agent for agent in AGENTS if agent not in readers)


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
