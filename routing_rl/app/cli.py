"""The command line of ``experiments/train_agent.py``: flags → TrainConfig → a run.

Every :class:`~routing_rl.training.config.TrainConfig` field is a flag (``k_cpt`` → ``--k-cpt``),
and so is every option a registered learner declares (:mod:`routing_rl.training.learners`;
``--agent module:name`` imports a learner of another package first, so that its options are
flags too); flags left out take the preset's value, then the default. A user mistake ends with one line naming the problem and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import typing

from routing_rl.training.config import (
    AGENTS,
    COMMON,
    DEFAULT_PRESET,
    EXECUTIONS,
    POLICIES,
    PRESET_VALUES,
    PRESETS,
    TrainConfig,
    make_config,
)
from routing_rl.data import DATASETS, DataNotFoundError
from routing_rl.training.interrupt import Interrupted, handling_signals, stop_requested
from routing_rl.training.learners import learner_names, learner_spec, option_readers

def agent_names() -> tuple[str, ...]:
    """Every registered learner, the package's first in the order its reports list them."""
    names = learner_names()
    return (*[name for name in AGENTS if name in names], *[name for name in names if name not in AGENTS])


HELP = {
    "agent": "learner: " + ", ".join(agent_names()) + " (critic: pragmatic-critic), or MODULE:NAME for a learner your "
             "module registers (docs/architecture.md)",
    "policy": "training routing policy: " + ", ".join(POLICIES) + " (default: the agent's own)",
    "env": "routing task id: a routing_rl/ id, or PKG.MODULE:TaskId-v0 for a task your package registers (docs/plugins.md)",
    "dataset": "dataset of the image envs: " + ", ".join(DATASETS) + " (the hybrid-* are the task suite's variants); default: the env's",
    "arch": "network: chain, tree, or static-N (N = 1..8) for the static agent; on the image tasks also CIFAR ResNets "
            "with an exit after each stage, resnet20-exits, resnet32-exits, resnet56-exits, and for the static agent the "
            "plain resnetD and its prefixes resnetD-exit1, resnetD-exit2; an exit every B blocks: resnetD-exits-everyB "
            "(resnet20/32/56-exits-every1, resnet56-exits-every3; static: resnetD-everyB, resnetD-exitK-everyB) "
            "(docs/own-network.md); a plug-in task names its own, and "
            "static-LEAF for the static agent (default: the task's: chain, static-8 for the static agent; a plug-in's "
            "first arch, its deepest static-LEAF for the static agent)",
    "width": "channel multiplier of every column",
    "k_cpt": "cost per MAC, e.g. 4e-9, or 'dynamic' (sampled per example, routers read it)",
    "cost": "what k_cpt is charged per: macs, or latency (each node timed on this device, in MAC-equivalents)",
    "latency_batch": "batch size the latency cost is profiled at (default: --batch-size)",
    "latency_profile": "latency profile JSON measured on the inference device (experiments/profile_latency.py); default: profile on --device",
    "preset": "schedule preset: " + ", ".join(PRESETS),
    "iterations": "training iterations, each one optimiser step on batch-size training images (every agent)",
    "batch_size": "training images per iteration",
    "lr": "initial SGD learning rate (default: 0.1; the SB3 agents' joint training: 0.02)",
    "lr_half_life": "iterations for the learning rate to halve",
    "lr_warmup": "iterations over which the learning rate rises linearly to its halving schedule, from 1/lr_warmup "
                 "of it (0: none, the paper's); a deep net started at lr 0.1 on a short schedule may never recover",
    "momentum": "SGD momentum",
    "tau": "initial softmax temperature of the training routing policy (default: 1.0 actor, 0.1 critics)",
    "tau_half_life": "iterations for tau to halve",
    "epsilon": "initial exploration rate of the eps-greedy policy (default: 1.0 critics, annealed; DQN: its final rate, 0.1)",
    "epsilon_half_life": "iterations for epsilon to halve",
    "k_dec": "cost of decisiveness (actor): k_dec * |s_j|^2 per junction",
    "k_ure": "utility regression error weight (critics)",
    "router_lr_scale": "the routers' learning rate as a multiple of --lr (a critic's routers learn only the "
                       "k_ure-weighted regression, so at 1 their scores move slowly: agents/critic.py); default: 100 for "
                       "critics that train every head (--head-weight > 0), 1 otherwise",
    "score_start": "critics: where the router scores start: zero (the paper's zero-initialised last layer: every "
                   "unobserved sink looks free) or guess (minus a uniform guess's error cost, ln(classes) nats)",
    "k_l2": "L2 weight of the activated layers' weights",
    "c_mod_routing": "actor: c_mod's gradient also reaches the routers through the path probabilities (the paper's "
                     "'regularizing d-hat', Section 5: it discourages deep paths); default: d-hat is a constant in c_mod",
    "talr": "throughput-adjusted learning rates (Section 4.5)",
    "channels_last": "convolutions in channels-last memory format: faster steps on CPUs, same results up to rounding",
    "compile": "torch.compile the full-tree step (compiles for minutes at the first step)",
    "cuda_graphs": "CUDA only: compile the full-tree step (as --compile) and replay it as CUDA graphs, one launch per "
                   "step instead of hundreds (torch.compile's reduce-overhead mode); same results up to rounding",
    "precision": "arithmetic of the training steps: float32, or bf16 (autocast; on CUDA and CPUs with native bf16: "
                 "faster, results change beyond rounding; evaluation stays float32)",
    "execution": "critics: training execution: " + ", ".join(EXECUTIONS) + " (default: full, every node on every image; "
                 "sampled: only the sampled paths are computed); for dqn, ppo, a2c the deprecated name of --joint-execution",
    "joint_execution": "dqn, ppo, a2c: how the env trains the features on the agent's finished paths: "
                       + ", ".join(EXECUTIONS) + " (full: every head on every image; sampled: the paths' heads only; "
                       "was --execution for these agents)",
    "exit_confidence": "every router (and the SB3 agents' observation) also reads the log top softmax probability of the exit heads among "
                       "its sinks, the signal the confidence threshold routes on; costs the heads' MACs at every junction",
    "side_heads": "sampled critics: also run and train every exit head on a junction the path passed (free: its input is "
                  "computed); dqn: also replay those exits, with the rewards they would have earned",
    "exploration": "critics: where the training policy's exploring decisions go: sink (a uniformly random sink, the "
                   "paper's; the full tree's default) or leaf (a sink in proportion to the leaves below it: full "
                   "exploration reaches every exit equally often, not half as often at each junction deeper) or deep "
                   "(sampled execution's default: training decisions take only sinks that lead on to a column, so every "
                   "path runs to a deepest exit, its side heads pricing each exit it passes)",
    "double_q": "dqn: double Q-learning's target, the online network picks the next junction's sink and the target "
                "network values it (one-step targets otherwise take the target network's max, which overestimates "
                "continuing); default: true for dqn",
    "uniform_weight": "dqn, ppo, a2c: in the env's full-tree joint training, every head's weight in each image's loss "
                      "beside the weight 1 of the head the agent's path reached (1: all heads alike, as the threshold trains)",
    "head_weight": "actor, full-tree critics: every head's cross-entropy on every image, times this, is added to c_err, so "
                   "heads learn whatever the policy does (1: with c_err, the threshold's all-heads loss plus the routed "
                   "share; the actor may then take --error-cost zero_one, its routers learning the 0/1 error); 0: the "
                   "paper's; default: 1 for critics on the full tree, 0 otherwise; above 0 the default --lr is 0.02",
    "error_cost": "c_err: cross_entropy or zero_one",
    "utility_error": "c_err inside critic utilities: cross_entropy or zero_one (the paper's variant, the judge's error); "
                     "default: zero_one for critics that train every head (--head-weight > 0), cross_entropy otherwise",
    "probability_floor": "smallest routing probability of any sink during training",
    "validation_fraction": "share of the training split held out for validation",
    "validation_mix": "composition of the validation part: test (the test split's, by source and class, so that "
                      "validation predicts test) or train (the training split's)",
    "eval_every": "iterations between validation evaluations",
    "eval_examples": "cap on validation and test examples (default: all)",
    "train_examples": "cap on training examples (default: all)",
    "checkpoint_every": "iterations between checkpoints",
    "seed": "random seed",
    "device": "torch device: auto, cpu, cuda, cuda:N",
    "data_dir": "folder with your data copies (default: $ROUTING_RL_DATA_DIR, then download)",
    "download": "try torchvision's downloaders when the data is not found locally",
    "logdir": "folder that holds run directories",
    "run_name": "run directory name (default: agent-arch-timestamp)",
    "n_envs": "dqn, ppo, a2c: examples in flight in the vector env",
    "sb3_kwargs": "dqn, ppo, a2c: JSON object of SB3 keyword arguments over the defaults chosen for routing, "
                  "e.g. '{\"buffer_size\": 50000}' (default: none)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _int_at_least(minimum: int, expected: str):
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return convert


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"buffer_size\": 50000}}', got {text!r}")
    return value


def _converter(name: str, hint, default):
    kind = type(default) if default is not None else str
    if name == "k_cpt":
        return str
    if kind is dict:
        return _json_object
    if kind is bool or bool in typing.get_args(hint):  # a flag, or None for the agent's own
        return _bool
    if name == "seed":
        return _non_negative_int
    if kind is int or int in typing.get_args(hint):
        return _positive_int
    if kind is float or float in typing.get_args(hint):  # a number, or None for the agent's own
        return _number
    return str


def learner_option_fields() -> dict[str, tuple[dataclasses.Field, type]]:
    """Each registered learner's options that the config has no field for (name → the field
    and the options class that first declares it): flags kept in the config's ``learner_options``."""
    own = {}
    for name in learner_names():
        options = learner_spec(name).options
        for field in dataclasses.fields(options):
            if field.name not in COMMON:
                own.setdefault(field.name, (field, options))
    return own


def _default(field: dataclasses.Field):
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def build_parser(prog: str = "train_agent.py") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Train a routed network with any learner on any routing env.")
    defaults = TrainConfig()
    hints = typing.get_type_hints(TrainConfig)
    settings = [(field, hints[field.name], getattr(defaults, field.name)) for field in dataclasses.fields(TrainConfig)
                if field.name != "learner_options"]  # filled from the learners' options, which follow
    settings += [(field, typing.get_type_hints(options)[name], _default(field))
                 for name, (field, options) in learner_option_fields().items()]
    for field, hint, default in settings:
        in_presets = any(field.name in values for values in PRESET_VALUES.values())
        shown = "set by --preset" if in_presets else default
        text = HELP.get(field.name) or f"{', '.join(option_readers(field.name))}: {field.metadata.get('help', '')}"
        text = text if "default:" in text else f"{text} (default: {shown})"
        parser.add_argument("--" + field.name.replace("_", "-"), type=_converter(field.name, hint, default), default=None,
                            metavar=field.name.upper(), help=text)
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run directory of the same name")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    parser.add_argument("--json", action="store_true", help="at the end, print the final metrics as JSON instead of the summary")
    parser.add_argument("--verbose", action="store_true", help="when a plug-in task's code fails, also print its trace; when "
                        "no data is found, also list every place looked at and the accepted layouts")
    return parser


def given_options(args: argparse.Namespace) -> dict:
    """The learners' options the flags give, by name."""
    return {name: getattr(args, name) for name in learner_option_fields() if getattr(args, name) is not None}


_TASK_IN_USE: list = []
"""The task the parsed flags name, kept alive so that the run shares it (``make_task`` shares
live instances) rather than loading its data a second time."""


def config_from_args(args: argparse.Namespace, note=None) -> TrainConfig:
    """The config the flags ask for: flags, then the settings the env is registered with
    (k_cpt, error cost, arch, ...), then the preset's and the defaults. ``note(line)`` is told
    of every flag that overrides a registered setting."""
    values = {name: getattr(args, name) for name in COMMON}
    options = values["learner_options"] = given_options(args)
    preset = values.pop("preset") or DEFAULT_PRESET
    if "execution" in options and "joint_execution" not in options and \
            learner_spec(values["agent"] or TrainConfig.agent).trains_through_env:
        options["joint_execution"] = options.pop("execution")
        if note is not None:
            note(f"--execution for {values['agent']} is deprecated: it is now --joint-execution {options['joint_execution']}")
    from routing_rl.app.runs import task_for, with_registered_settings

    task = task_for({**PRESET_VALUES[preset], **{k: v for k, v in values.items() if v is not None}})
    _TASK_IN_USE[:] = [task]
    values, notes = with_registered_settings(values, task)
    for line in notes if note is not None else ():
        note(line)
    if values.get("arch") is None:
        values["arch"] = task.default_arch(values.get("agent") or TrainConfig.agent)
    return make_config(preset, archs=task.all_archs(), static_archs=task.static_archs(), **values)


def main(argv: list[str] | None = None, prog: str = "train_agent.py", leaving: bool = False) -> int:
    """Run the command line; Ctrl-C or SIGTERM at any point end it with one line and exit
    status 130 or 143 (:mod:`routing_rl.training.interrupt`): during training, after the state
    of the last completed step is checkpointed. ``leaving``: the process exits next, so
    signals after the return are ignored (a second Ctrl-C while it exits)."""
    with handling_signals(leaving):
        try:
            return _main(argv, prog)
        except KeyboardInterrupt as stop:  # Interrupted, or a Ctrl-C no handler turned into one
            print(f"\n{prog}: {interruption(stop)}", file=sys.stderr)
            return stop.exit_code if isinstance(stop, Interrupted) else 130
        except Exception:  # a signal's Interrupted raised inside C code comes back as another error
            if not stop_requested():
                raise
            stop = Interrupted(stop_requested())
            print(f"\n{prog}: {interruption(stop)}", file=sys.stderr)
            return stop.exit_code


def refusal(prog: str, error: Exception, verbose: bool) -> str:
    """The one line that refuses a run for ``error``; with ``verbose`` also its details (a
    plug-in task's trace, the places searched for data)."""
    from routing_rl.envs.task import TaskError

    details = getattr(error, "details", "") if verbose else ""
    hint = "; --verbose shows the trace" if isinstance(error, TaskError) and not verbose else ""
    return f"{prog}: error: {error}{hint}\n" + (f"{details}\n" if details else "")


def interruption(stop: KeyboardInterrupt) -> str:
    """The one line that reports ``stop``."""
    what = f"interrupted ({signal.Signals(stop.signum).name})" if isinstance(stop, Interrupted) else "interrupted"
    if isinstance(stop, Interrupted) and stop.iteration is not None:
        return f"{what} after iteration {stop.iteration}, which is checkpointed; continue with --resume"
    return f"{what}; every checkpoint written is kept: continue a started run with --resume"


def _main(argv: list[str] | None, prog: str) -> int:
    argv = sys.argv[1:] if argv is None else argv
    agent = next((value for flag, value in zip(argv, argv[1:]) if flag == "--agent"), "")
    agent = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--agent=")), agent)
    if ":" in agent:  # a learner of another package: its options become flags once it registers
        try:
            learner_spec(agent)
        except ValueError as error:
            _Parser(prog=prog).exit(2, f"{prog}: error: {error}\n")
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    from routing_rl.app.runs import RunError, train
    from routing_rl.app.summary import summary_text
    from routing_rl.core.memory import release_freed_memory, retain_freed_memory
    from routing_rl.envs.task import TaskError
    from routing_rl.training.monitor import progress_seconds

    retain_freed_memory()

    try:
        progress_seconds()  # refused now, not after the run folder is written
        config = None if args.resume else config_from_args(args, lambda line: print(f"{prog}: note: {line}", file=sys.stderr))
    except (ValueError, TaskError) as error:
        parser.exit(2, refusal(prog, error, args.verbose))
    if args.print_config and config is not None:
        print(config.to_json())
        return 0
    given = {name: getattr(args, name) for name in COMMON if getattr(args, name) is not None}
    try:
        metrics = (train(resume=args.resume, overrides={**given, **given_options(args)}) if args.resume
                   else train(config, overwrite=args.overwrite))
    except (RunError, DataNotFoundError, TaskError) as error:
        parser.exit(2, refusal(prog, error, args.verbose))
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for every process
        if args.json:
            print(json.dumps({k: metrics[k] for k in ("run", "agent", "arch", "k_cpt", "test_accuracy", "test_mean_macs", "train_seconds")}, indent=2))
        else:
            print(summary_text(metrics))
    release_freed_memory()  # the run is over: its retained blocks need not stay resident while the process exits
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    # under torchrun, a process's uncaught error reaches the launcher's failure summary
    sys.exit(record(main)(prog="python -m routing_rl.app.cli", leaving=True))
