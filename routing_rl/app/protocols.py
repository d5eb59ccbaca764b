"""The early-exit field's evaluation protocols, for any routed chain, beside learned routers.

* **Anytime prediction** (:func:`anytime`): every test example runs to each exit in turn;
  each exit's test accuracy against the MACs to reach it (its segments and its own head).
* **Budgeted batch classification** (:func:`budgeted_batch`, MSDNet's recipe, Huang et al.
  2018): for each ``q`` of a grid, the share of examples meant to leave at exit ``k`` is
  ``q^k`` normalised; walking down the chain, exit ``k``'s threshold on the maximum softmax
  probability is set on the **validation** split so that this share leaves there; the
  thresholds are then applied unchanged to the test split. An example that leaves at exit
  ``k`` paid for the segments and the heads ``1..k`` (every earlier head was read to decide).
  The test split is never used to calibrate: thresholds are fixed before it is read.

Learned routers (the run folders of routed nets on the same task) are drawn on the same axes
from their test evaluations; the table gives each one's margin over the budgeted-batch curve
and each exit alone (the upper-left hull of their test points, :mod:`routing_rl.app.frontier`)
at its MACs.

With ``--recalibrate`` every exit is judged with batch-norm statistics averaged over the run's
training part with every example reaching every exit (:func:`recalibrated`): a net trained on
sampled paths keeps in each node the statistics of the examples its policy sent there, which
judge an exit used alone by another population than the one it then sees.

``python experiments/protocols.py RUN_DIR [--routers RUN_DIR ...] --out FOLDER`` writes
``protocols.png``, ``protocols.csv`` and ``protocols.md`` and logs the curves to TensorBoard in
``FOLDER`` (scalars whose step is the mean MACs per example, and the figure).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from routing_rl.agents.threshold import _chain_leaves, exit_positions, geometric_fractions, thresholds_for_fractions
from routing_rl.app.cli import _Parser
from routing_rl.app.figures import check_out_folder, read_metrics, task_key, task_label, test_points, write_or_exit
from routing_rl.app.frontier import frontier_margin, static_frontier
from routing_rl.app.plots import accuracy_macs_figure, write_csv
from routing_rl.app.runs import load_run, prepare_data
from routing_rl.core.graph import RoutedNet
from routing_rl.data import Split
from routing_rl.training.batchnorm import recalibrate
from routing_rl.training.evaluate import check_outputs

MSDNET_Q = tuple(p / 20 for p in range(1, 40))
"""MSDNet's grid of ``q`` (0.05 to 1.95 by 0.05): from most examples at the first exit to most
at the last."""
ANYTIME = "anytime prediction (each exit)"
BUDGETED = "budgeted batch (validated thresholds)"


def chain_exits(net: RoutedNet) -> list[str]:
    """The exits of a chain in depth order; ValueError for a net that is not one."""
    try:
        return _chain_leaves(net)[0]
    except ValueError:
        raise ValueError("the protocols need a chain (each junction: exit or continue), such as resnetD-exits, "
                         "chain or a routable() net; this net branches") from None


def exit_macs(net: RoutedNet) -> tuple[list[int], list[int]]:
    """Per exit, in depth order: the MACs to reach it and run its head (anytime prediction), and
    the MACs of leaving there after reading every earlier head too (budgeted batch). Routers
    are not counted: these protocols do not run them."""
    exits = chain_exits(net)
    reach = [sum(net.macs[name] for name in net.nodes_to(leaf)) for leaf in exits]
    heads = [net.macs[leaf] for leaf in exits]
    return reach, [reach[k] + sum(heads[:k]) for k in range(len(exits))]


@torch.no_grad()
def exit_readings(net: RoutedNet, split: Split, batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """``(confidence, correct)``, each ``(N, K)``: every exit's maximum softmax probability
    (float64) and whether its prediction is right, exits in depth order, in eval mode."""
    if split.frames > 1:
        raise ValueError("the protocols judge single inputs; a split of sequences depends on the memory carried")
    exits = chain_exits(net)
    device = net.leaf_macs.device
    was_training = net.training
    net.eval()
    confidence, correct, nan = [], [], 0
    try:
        for start in range(0, len(split), batch_size):
            x = split.images[start : start + batch_size].to(device)
            y = split.labels[start : start + batch_size].to(device)
            out = net(x, 0.0 if net.k_cpt_input else None)
            logits = torch.stack([out.logits[leaf] for leaf in exits], 1).float()
            nan += int(logits.isnan().flatten(1).any(1).sum())
            confidence.append(F.softmax(logits, -1).amax(-1).double().cpu())
            correct.append((logits.argmax(-1) == y[:, None]).cpu())
    finally:
        net.train(was_training)
    check_outputs(split, nan, len(split))
    return torch.cat(confidence), torch.cat(correct)


def recalibrated(net: RoutedNet, images: torch.Tensor, batch_size: int = 500) -> RoutedNet:
    """A copy of ``net`` whose batch-norm statistics are the averages over ``images``
    ``(N, *input_shape)`` with every example reaching every node (on a chain, each exit's own
    path): the statistics an exit used alone normalises by. ``net`` is left as it is.

    The images go in batches of a seeded random order, mixed as training batches are: the
    averaged variances of batches that each hold one kind of image (a split sorted by source,
    say) would miss the variance between the kinds."""
    net = copy.deepcopy(net)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    recalibrate(net, images[order].to(net.leaf_macs.device), None, 0.0, batch_size)
    return net


def anytime(net: RoutedNet, test: Split) -> list[dict]:
    """Each exit's test accuracy and the MACs to reach it: ``exit``, ``accuracy``, ``mean_macs``."""
    _, correct = exit_readings(net, test)
    reach, _ = exit_macs(net)
    return [{"series": ANYTIME, "exit": leaf, "accuracy": float(correct[:, k].double().mean()), "mean_macs": float(reach[k])}
            for k, leaf in enumerate(chain_exits(net))]


def budgeted_batch(net: RoutedNet, validation: Split, test: Split, qs: Sequence[float] = MSDNET_Q) -> list[dict]:
    """MSDNet's budgeted batch classification (module docstring): per ``q``, the thresholds
    fitted on ``validation`` and what they give there and on ``test``."""
    return calibrate_and_apply(exit_readings(net, validation), exit_readings(net, test), exit_macs(net)[1], qs)


def calibrate_and_apply(validation: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                        leave_macs: Sequence[int], qs: Sequence[float] = MSDNET_Q) -> list[dict]:
    """The budgeted-batch points from exit readings ``(confidence, correct)`` of the validation
    and test splits: thresholds are computed from ``validation`` alone, then applied to ``test``."""
    leave_macs = torch.tensor(list(leave_macs), dtype=torch.float64)
    points = []
    for q in qs:
        fractions = geometric_fractions(q, validation[0].shape[1])
        thresholds = thresholds_for_fractions(validation[0], fractions)
        judged = {}
        for name, (confidence, correct) in (("validation", validation), ("test", test)):
            position = exit_positions(confidence, thresholds)
            judged[name] = (float(correct.gather(1, position[:, None]).double().mean()), float(leave_macs[position].mean()))
        points.append({"series": BUDGETED, "q": q, "thresholds": thresholds.tolist(), "fractions": fractions.tolist(),
                       "validation_accuracy": judged["validation"][0], "validation_mean_macs": judged["validation"][1],
                       "accuracy": judged["test"][0], "mean_macs": judged["test"][1]})
    return points


def router_points(run_dirs: Sequence[Path], backbone: dict) -> list[dict]:
    """The test points of finished routed runs; runs of another task than the backbone's are
    refused."""
    runs = read_metrics(list(run_dirs))
    for run in runs:
        if task_key(run) != task_key(backbone):
            raise ValueError(f"router run {run['run']} is of {task_label(run)}, the backbone's of {task_label(backbone)}; "
                             "compare runs of one task")
    return test_points(runs)


def protocol_points(run_dir: Path, router_dirs: Sequence[Path] = (), recalibrate: bool = False
                    ) -> tuple[list[dict], dict]:
    """Every point of the figure and table: anytime, budgeted batch (the run's own validation
    part and test split, as the run was judged), and the routers'; and the backbone's metrics.
    ``recalibrate``: the exits judged by :func:`recalibrated` statistics of the training part."""
    (backbone,) = read_metrics([Path(run_dir)])
    config, task, net = load_run(run_dir)
    _, train_part, validation, test = prepare_data(config, task)
    validation, test = task.examples(validation), task.examples(test)
    if recalibrate:
        net = recalibrated(net, task.examples(train_part).images)
    points = [*anytime(net, test), *budgeted_batch(net, validation, test)]
    routers = with_margins(router_points(router_dirs, backbone), points)
    return [*points, *routers], backbone


def with_margins(routers: list[dict], points: Sequence[dict]) -> list[dict]:
    """``routers`` with ``vs_budgeted_batch``: accuracy points (×100) over the upper-left hull of
    the budgeted-batch points and each exit alone, at the router's mean MACs. Each exit alone is
    a budget too (everyone leaves there), and the deepest closes the curve's top, which MSDNet's
    grid of ``q`` stops short of."""
    hull = static_frontier((p["mean_macs"], p["accuracy"]) for p in points if p["series"] in (BUDGETED, ANYTIME))
    for point in routers:
        point["vs_budgeted_batch"] = frontier_margin(hull, point["accuracy"], point["mean_macs"])
    return routers


def markdown_table(points: Sequence[dict], title: str) -> str:
    """The protocols' points as markdown: anytime, budgeted batch, then the routers with their margins."""
    lines = [f"# Evaluation protocols: {title}", "", "## Anytime prediction", "",
             "| exit | MACs | test accuracy |", "|---|---|---|"]
    lines += [f"| {p['exit']} | {p['mean_macs'] / 1e6:.2f}M | {100 * p['accuracy']:.2f}% |" for p in points if p["series"] == ANYTIME]
    lines += ["", "## Budgeted batch classification (thresholds calibrated on the validation split)", "",
              "| q | validation accuracy | validation mean MACs | test accuracy | test mean MACs |", "|---|---|---|---|---|"]
    lines += [f"| {p['q']:.2f} | {100 * p['validation_accuracy']:.2f}% | {p['validation_mean_macs'] / 1e6:.2f}M | "
              f"{100 * p['accuracy']:.2f}% | {p['mean_macs'] / 1e6:.2f}M |" for p in points if p["series"] == BUDGETED]
    routers = [p for p in points if p["series"] not in (ANYTIME, BUDGETED)]
    if routers:
        lines += ["", "## Learned routers", "", "| series | run | point | test accuracy | mean MACs | vs budgeted batch (pts) |",
                  "|---|---|---|---|---|---|"]
        for p in routers:
            margin = "left of the curve" if p["vs_budgeted_batch"] is None else f"{p['vs_budgeted_batch']:+.2f}"
            lines.append(f"| {p['series']} | {p['run']} | {p['label'] or p['k_cpt']} | {100 * p['accuracy']:.2f}% | "
                         f"{p['mean_macs'] / 1e6:.2f}M | {margin} |")
    return "\n".join(lines) + "\n"


def log_to_tensorboard(out_dir: Path, points: Sequence[dict], figure) -> None:
    """Each series' test accuracy (%) as scalars whose step is the mean MACs per example, and the figure."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(out_dir)) as writer:
        for point in sorted(points, key=lambda p: p["mean_macs"]):
            tag = "protocols/" + "".join(c if c.isalnum() else "_" for c in point["series"]).strip("_")
            writer.add_scalar(tag, 100 * point["accuracy"], global_step=int(round(point["mean_macs"])))
        writer.add_figure("protocols/accuracy_macs", figure, close=False)


def write_protocols(run_dir: Path, router_dirs: Sequence[Path], out_dir: Path, title: str = "",
                    recalibrate: bool = False) -> list[Path]:
    """Write ``protocols.png``, ``protocols.csv``, ``protocols.md`` and TensorBoard events into
    ``out_dir``; returns the files written. ValueError, before anything is written, for a run
    that has not finished, is not a chain, or router runs of another task."""
    out_dir = Path(out_dir)
    check_out_folder(out_dir)
    points, backbone = protocol_points(Path(run_dir), [Path(d) for d in router_dirs], recalibrate)
    short = title or (f"{backbone['arch']}, run {Path(backbone['run']).name}"
                      + (", batch norm recalibrated" if recalibrate else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [{k: v for k, v in p.items() if not isinstance(v, list)} for p in points]
    write_csv(out_dir / "protocols.csv", rows)
    (out_dir / "protocols.md").write_text(markdown_table(points, title or f"{short}, {task_label(backbone)}"))
    figure = accuracy_macs_figure(points, short)
    figure.savefig(out_dir / "protocols.png", dpi=120)
    log_to_tensorboard(out_dir, points, figure)
    plt.close(figure)
    return [out_dir / "protocols.png", out_dir / "protocols.csv", out_dir / "protocols.md"]


def main(argv: list[str] | None = None, prog: str = "protocols.py") -> int:
    """``RUN_DIR [--routers RUN_DIR ...] --out FOLDER``."""
    parser = _Parser(prog=prog, description="Anytime prediction and budgeted batch classification (thresholds "
                     "calibrated on the validation split) of a routed chain, beside learned routers.")
    parser.add_argument("run", help="the run folder of the routed chain whose exits are judged (e.g. a threshold run)")
    parser.add_argument("--routers", nargs="*", default=[], help="run folders of learned routers on the same task")
    parser.add_argument("--out", default="protocols", help="folder for the figure, table and TensorBoard events")
    parser.add_argument("--title", default="", help="title of the figure and table")
    parser.add_argument("--recalibrate", action="store_true",
                        help="judge the exits with batch-norm statistics of the training part, every example reaching "
                             "every exit (for nets trained on sampled paths)")
    args = parser.parse_args(argv)
    return write_or_exit(parser, args.out, lambda: write_protocols(Path(args.run), args.routers, Path(args.out), args.title,
                                                                   args.recalibrate))


if __name__ == "__main__":
    raise SystemExit(main(prog="python -m routing_rl.app.protocols"))
