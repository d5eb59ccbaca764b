"""The flag reference (``docs/flags.md``), generated from the command line's own parser.

``python -m routing_rl.app.flags > docs/flags.md`` writes it; ``tests/test_flags_page.py``
regenerates it and fails while the page differs. Every option of
:func:`routing_rl.app.cli.build_parser` is listed in the parser's order with what it takes, its
default, the agents that refuse it and its help text. Where the default depends on the agent
(a learner's option, or a field left ``None`` that its options resolve,
:mod:`routing_rl.training.learners`), the page gives the value of each registered agent that
reads it as :func:`~routing_rl.training.config.make_config` resolves it; which agents refuse a
flag is found the same way, by validating a value other than the default for every agent. Nothing is typed in
twice, so a flag or default added to the config reaches the page when it is regenerated, and the
output depends on nothing but the code (no time, no machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing

from routing_rl.app.cli import agent_names, build_parser, learner_option_fields
from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.k_cpt import COSTS, DYNAMIC
from routing_rl.data import DATASETS
from routing_rl.data.containers import VALIDATION_MIXES
from routing_rl.nets.multiscale import arch_names
from routing_rl.training import config as cfg
from routing_rl.training.acceleration import PRECISIONS
from routing_rl.agents.critic import EXPLORATIONS, SCORE_STARTS
from routing_rl.training.config import COMMON, DEFAULT_PRESET, PRESET_VALUES, TrainConfig, make_config

REGENERATE = "python -m routing_rl.app.flags > docs/flags.md"
AGENTS = agent_names()
CHOICES = {
    "agent": AGENTS, "policy": cfg.POLICIES, "preset": cfg.PRESETS, "execution": cfg.EXECUTIONS,
    "joint_execution": cfg.EXECUTIONS, "cost": COSTS,
    "error_cost": ERROR_COSTS, "utility_error": ERROR_COSTS, "score_start": SCORE_STARTS, "exploration": EXPLORATIONS,
    "validation_mix": VALIDATION_MIXES, "dataset": DATASETS, "arch": tuple(arch_names()), "precision": PRECISIONS,
}
"""The values a text flag takes, where the config names them."""
KINDS = {bool: "true or false", int: "integer", float: "number", str: "text", dict: "JSON object"}
OTHER_VALUES = {"k_cpt": (DYNAMIC, 1.6e-8), "sb3_kwargs": ({"verbose": 0},), "device": ("cpu",), "seed": (1,)}
"""Values other than the default, for flags whose kind alone does not give one that validates."""


def _settings() -> dict[str, tuple[dataclasses.Field, object]]:
    """Every flag that sets the config, by name: its field (the config's, or the options' class
    that first declares it) and its type hint."""
    hints = typing.get_type_hints(TrainConfig)
    settings = {field.name: (field, hints[field.name]) for field in dataclasses.fields(TrainConfig) if field.name in COMMON}
    for name, (field, options) in learner_option_fields().items():
        settings[name] = (field, typing.get_type_hints(options)[name])
    return settings


def _kind(field: dataclasses.Field) -> type:
    hint = _settings()[field.name][1]
    kinds = [k for k in typing.get_args(hint) or (hint,) if k is not type(None)]
    return typing.get_origin(kinds[0]) or kinds[0]


def _shown(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:g}").replace("e+", "e")
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return str(value)


def _configs() -> dict[str, TrainConfig]:
    """Each agent's config with every flag left out: the defaults a run of that agent trains with."""
    return {agent: make_config(DEFAULT_PRESET, agent=agent) for agent in AGENTS}


def _others(field: dataclasses.Field, default) -> list:
    if field.name in OTHER_VALUES:
        return [value for value in OTHER_VALUES[field.name] if value != default]
    if field.name in CHOICES:
        return [value for value in CHOICES[field.name] if value != default]
    kind = _kind(field)
    if kind is bool:
        return [not default]
    if kind is int:
        return [(default or 1) + 1]
    if kind is float:
        return [0.5 if default != 0.5 else 0.25]
    return ["x"]


def _refused_by(field: dataclasses.Field, configs: dict[str, TrainConfig]) -> list[str]:
    """The agents for which no value but the default validates, and those that do not read the
    flag (empty where every agent takes a value, or none does: a flag that needs another flag,
    such as --latency-batch, is refused alone)."""
    refusing = []
    for agent, config in configs.items():
        default = config.resolved_values().get(field.name)
        accepted = False
        for value in _others(field, default):
            values = {"agent": agent, field.name: value}
            try:
                make_config(values.pop("preset", DEFAULT_PRESET), **values)
            except ValueError:
                continue
            accepted = True
            break
        if not accepted:
            refusing.append(agent)
    return [] if len(refusing) == len(configs) else refusing


def _default(field: dataclasses.Field, configs: dict[str, TrainConfig]) -> str:
    if any(field.name in values for values in PRESET_VALUES.values()):
        return f"set by `--preset` ({DEFAULT_PRESET}: {_shown(PRESET_VALUES[DEFAULT_PRESET].get(field.name))})"
    if field.name in COMMON and getattr(TrainConfig(), field.name) is not None:  # a field left None is the learner's
        return _shown(getattr(TrainConfig(), field.name))
    by_value: dict[str, list[str]] = {}
    for agent, config in configs.items():
        if field.name in config.resolved_values():
            by_value.setdefault(_shown(config.resolved_values()[field.name]), []).append(agent)
    if len(by_value) == 1:
        return next(iter(by_value))
    return "; ".join(f"{value}: {', '.join(agents)}" for value, agents in by_value.items())


def _takes(action: argparse.Action, field: dataclasses.Field | None) -> str:
    if action.nargs == 0:
        return "switch"
    if field is None:
        return action.metavar or "text"
    if field.name in CHOICES:
        return " · ".join(f"`{choice}`" for choice in CHOICES[field.name])
    if field.name == "k_cpt":
        return f"number, or `{DYNAMIC}`"
    return KINDS[_kind(field)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The page: every option of ``parser`` (default: the command line's), then the presets."""
    parser = parser or build_parser()
    fields = {name: field for name, (field, _) in _settings().items()}
    configs = _configs()
    rows = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        field = fields.get(action.dest)
        default = _default(field, configs) if field else _shown(action.default if action.nargs != 0 else None)
        refused = ", ".join(_refused_by(field, configs)) if field else ""
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        rows.append(f"| {flags} | {_cell(_takes(action, field))} | {_cell(default)} | {refused} | {_cell(action.help or '')} |")
    presets = []
    for name in sorted({name for values in PRESET_VALUES.values() for name in values}, key=list(fields).index):
        values = " | ".join(_shown(PRESET_VALUES[preset].get(name)) for preset in cfg.PRESETS)
        presets.append(f"| `--{name.replace('_', '-')}` | {values} |")
    return "\n".join([
        "# Flag reference",
        "",
        f"Every flag of `experiments/train_agent.py` (and `python -m routing_rl.app.cli`), generated from its",
        f"parser by `{REGENERATE}`; `--help` prints the same help text.",
        "A flag left out takes the preset's value, then its default. Where the default depends on the",
        "agent, the value of each agent that reads the flag is given as the config resolves it; `—`:",
        "none, the help says what is used instead. *Refused by*: the agents that stop with one line and",
        "exit status 2 when the flag is given: any value, where the agent does not read the flag (a",
        "learner's option it does not have), else any value but its default; the help text names the",
        "agents that read a flag.",
        "",
        "| flag | takes | default | refused by | what it does |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        "## Presets",
        "",
        f"What `--preset` sets (`{DEFAULT_PRESET}` unless given; `—`: the flag's own default). Any flag given wins.",
        "",
        "| flag | " + " | ".join(f"`{preset}`" for preset in cfg.PRESETS) + " |",
        "| --- |" + " --- |" * len(cfg.PRESETS),
        *presets,
        "",
    ])


def main() -> int:
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
