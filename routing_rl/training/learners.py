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
}
"""Settings only some learners read (config field → the one line that refuses any other value
than the field's default); a learner refuses each it does not name in ``LearnerSpec.reads``."""


@dataclass
class LearnerOptions:
    """The settings whose defaults belong to the learner (None in ``config.json``: the
    learner's default). A learner subclasses it, changes the defaults it owns and adds its own
    fields: those without a field of the same name in the run's config are flags of their
    own (``gain`` → ``--gain``) and travel in the config's ``learner_options``. A default that
    depends on another option is None here and filled in ``__post_init__``."""

    policy: str | None = None  # the training routing policy; None: the first of LearnerSpec.policies
    lr: float | None = LR
    router_lr_scale: float | None = 1.0
    head_weight: float | None = 0.0
    utility_error: str | None = "cross_entropy"
    tau: float | None = 0.1
    epsilon: float | None = 1.0
    double_q: bool | None = False


@dataclass(frozen=True)
class LearnerSpec:
    """One learner as the run sees it.

    name: ``--agent``. options: its :class:`LearnerOptions` subclass. policies: the training
    routing policies it can use, its default first (empty: it has none). executions: the
    values of ``--execution`` it reads. builder: ``(net, config, device, cost) -> Learner``;
    None for a learner that trains through the routing env (the SB3 agents), which reads
    ``--joint-execution``, ``--n-envs``, ``--sb3-kwargs``. nets: ``routed`` (nets with
    junctions), ``static`` (nets without) or ``chain`` (the paper's chain only, on the paper's
    tasks). routers: it has routers to read a dynamic k_cpt and exit confidence. reads: the
    settings of :data:`REFUSALS` it reads; it refuses the others. refuses: more config fields
    → the one line that refuses a value other than the field's default (``{agent}`` names the
    learner, ``{value}`` the value). max_seed: the largest seed it can be given.
    """

    name: str
    options: type[LearnerOptions] = LearnerOptions
    policies: tuple[str, ...] = ()
    executions: tuple[str, ...] = ("full",)
    builder: Callable | None = None
    nets: str = "routed"
    routers: bool = True
    reads: tuple[str, ...] = ()
    refuses: Mapping[str, str] = field(default_factory=dict)
    max_seed: int | None = None
    aliases: tuple[str, ...] = ()

    @property
    def trains_through_env(self) -> bool:
        return self.builder is None

    @property
    def refusals(self) -> dict[str, str]:
        return {**{name: line for name, line in REFUSALS.items() if name not in self.reads}, **self.refuses}


_REGISTRY: dict[str, LearnerSpec] = {}
_ALIASES: dict[str, str] = {}
_loaded = False


def register_learner(spec: LearnerSpec) -> LearnerSpec:
    """Make ``spec`` an ``--agent``; registering a name twice replaces the first (a module
    imported again)."""
    if not dataclasses.is_dataclass(spec.options) or not issubclass(spec.options, LearnerOptions):
        raise TypeError(f"learner {spec.name!r}: options must be a dataclass subclassing LearnerOptions")
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
    """Every registered learner, the package's own included."""
    _load_package_learners()
    return tuple(_REGISTRY)
