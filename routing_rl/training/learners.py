"""The learner registry: each learner declares its name, its options and what it refuses, and
registers itself; the config, the command line and the run read it from here.

A learner module in ``routing_rl.agents`` (or any module outside the package) calls
:func:`register_learner` with a :class:`LearnerSpec` when it is imported. The package's own
learners are found the first time a name is looked up, by importing every module of
``routing_rl.agents`` by name (as Gymnasium loads an env's entry point), so that this layer
never imports the learners; a learner of another package is named ``module:name``
(``--agent mypkg.toy:toy``), and its module is imported on that first look-up, as
``--env mypkg:id`` imports a task's.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

LR = 0.1
"""The initial learning rate of the paper's learners (static, actor, critics, threshold)."""
JOINT_LR = 0.02
"""The initial learning rate wherever every head learns on every image, its losses summed as
the confidence threshold trains its chain, whose validated rate is 0.02 on every suite task:
the env's joint training under the SB3 agents (``envs/joint.py`` says why) and a learner with
c_heads (``head_weight`` > 0, the critics' default): at 0.1 eight heads' gradients summed
overwhelm the first columns."""
LEARNER_PACKAGE = "routing_rl.agents"
REFUSALS = {
    "double_q": "--double-q changes DQN's targets; {agent!r} has none: drop it",
    "head_weight": "--head-weight trains every head on every image of the full tree (the actor, critics with --execution "
                   "full); {agent!r} does not read it (dqn, ppo, a2c: --uniform-weight weighs the heads of the env's joint "
                   "training): drop it",
    "error_cost": "error_cost {value!r} has no gradient for the heads to learn from; keep cross_entropy (a critic can use "
                  "--utility-error zero_one inside its utility; the actor's routers can learn it, its heads then learn "
                  "from their own cross-entropy)",
    "c_mod_routing": "--c-mod-routing lets the actor's routers see c_mod's gradient; critics learn routing through cost "
                     "prediction with d̂ constant (paper Section 4.2), not {agent!r}: drop it",
    "sb3_kwargs": "sb3_kwargs configure the SB3 agents (dqn, ppo, a2c), not {agent!r}; drop --sb3-kwargs",
    "execution": "--execution {value} chooses how a critic trains; {agent!r} does not read it: drop it",
    "joint_execution": "--joint-execution chooses how the routing env trains the features under dqn, ppo and a2c; "
                       "{agent!r} does not train through the env: drop it",
}
"""How a learner refuses a setting it does not read, in one line (``{agent}``: the learner,
``{value}``: the value given): an option its options do not declare, whatever its value (a
learner without such a line says so in :func:`undeclared_option`'s words); ``error_cost``, a
common field, when it is not the default and the learner does not name it in ``LearnerSpec.reads``."""


@dataclass
class LearnerOptions:
    """The settings a learner reads beyond the common config: what ``config.json`` keeps under
    ``learner_options`` and ``config.options`` gives. A learner subclasses it, changes the
    defaults it owns and adds its own fields; each field is a flag (``gain`` → ``--gain``). A
    field of the same name as a common field (``lr``) is that field's default for this
    learner: the common field, when given, wins. A default that depends on another option is
    None here and filled in ``__post_init__``, which also refuses a bad value in one line."""

    policy: str | None = None  # the training routing policy; None: the first of LearnerSpec.policies
    lr: float | None = LR


@dataclass(frozen=True)
class EnvTraining:
    """How a learner that trains through the routing env (the SB3 agents) trains, resumes and
    is loaded, instead of a builder's gradient steps under the run's trainer.

    train: ``(config, task, run_dir, device, resume, cost, figures, splits)`` → a result with
    ``net``, ``history`` and ``evaluations(examples)`` (:class:`routing_rl.agents.sb3.SB3Result`).
    load: ``(run_dir, device)`` → its trained net; RunError-worthy ValueError while unfinished.
    has_checkpoint: ``run_dir`` → whether a run of it can resume. check: ``config`` → None, or
    ValueError in one line for settings it refuses (run before the run folder exists).
    check_fits: ``(config, task, device)`` → None, or MemoryError saying what would fit.
    sizes: ``config`` → the settings that size its memory, for the out-of-memory line.
    """

    train: Callable
    load: Callable
    has_checkpoint: Callable
    check: Callable
    check_fits: Callable
    sizes: Callable


@dataclass(frozen=True)
class LearnerSpec:
    """One learner as the run sees it.

    name: ``--agent``. options: its :class:`LearnerOptions` subclass. policies: the training
    routing policies it can use, its default first (empty: it has none). builder: ``(net,
    config, device, cost) -> Learner``, trained by the run's trainer; or env_training
    (:class:`EnvTraining`) for a learner that trains through the routing env. nets: ``routed``
    (nets with junctions), ``static`` (nets without) or ``chain`` (the paper's chain only, on
    the paper's tasks). routers: it has routers to read a dynamic k_cpt and exit confidence.
    reads: the common settings of :data:`REFUSALS` it reads; it refuses the others. refuses:
    more settings → the one line that refuses them (``{agent}`` names the learner, ``{value}``
    the value). max_seed: the largest seed it can be given. aliases: other names it answers to.
    """

    name: str
    options: type[LearnerOptions] = LearnerOptions
    policies: tuple[str, ...] = ()
    builder: Callable | None = None
    env_training: EnvTraining | None = None
    nets: str = "routed"
    routers: bool = True
    reads: tuple[str, ...] = ()
    refuses: Mapping[str, str] = field(default_factory=dict)
    max_seed: int | None = None
    aliases: tuple[str, ...] = ()

    @property
    def trains_through_env(self) -> bool:
        return self.env_training is not None

    @property
    def refusals(self) -> dict[str, str]:
        return {**{name: line for name, line in REFUSALS.items() if name not in self.reads}, **self.refuses}

    def option_names(self) -> set[str]:
        return {f.name for f in dataclasses.fields(self.options)}


_REGISTRY: dict[str, LearnerSpec] = {}
_ALIASES: dict[str, str] = {}
_loaded = False


def register_learner(spec: LearnerSpec) -> LearnerSpec:
    """Make ``spec`` an ``--agent``; registering a name twice replaces the first (a module
    imported again)."""
    if not dataclasses.is_dataclass(spec.options) or not issubclass(spec.options, LearnerOptions):
        raise TypeError(f"learner {spec.name!r}: options must be a dataclass subclassing LearnerOptions")
    if (spec.builder is None) == (spec.env_training is None):
        raise TypeError(f"learner {spec.name!r}: give a builder, or env_training for a learner that trains through the env")
    _REGISTRY[spec.name] = spec
    _ALIASES.update({alias: spec.name for alias in spec.aliases})
    return spec


def _load_package_learners() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        package = importlib.import_module(LEARNER_PACKAGE)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{LEARNER_PACKAGE}.{module.name}")


def canonical_name(name: str) -> str:
    """The name a config stores for ``name`` (an alias such as ``critic`` → ``pragmatic-critic``)."""
    if name not in _REGISTRY and name not in _ALIASES:
        _load_package_learners()
    return _ALIASES.get(name, name)


def learner_spec(name: str) -> LearnerSpec:
    """The registered learner ``name`` (or ``module:name``, importing ``module`` first);
    ValueError in one line for a name nothing registered."""
    name = canonical_name(name)
    if ":" in name:
        module, name = name.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ValueError(f"--agent {name}: cannot import the learner's module {module!r} ({error}); "
                             "put it on PYTHONPATH or install its package") from None
        if name not in _REGISTRY:
            raise ValueError(f"--agent {module}:{name}: {module} registers no learner {name!r}; the module must call "
                             f"register_learner(LearnerSpec({name!r}, ...)) when imported")
    if name not in _REGISTRY:
        raise ValueError(f"unknown agent {name!r}; choose one of {', '.join(learner_names())}")
    return _REGISTRY[name]


def trains_static_nets(agent: str | None) -> bool:
    """Whether ``agent`` trains nets without junctions (None: an environment's agent, which routes)."""
    return agent is not None and learner_spec(agent).nets == "static"


def learner_names() -> tuple[str, ...]:
    """Every registered learner, the package's own included, by name: not in the order they
    registered, which depends on what the process imported first (the flag page and ``--help``
    list options in this order)."""
    _load_package_learners()
    return tuple(sorted(_REGISTRY))


def declared_options() -> set[str]:
    """Every option a registered learner declares."""
    return {name for learner in learner_names() for name in learner_spec(learner).option_names()}


def option_readers(name: str) -> tuple[str, ...]:
    """The registered learners whose options declare ``name``."""
    return tuple(agent for agent in learner_names() if name in learner_spec(agent).option_names())


def undeclared_option(spec: LearnerSpec, name: str, value) -> str:
    """The one line that refuses ``name`` given to ``spec``'s learner, whose options do not declare it."""
    if name in spec.refusals:
        return spec.refusals[name].format(agent=spec.name, value=value)
    readers = option_readers(name)
    flag = "--" + name.replace("_", "-")
    if not readers:
        return f"agent {spec.name!r} has no option {name}; drop it from learner_options"
    return f"{flag} is read by {', '.join(readers)}; agent {spec.name!r} does not read it: drop it"
