"""What the paper's learners cost per training step, side by side.

* ``actor_step_ratio`` — one actor step on the 8-column chain (every column, head and router,
  the exact expectation over the 8 paths, c_mod, c_dec, TALR) / one static-8 step (8
  columns, one head, cross-entropy, c_mod). Target <= 1.3: the full evaluation computes
  little besides the static net's columns, and the expectation is a few small tensor ops.
* ``sampled_critic_step_ratio`` — one step of the pragmatic critic with sampled decisions
  (ε-greedy, side heads) on the chain / one static-8 step, with the chain's routers set as in
  ``bench_execution`` (half the examples exit after column 1, a quarter after column 3, the
  rest run to the end: about 7.7M MACs per image, near a trained k_cpt 4e-9 net). With
  ``actor_step_ratio`` it puts the learners side by side, also as ``*_images_per_second``.
* ``sampled_vs_full_step_ratio`` and ``sampled_vs_full_peak_memory_ratio`` — the pragmatic
  critic on the tree (47 columns; an example runs through at most 8), sampled decisions
  against the full tree. Targets: both < 1.
* ``chain_sampled_vs_full_step_ratio`` and ``chain_sampled_vs_full_peak_memory_ratio`` — the
  same on the 8-column chain (static-8's columns), the sampled critic exploring every decision
  in proportion to the leaves below it, as it trains best (:data:`SAMPLED_LEAF`): what
  sampling saves on a net the size of the paper's.
* ``tree_deep_vs_full_step_ratio``, ``tree_deep_vs_full_peak_memory_ratio`` and the chain's
  ``chain_deep_vs_full_*`` — the sampled critic exploring every decision deep
  (:data:`SAMPLED_DEEP`: every explored path runs to a deepest exit, so every column it reaches
  learns from every example, as on the full tree) against the full tree: on the chain that path
  is the whole net; on the tree it is 8 of the 47 column instances.
* ``dqn_images_per_second`` and ``dqn_vs_static8_images_ratio`` — SB3's DQN on the chain
  through the env (:class:`~routing_rl.envs.RoutingSB3VecEnv`, 256 examples in flight, the
  default settings of :func:`~routing_rl.agents.sb3.sb3_kwargs`, learning from the first
  step): training images per second, env stepping, DQN updates and the env's full-tree
  joint training included, against static-8 steps of 128 images, in alternating chunks of
  two iterations each.

Steps are timed alternately (A, B, A, B, ...) and a ratio is the median of the ratios of
neighbouring pairs, so that load from other processes falls on both sides alike. On the CPU
the steps run on one intra-op thread: on a small shared machine a second thread's
synchronisation can make small operations 20× slower at random, which swamps the ratio of
work the targets are about (the thread count used is in the result). Peak memory is measured in a fresh subprocess per mode,
so that neither mode inherits the other's allocations: on CUDA, ``max_memory_allocated``
during the steps minus what was allocated before them; on the CPU, where torch's
allocations are invisible to ``tracemalloc``, the process's peak resident set during the
steps (``VmHWM`` in ``/proc/self/status``, reset through ``/proc/self/clear_refs`` just
before them) minus its resident set before them — the high-water mark of the memory the
steps added (activations kept for backward, gradients, momentum). (Not ``ru_maxrss``: on
Linux a child process inherits its parent's peak through fork and exec.)

* ``{static8,actor_chain,resnet20_exits}_{channels_last,compiled,channels_last_compiled}_speedup`` — eager
  step time / step time with ``--channels-last``, ``--compile`` or both
  (:mod:`routing_rl.training.acceleration`), timed in turns with the eager learner after
  the first (compiling) steps, whose time is ``*_first_steps_seconds``; also ``--precision
  bf16`` on CUDA and on CPUs with native bf16 (it changes results beyond float rounding),
  and on CUDA ``cuda_graphs`` (``--cuda-graphs``). Target
  on the CPU: >= 1.5 for both steps. ``*_paper_schedule_minutes``: the paper's 80,000
  iterations at the measured step time (target on one H100-class GPU: <= 5 minutes per net).
  ``*_update_difference`` — how far a mode's results are from eager ones: after one step from
  the same weights on the same batch, ‖update − eager update‖ / ‖eager update‖; beside it
  ``*_fp64_update_difference``, the eager fp32 update against the same step in fp64, the
  scale of float rounding in that step (BN'd columns at initialisation on random labels make
  it about 1%, not 1e-6).
* ``actor_sure_routers_flush_speedup`` (CPU) — an actor step on the chain whose every router
  exits with a logit margin of :data:`SURE_MARGIN` (as a high-k_cpt actor's routers end up):
  step time computing subnormal floats / step time with them flushed to zero, as every run
  does (:func:`~routing_rl.training.acceleration.flush_denormals`); the same learner in
  turns. ``actor_sure_routers_*_step_seconds`` beside it.
* ``{static8,actor_chain,resnet20_exits}_convolution_share`` (CPU) — the share of an eager step's time spent
  in the convolutions, forward and backward (their operators' own time in ``torch.profiler``,
  median over a few steps); ``*_speedup_bound`` = 1 / that share: the
  speedup of a step whose every other operator, and the Python around them, took no time —
  the ceiling of any fp32 change that leaves the convolutions as they are.

    python benchmarks/bench_learners.py            # prints the JSON result, on the CPU
    python benchmarks/bench_learners.py --only-accelerated --device cuda --repeats 50
    python benchmarks/bench_learners.py --only-flush
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from bench_execution import EXIT_FRACTIONS, set_exit_fractions
from routing_rl.agents.registry import make_learner
from routing_rl.agents.sb3 import ALGORITHMS, sb3_kwargs
from routing_rl.agents.sb3_callbacks import ImageBudget
from routing_rl.envs import ImageTask, JointTraining, RoutingSB3VecEnv
from timing import sync

from routing_rl.training.acceleration import begin_step, compiler_missing, native_bf16, precision_context
from routing_rl.training.config import make_config
from routing_rl.data import SOURCES, RoutingDataset, Split

BATCH_SIZE = 128
CLASSES = 10
MEMORY_STEPS = 3


def _batch(device: torch.device, seed: int = 0) -> Split:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(BATCH_SIZE, 3, 32, 32, generator=generator)
    labels = torch.randint(0, CLASSES, (BATCH_SIZE,), generator=generator)
    return Split(images, labels, torch.zeros(BATCH_SIZE, dtype=torch.long)).to(device)


def _random_dataset(examples: int, seed: int) -> RoutingDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(examples, 3, 32, 32, generator=generator)
    split = Split(images, torch.randint(0, CLASSES, (examples,), generator=generator),
                  torch.randint(0, 2, (examples,), generator=generator))
    return RoutingDataset("random", tuple(str(c) for c in range(CLASSES)), split, split, {}, SOURCES)


def _learner(device: torch.device, **overrides):
    """A learner of ``overrides`` on an image task's net (the paper's nets or the ResNets)."""
    task = ImageTask(_random_dataset(BATCH_SIZE, 2))
    return make_learner(make_config("paper", archs=task.all_archs(), **overrides), task, device)


PAPER_ITERATIONS = 80_000
ACCELERATED_CASES = {"static8": dict(agent="static", arch="static-8"), "actor_chain": dict(agent="actor", arch="chain"),
                     "resnet20_exits": dict(agent="threshold", arch="resnet20-exits")}
ACCELERATIONS = {"channels_last": dict(channels_last=True), "compiled": dict(compile=True),
                 "channels_last_compiled": dict(channels_last=True, compile=True)}


class _Autocast:
    """A learner whose steps run as ``--precision bf16`` runs them (the trainer's context)."""

    def __init__(self, learner, device: torch.device):
        self.learner, self.precision = learner, precision_context(device, "bf16")

    def train_step(self, batch, iteration):
        with self.precision:
            return self.learner.train_step(batch, iteration)


class _CudaGraphs:
    """A ``--cuda-graphs`` learner, its steps begun as the trainer begins them."""

    def __init__(self, learner):
        self.learner = learner

    def train_step(self, batch, iteration):
        begin_step(cuda_graphs=True)
        return self.learner.train_step(batch, iteration)


SURE_MARGIN = 20.0
"""Exit logit over continue at every junction: the deeper paths' probabilities, products of
e^-20 per junction, fall through float32's subnormal range from the fourth column on."""


class _Subnormals:
    """A learner whose steps compute subnormal floats (``keep``) or flush them to zero."""

    def __init__(self, learner, keep: bool):
        self.learner, self.keep = learner, keep

    def train_step(self, batch, iteration):
        torch.set_flush_denormal(not self.keep)
        return self.learner.train_step(batch, iteration)


def sure_routers_flush(device: torch.device, repeats: int) -> dict:
    """An actor chain with sure routers, stepped in turns with subnormals kept and flushed.
    Leaves subnormals flushed, as a run does."""
    if not torch.set_flush_denormal(True):
        return {"actor_sure_routers_flush_speedup": None}  # this CPU cannot flush them
    torch.manual_seed(0)
    learner = _learner(device, agent="actor", arch="chain")
    with torch.no_grad():
        for name in learner.net.junctions:
            last = learner.net.nodes[name].router.layers[-1]
            last.weight.zero_()
            last.bias.copy_(torch.tensor([SURE_MARGIN, 0.0]))
    times = _alternating_step_seconds({"kept": _Subnormals(learner, keep=True), "flushed": _Subnormals(learner, keep=False)},
                                      device, repeats)
    torch.set_flush_denormal(True)
    return {"actor_sure_routers_kept_step_seconds": statistics.median(times["kept"]),
            "actor_sure_routers_flushed_step_seconds": statistics.median(times["flushed"]),
            "actor_sure_routers_flush_speedup": _ratio(times, "kept", "flushed")}


def _accelerated_learner(device: torch.device, mode: str, overrides: dict):
    if mode == "bf16_autocast":
        return _Autocast(_learner(device, **overrides), device)
    if mode == "cuda_graphs":
        return _CudaGraphs(_learner(device, cuda_graphs=True, **overrides))
    return _learner(device, **ACCELERATIONS[mode], **overrides)


def accelerated_comparison(device: torch.device, repeats: int = 7, modes: tuple[str, ...] | None = None) -> dict:
    """Eager against ``--channels-last``, ``--compile``, both (and on CUDA bf16 autocast and
    CUDA graphs) for static-8 and the actor chain, timed in turns after each learner's first
    (compiling) steps. A mode that fails is left out, with its error in ``*_error``."""
    if modes is None:
        modes = tuple(m for m, o in ACCELERATIONS.items() if not o.get("compile") or compiler_missing(device) is None)
        modes += ("bf16_autocast",) if native_bf16(device) else ()
        modes += ("cuda_graphs",) if device.type == "cuda" else ()
    out = {}
    batch = _batch(device)
    for name, overrides in ACCELERATED_CASES.items():
        learners = {"eager": _learner(device, **overrides)}
        weights = copy.deepcopy(learners["eager"].net.state_dict())
        eager_update = _first_update(learners["eager"], weights, batch)
        exact = _learner(device, **overrides)
        exact.net.double()
        exact_update = _first_update(exact, weights, Split(batch.images.double(), batch.labels, batch.source))
        out[f"{name}_fp64_update_difference"] = _relative_difference(eager_update, exact_update)
        for mode in modes:
            start = time.perf_counter()
            try:
                learner = _accelerated_learner(device, mode, overrides)
                update = _first_update(learner, weights, batch)
                _alternating_step_seconds({mode: learner}, device, repeats=0, warmup=1)
            except Exception as error:  # a measurement to report, not a reason to lose the others
                out[f"{name}_{mode}_error"] = f"{type(error).__name__}: {error}"[:500]
                continue
            learners[mode] = learner
            out[f"{name}_{mode}_first_steps_seconds"] = time.perf_counter() - start
            out[f"{name}_{mode}_update_difference"] = _relative_difference(update, eager_update)
        times = _alternating_step_seconds(learners, device, repeats)
        for mode in learners:
            out[f"{name}_{mode}_step_seconds"] = statistics.median(times[mode])
            out[f"{name}_{mode}_paper_schedule_minutes"] = out[f"{name}_{mode}_step_seconds"] * PAPER_ITERATIONS / 60
            if mode != "eager":
                out[f"{name}_{mode}_speedup"] = _ratio(times, "eager", mode)
        if device.type == "cpu":
            share = convolution_share(learners["eager"], device)
            out[f"{name}_convolution_share"] = share
            out[f"{name}_speedup_bound"] = 1 / share
    return out


def _first_update(learner, weights: dict, batch: Split) -> torch.Tensor:
    """The change one ``train_step`` makes to the net's parameters from ``weights``, flat, in fp64."""
    net = getattr(learner, "learner", learner).net
    net.load_state_dict(weights)
    before = [p.detach().double().clone() for p in net.parameters()]
    learner.train_step(batch, 0)
    return torch.cat([(p.detach().double() - b).flatten() for p, b in zip(net.parameters(), before)])


def _relative_difference(update: torch.Tensor, reference: torch.Tensor) -> float:
    return float((update - reference).norm() / reference.norm())


def convolution_share(learner, device: torch.device, steps: int = 5) -> float:
    """The share of a ``train_step``'s time that the convolution operators (forward and
    backward) take themselves, from ``torch.profiler``; the median over ``steps`` steps, each
    profiled and timed on its own, so that a step slowed by another process does not skew it.
    The profiler's own overhead falls on the many small operators (it makes the share a
    slight underestimate), not on these few large ones."""
    batch = _batch(device)
    shares = []
    for iteration in range(steps):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            start = time.perf_counter()
            learner.train_step(batch, iteration)
            seconds = time.perf_counter() - start
        microseconds = sum(event.self_cpu_time_total for event in profiler.key_averages() if "conv" in event.key)
        shares.append(microseconds / 1e6 / seconds)
    return statistics.median(shares)


def _alternating_step_seconds(learners: dict, device: torch.device, repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of ``repeats`` ``train_step`` s of each learner, measured in turns."""
    batch = _batch(device)
    times: dict[str, list[float]] = {name: [] for name in learners}
    for iteration in range(warmup + repeats):
        for name, learner in learners.items():
            sync(device)
            start = time.perf_counter()
            learner.train_step(batch, iteration)
            sync(device)
            if iteration >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def _ratio(times: dict[str, list[float]], numerator: str, denominator: str) -> float:
    return statistics.median(a / b for a, b in zip(times[numerator], times[denominator]))


# A sampled critic that explores as it trains best (docs/results/sampled-critic.md): every
# decision explores (ε stays 1), in proportion to the leaves below each sink, so column k of
# the chain runs on (9 − k)/8 of the batch, 4.5 of its 8 columns per image.
SAMPLED_LEAF = dict(execution="sampled", exploration="leaf", epsilon_half_life=10**9)
# Every decision explores, never into an exit: each example runs one path to a deepest exit.
SAMPLED_DEEP = dict(execution="sampled", exploration="deep", epsilon_half_life=10**9)
CRITIC_MODES = {
    "full": dict(agent="pragmatic-critic", arch="tree", execution="full"),
    "sampled": dict(agent="pragmatic-critic", arch="tree", execution="sampled"),
    "chain-full": dict(agent="pragmatic-critic", arch="chain", execution="full"),
    "chain-sampled": dict(agent="pragmatic-critic", arch="chain", **SAMPLED_LEAF),
    "tree-deep": dict(agent="pragmatic-critic", arch="tree", **SAMPLED_DEEP),
    "chain-deep": dict(agent="pragmatic-critic", arch="chain", **SAMPLED_DEEP),
}


def memory_probe(mode: str, device: torch.device) -> dict:
    """Peak memory added by :data:`MEMORY_STEPS` critic steps in ``mode`` (run in a fresh process)."""
    learner = _learner(device, **CRITIC_MODES[mode])
    batch = _batch(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        for iteration in range(MEMORY_STEPS):
            learner.train_step(batch, iteration)
        torch.cuda.synchronize(device)
        return {"peak_bytes": torch.cuda.max_memory_allocated(device) - before, "method": "cuda max_memory_allocated"}
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current resident set
    before = _status_bytes("VmRSS")
    for iteration in range(MEMORY_STEPS):
        learner.train_step(batch, iteration)
    return {"peak_bytes": _status_bytes("VmHWM") - before, "method": "VmHWM during the steps - VmRSS before"}


def _status_bytes(field: str) -> int:
    """A memory line of ``/proc/self/status`` (given in kB), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field} line; peak CPU memory is measured on Linux only")


def _probe_in_subprocess(mode: str, device: torch.device) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", mode, "--device", str(device)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(device: torch.device, repeats: int = 7, tree_repeats: int = 4) -> dict:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        critic = _learner(device, agent="pragmatic-critic", arch="chain", policy="eps-greedy")
        set_exit_fractions(critic.net, _batch(device).images, EXIT_FRACTIONS)
        chain = _alternating_step_seconds(
            {
                "static-8": _learner(device, agent="static", arch="static-8"),
                "actor": _learner(device, agent="actor", arch="chain"),
                "sampled-critic": critic,
            },
            device, repeats,
        )
        tree = _alternating_step_seconds(
            {mode: _learner(device, **CRITIC_MODES[mode]) for mode in ("full", "sampled", "tree-deep")}, device, tree_repeats)
        chain_critic = _alternating_step_seconds(
            {mode: _learner(device, **CRITIC_MODES[mode]) for mode in ("chain-full", "chain-sampled", "chain-deep")},
            device, repeats)
        accelerated = accelerated_comparison(device, repeats)
        flushed = sure_routers_flush(device, repeats) if device.type == "cpu" else {}
        agents = sb3_throughput(device, tree_repeats)
        step_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    memory = {mode: _probe_in_subprocess(mode, device) for mode in CRITIC_MODES}
    return {
        "device": str(device),
        "batch_size": BATCH_SIZE,
        "step_threads": step_threads if device.type == "cpu" else None,
        "static8_step_seconds": statistics.median(chain["static-8"]),
        "actor_chain_step_seconds": statistics.median(chain["actor"]),
        "actor_step_ratio": _ratio(chain, "actor", "static-8"),
        "sampled_critic_chain_step_seconds": statistics.median(chain["sampled-critic"]),
        "sampled_critic_step_ratio": _ratio(chain, "sampled-critic", "static-8"),
        **{f"{name.replace('-', '_')}_images_per_second": BATCH_SIZE / statistics.median(seconds) for name, seconds in chain.items()},
        "critic_tree_full_step_seconds": statistics.median(tree["full"]),
        "critic_tree_sampled_step_seconds": statistics.median(tree["sampled"]),
        "sampled_vs_full_step_ratio": _ratio(tree, "sampled", "full"),
        "critic_tree_full_peak_bytes": memory["full"]["peak_bytes"],
        "critic_tree_sampled_peak_bytes": memory["sampled"]["peak_bytes"],
        "sampled_vs_full_peak_memory_ratio": memory["sampled"]["peak_bytes"] / memory["full"]["peak_bytes"],
        "critic_chain_full_step_seconds": statistics.median(chain_critic["chain-full"]),
        "critic_chain_sampled_step_seconds": statistics.median(chain_critic["chain-sampled"]),
        "chain_sampled_vs_full_step_ratio": _ratio(chain_critic, "chain-sampled", "chain-full"),
        "critic_chain_full_peak_bytes": memory["chain-full"]["peak_bytes"],
        "critic_chain_sampled_peak_bytes": memory["chain-sampled"]["peak_bytes"],
        "chain_sampled_vs_full_peak_memory_ratio": memory["chain-sampled"]["peak_bytes"] / memory["chain-full"]["peak_bytes"],
        "tree_deep_vs_full_step_ratio": _ratio(tree, "tree-deep", "full"),
        "tree_deep_vs_full_peak_memory_ratio": memory["tree-deep"]["peak_bytes"] / memory["full"]["peak_bytes"],
        "chain_deep_vs_full_step_ratio": _ratio(chain_critic, "chain-deep", "chain-full"),
        "chain_deep_vs_full_peak_memory_ratio": memory["chain-deep"]["peak_bytes"] / memory["chain-full"]["peak_bytes"],
        "peak_memory_method": memory["full"]["method"],
        **accelerated,
        **flushed,
        **agents,
        "compile_skipped": compiler_missing(device),
        "targets": "actor_step_ratio <= 1.3; sampled_vs_full_step_ratio < 1; sampled_vs_full_peak_memory_ratio < 1; "
                   "static8 and actor_chain *_speedup >= 1.5 (CPU)",
    }


def _dqn(device: torch.device):
    """A DQN learning on random images through the env, and its feature trainer."""
    dataset = _random_dataset(4 * BATCH_SIZE, 1)
    config = make_config("paper", agent="dqn", sb3_kwargs={"learning_starts": 0})
    env = RoutingSB3VecEnv(config.options.n_envs, seed=0, dataset=dataset, train=True, device=device,
                        joint=JointTraining.from_config(config))
    env.traffic.record_side_exits = config.side_heads  # as train_sb3 trains DQN
    model = ALGORITHMS["dqn"]("MlpPolicy", env, routed_net=env.net, feature_trainer=env.trainer, routing={},
                              seed=0, device=device, **sb3_kwargs(config, config.options.n_envs))
    return model, env.trainer


def sb3_throughput(device: torch.device, repeats: int, chunk: int = 2) -> dict:
    """Training images per second of DQN through the env and of static-8 steps, in turns."""
    model, trainer = _dqn(device)
    static8 = _learner(device, agent="static", arch="static-8")
    batch = _batch(device)
    rates: dict[str, list[float]] = {"dqn": [], "static-8": []}
    for repeat in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        goal = trainer.updates + chunk
        model.learn(10**9, callback=ImageBudget(trainer, goal), reset_num_timesteps=False)
        sync(device)
        dqn = chunk * BATCH_SIZE / (time.perf_counter() - start)
        start = time.perf_counter()
        for iteration in range(chunk):
            static8.train_step(batch, iteration)
        sync(device)
        if repeat:  # the first chunk pays for warm-up
            rates["dqn"].append(dqn)
            rates["static-8"].append(chunk * BATCH_SIZE / (time.perf_counter() - start))
    return {
        "dqn_images_per_second": statistics.median(rates["dqn"]),
        "static8_images_per_second": statistics.median(rates["static-8"]),
        "dqn_vs_static8_images_ratio": statistics.median(a / b for a, b in zip(rates["dqn"], rates["static-8"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--memory-probe", choices=sorted(CRITIC_MODES), help=argparse.SUPPRESS)
    parser.add_argument("--only-accelerated", action="store_true", help="only eager against --channels-last/--compile, current threads")
    parser.add_argument("--only-flush", action="store_true", help="only the actor with sure routers, subnormals kept and flushed")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per learner (default: 7)")
    parser.add_argument("--modes", nargs="+", choices=[*ACCELERATIONS, "bf16_autocast", "cuda_graphs"],
                        help="with --only-accelerated: these only")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.memory_probe:
        result = memory_probe(args.memory_probe, device)
    elif args.only_accelerated:
        result = {"device": str(device), "threads": torch.get_num_threads(), **accelerated_comparison(device, args.repeats, args.modes and tuple(args.modes))}
    elif args.only_flush:
        torch.set_num_threads(1)
        result = {"device": str(device), "step_threads": 1, **sure_routers_flush(device, args.repeats)}
    else:
        result = run(device, args.repeats)
    print(json.dumps(result, indent=None if args.memory_probe else 1))


if __name__ == "__main__":
    main()
