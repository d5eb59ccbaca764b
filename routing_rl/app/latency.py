"""MAC-cost against latency-cost routing, on the clock: profiles, wall time, table and figure.

* ``python experiments/profile_latency.py --arch chain --batch-size 64 --device cpu --out p.json``
  times every node and router of a fresh net on the device that will run inference; train
  with ``--cost latency --latency-profile p.json`` (e.g. on a GPU) to charge those times.
* ``python experiments/latency_report.py RUN_DIR ... --batch-sizes 1 64 256 --out DIR`` loads
  each finished run's net, evaluates its test accuracy and measures the wall time per
  example of dynamic execution at each batch size — the runs interleaved in rounds, the
  median of the rounds — and writes ``latency.csv``, ``accuracy_time.png`` (accuracy/MACs
  beside accuracy/time) and ``latency.md``: for every latency-cost point, the fastest
  MAC-cost point within 0.5 accuracy point, and their ratio of time per example. Runs of
  several tasks or test sets (env, dataset and test examples: :func:`routing_rl.app.figures.by_task`)
  get one subfolder of these each: a point is only matched with points of its own task and test set.

Beside each run's routing the report times its *oracle* (:mod:`routing_rl.core.oracle`): on
the same images, the cheapest routing under the run's cost model that gets as many of them
right, each example sent to a leaf chosen knowing every head's prediction. It is the least
any router could spend on that net at that accuracy; ``oracle_same_as_macs`` says whether
the MAC cost model would have chosen exactly the same routing (it does wherever the two rank
the leaves alike, as on the chain; on the tree they may break ties between equally deep
leaves differently).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from routing_rl.app.cli import _Parser, _positive_int
from routing_rl.app.figures import by_task, check_out_folder, distinct, read_metrics
from routing_rl.app.plots import accuracy_time_figure, write_csv
from routing_rl.app.runs import load_run, prepare_data, resolve_device
from routing_rl.core.execution import dynamic, route
from routing_rl.core.k_cpt import CostModel, eval_values
from routing_rl.core.latency import latency_cost, profile_latency
from routing_rl.core.files import file_problem
from routing_rl.core.graph import RoutedNet
from routing_rl.core.oracle import PathPolicy, leaf_correct, oracle_leaves
from routing_rl.data import DataNotFoundError
from routing_rl.nets.multiscale import build
from routing_rl.training.config import TrainConfig
from routing_rl.training.cost import COST_FILE, run_cost_model, write_cost_model
from routing_rl.training.footprint import check_fits
from routing_rl.training.evaluate import evaluate

TOLERANCE = 0.005
"""Equal accuracy: within half a percentage point."""


@torch.no_grad()
def seconds_per_example(net: RoutedNet, images: torch.Tensor, k_cpt: float, batch_size: int,
                        leaf: torch.Tensor | None = None) -> float:
    """Wall time of dynamic execution of ``images`` in batches of ``batch_size``, per example;
    with ``leaf`` ``(len(images),)``, of routing each image to that leaf instead."""
    device = net.leaf_macs.device
    k = k_cpt if net.k_cpt_input else None
    paths = None if leaf is None else PathPolicy(net)
    start = time.perf_counter()
    for first in range(0, len(images), batch_size):
        batch = images[first : first + batch_size]
        if paths is None:
            dynamic(net, batch, k)
        else:
            route(net, batch, paths.decide(leaf[first : first + batch_size]), k)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / len(images)


def charged_cost(config: TrainConfig, net: RoutedNet, run_dir: Path) -> CostModel:
    """The cost model a finished run was trained with: read back, never measured again."""
    if config.cost != "macs" and not (run_dir / COST_FILE).is_file():
        raise ValueError(f"{run_dir} was trained with --cost {config.cost} but holds no {COST_FILE}")
    return run_cost_model(config, net, run_dir)


@torch.no_grad()
def oracle_point(net: RoutedNet, images: torch.Tensor, labels: torch.Tensor, k_cpt: float, cost: CostModel) -> dict:
    """The oracle routing of ``images`` at the accuracy ``net``'s own routing reaches on them:
    ``oracle_leaf`` ``(B,)``, ``oracle_accuracy``, ``oracle_mean_macs`` and
    ``oracle_same_as_macs`` (whether MAC costs give the same routing)."""
    k = k_cpt if net.k_cpt_input else None
    labels = labels.to(images.device)
    right = int((dynamic(net, images, k).pred == labels).sum())
    correct = leaf_correct(net, images, labels, k)
    leaf = oracle_leaves(correct, cost.leaf, right)
    by_macs = oracle_leaves(correct, CostModel.macs(net).leaf, right)
    return {"oracle_leaf": leaf, "oracle_accuracy": float(correct[torch.arange(len(leaf), device=leaf.device), leaf].double().mean()),
            "oracle_mean_macs": float(net.leaf_macs[leaf].double().mean()), "oracle_same_as_macs": bool(torch.equal(leaf, by_macs))}


def measure(run_dirs: list[Path], batch_sizes: list[int], examples: int = 1000, repeats: int = 5,
            device: str = "cpu") -> list[dict]:
    """One point per run, k_cpt (every value of a dynamic one) and batch size: ``series``,
    ``run``, ``task`` (its name in :func:`~routing_rl.app.figures.by_task`), ``cost``,
    ``k_cpt``, ``batch_size``, ``accuracy`` and ``mean_macs`` on the run's test split, ``seconds_per_image`` (median over ``repeats`` interleaved rounds on the first
    ``examples`` test images), the oracle's ``oracle_seconds_per_image`` on them (timed in the
    same rounds) with the fields of :func:`oracle_point`, and the ``threads`` used."""
    device = resolve_device(device)
    run_dirs = distinct(run_dirs)
    runs = read_metrics(run_dirs)
    task_of = {id(run): name for name, group in by_task(runs).items() for run in group}
    entries = []
    for run_dir, run in zip(run_dirs, runs):
        config, task, net = load_run(run_dir, device)
        cost = charged_cost(config, net, run_dir)
        *_, test = prepare_data(config, task)
        images, labels = test.images[:examples].to(device), test.labels[:examples]
        for k_cpt in eval_values(config.k_cpt):
            result = evaluate(net, test, k_cpt)
            oracle = oracle_point(net, images, labels, k_cpt, cost)
            entries.append(({"series": f"{config.agent}, {config.cost} cost", "run": str(run_dir),
                             "task": task_of[id(run)], "cost": config.cost,
                             "k_cpt": k_cpt, "accuracy": result["accuracy"], "mean_macs": result["mean_macs"],
                             **{key: value for key, value in oracle.items() if key != "oracle_leaf"}},
                            net, images, oracle["oracle_leaf"]))
    times = {(i, b, oracle): [] for i in range(len(entries)) for b in batch_sizes for oracle in (False, True)}
    for round_ in range(repeats + 1):  # round 0 warms up
        for i, (point, net, images, leaf) in enumerate(entries):
            for batch_size in batch_sizes:
                for oracle in (False, True):
                    seconds = seconds_per_example(net, images, point["k_cpt"], batch_size, leaf if oracle else None)
                    if round_:
                        times[i, batch_size, oracle].append(seconds)
    return [
        {**point, "batch_size": b, "seconds_per_image": statistics.median(times[i, b, False]),
         "oracle_seconds_per_image": statistics.median(times[i, b, True]), "threads": torch.get_num_threads()}
        for i, (point, *_) in enumerate(entries) for b in batch_sizes
    ]


def matches(points: list[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """For every latency-cost point, the fastest MAC-cost point of the same task and batch
    size within ``tolerance`` accuracy, and ``time_ratio`` = latency point's time / that point's."""
    out = []
    for point in points:
        if point["cost"] != "latency":
            continue
        rivals = [p for p in points if p["cost"] == "macs" and p["batch_size"] == point["batch_size"]
                  and p.get("task") == point.get("task") and abs(p["accuracy"] - point["accuracy"]) <= tolerance]
        if rivals:
            rival = min(rivals, key=lambda p: p["seconds_per_image"])
            out.append({"batch_size": point["batch_size"], "latency": point, "macs": rival,
                        "time_ratio": point["seconds_per_image"] / rival["seconds_per_image"]})
    return out


def markdown(points: list[dict], found: list[dict]) -> str:
    lines = ["| cost | k_cpt | batch | accuracy | mean MACs | µs per example | oracle accuracy (timed images) | "
             "oracle MACs | oracle µs | oracle same as by MACs |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in sorted(points, key=lambda p: (p["batch_size"], p["cost"], p["k_cpt"])):
        lines.append(f"| {p['cost']} | {p['k_cpt']:g} | {p['batch_size']} | {100 * p['accuracy']:.2f}% | "
                     f"{p['mean_macs'] / 1e6:.2f}M | {1e6 * p['seconds_per_image']:.1f} | {100 * p['oracle_accuracy']:.2f}% | "
                     f"{p['oracle_mean_macs'] / 1e6:.2f}M | {1e6 * p['oracle_seconds_per_image']:.1f} | "
                     f"{'yes' if p['oracle_same_as_macs'] else 'no'} |")
    lines += ["", f"Latency-cost points against the fastest MAC-cost point within {100 * TOLERANCE:.1f} accuracy point:", "",
              "| batch | latency k_cpt | accuracy | µs | MAC k_cpt | accuracy | µs | time ratio |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in found:
        a, b = m["latency"], m["macs"]
        lines.append(f"| {m['batch_size']} | {a['k_cpt']:g} | {100 * a['accuracy']:.2f}% | {1e6 * a['seconds_per_image']:.1f} | "
                     f"{b['k_cpt']:g} | {100 * b['accuracy']:.2f}% | {1e6 * b['seconds_per_image']:.1f} | {m['time_ratio']:.3f} |")
    if not found:
        lines.append("| (no latency-cost point has a MAC-cost point within the tolerance) |||||||")
    return "\n".join(lines) + "\n"


def write_latency_report(points: list[dict], out_dir: Path) -> list[Path]:
    """``latency.csv``, ``latency.md`` and one ``accuracy_time_b{batch}.png`` per batch size,
    in ``out_dir``, or in one subfolder of it per task when the points are of several."""
    tasks: dict[str, list[dict]] = {}
    for point in points:
        tasks.setdefault(point.get("task", ""), []).append(point)
    if len(tasks) == 1:
        return _write_task(points, Path(out_dir), "")
    return [path for name, group in tasks.items() for path in _write_task(group, Path(out_dir) / name, f"{name}: ")]


def _write_task(points: list[dict], out_dir: Path, title: str) -> list[Path]:
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "latency.csv", out_dir / "latency.md"]
    write_csv(written[0], points)
    written[1].write_text(markdown(points, matches(points)))
    oracles = [{"series": "oracle of each run (knows the labels; timed images)", "batch_size": p["batch_size"], "accuracy": p["oracle_accuracy"],
                "mean_macs": p["oracle_mean_macs"], "seconds_per_image": p["oracle_seconds_per_image"]} for p in points]
    for batch_size in sorted({p["batch_size"] for p in points}):
        figure = accuracy_time_figure([p for p in points + oracles if p["batch_size"] == batch_size],
                                      f"{title}dynamic execution at batch {batch_size} (torch threads: {points[0]['threads']})")
        path = out_dir / f"accuracy_time_b{batch_size}.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written.append(path)
    return written


def report_main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="latency_report.py", description="MAC-cost vs latency-cost routing on the clock.")
    parser.add_argument("runs", nargs="+", help="finished run directories (--cost macs and --cost latency)")
    parser.add_argument("--batch-sizes", nargs="+", type=_positive_int, default=[1, 64, 256],
                        help="inference batch sizes (default: 1 64 256)")
    parser.add_argument("--examples", type=_positive_int, default=1000, help="test images timed per round (default: 1000)")
    parser.add_argument("--repeats", type=_positive_int, default=5, help="interleaved timing rounds (default: 5)")
    parser.add_argument("--device", default="cpu", help="device to time on (default: cpu)")
    parser.add_argument("--out", default="figures/latency", help="output folder (default: figures/latency)")
    args = parser.parse_args(argv)
    try:
        check_out_folder(Path(args.out))
        points = measure(args.runs, args.batch_sizes, args.examples, args.repeats, args.device)
        written = write_latency_report(points, args.out)
    except (ValueError, DataNotFoundError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except OSError as error:
        parser.exit(2, f"{parser.prog}: error: cannot write into --out {args.out}: {error.strerror or error}; choose another --out\n")
    for path in written:
        if path.name == "latency.md":
            print(path.read_text())
    print("\n".join(map(str, written)))
    return 0


def profile_main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="profile_latency.py", description="Time every node and router of a net on this device.")
    parser.add_argument("--arch", default="chain", help="chain or tree (default: chain)")
    parser.add_argument("--width", type=_positive_int, default=1)
    parser.add_argument("--classes", type=_positive_int, default=10)
    parser.add_argument("--k-cpt-input", action="store_true", help="routers read k_cpt (for --k-cpt dynamic runs)")
    parser.add_argument("--batch-size", type=_positive_int, default=64, help="inference batch size to profile at (default: 64)")
    parser.add_argument("--repeats", type=_positive_int, default=15)
    parser.add_argument("--device", default="cpu", help="device (default: cpu)")
    parser.add_argument("--out", required=True, help="JSON file to write (give it to --latency-profile)")
    args = parser.parse_args(argv)
    problem = file_problem(Path(args.out))
    if problem:  # before the timing, not after
        parser.exit(2, f"{parser.prog}: error: --out {problem}; choose another --out\n")
    try:
        device = resolve_device(args.device)
        make = lambda width: build(args.arch, width, args.classes, k_cpt_input=args.k_cpt_input)  # noqa: E731
        check_fits(TrainConfig(arch=args.arch, width=args.width, k_cpt="dynamic" if args.k_cpt_input else 4e-9),
                   make, device, batch_size=args.batch_size)
        net = make(args.width).to(device)
        model = latency_cost(net, profile_latency(net, args.batch_size, repeats=args.repeats))
    except (ValueError, MemoryError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    write_cost_model(Path(args.out), model)
    print(json.dumps({name: round(cost) for name, cost in model.node.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(report_main())
