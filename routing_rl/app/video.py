"""Video routing report: learned policies against the baselines, on the same clips and nets.

``video_report(run_dirs, out_dir)`` takes finished runs on ``routing_rl/VideoRouting-v0``
(any learner, or an SB3 agent) and, for each run's trained net, routes the task's test clips
with the run's learned policy and with the baselines of :mod:`routing_rl.agents.video` —
always-deep, always-cheap, the frame-difference threshold (tuned on the run's validation
clips at the run's k_cpt) and the oracle that recomputes at every cut and change. Every policy
is charged the same cost per frame, ``c_err + k_cpt × MACs``, with ``error_cost`` the
cross-entropy of the frame's prediction (the env's default reward) or its 0/1 error (a
labelling mistake, what an annotator pays); the threshold is tuned for that cost. It writes:

* ``video.json`` — every policy's accuracy, MACs and cost per frame, per-frame curves;
* ``video.md`` — the table, and per run whether the learned policy meets issue 12's target:
  a lower mean cost per frame than every non-oracle baseline, and accuracy within 1 point of
  always-deep at no more than half its MACs per frame; and how much of the gap between
  always-deep and the oracle it closes;
* ``video.png`` — one test clip routed by every policy of the first run, with every
  policy's accuracy and MACs per frame position (:func:`~routing_rl.app.plots.video_figure`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from routing_rl.agents import video as baselines
from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.execution import argmax_decide
from routing_rl.envs.task import task_from_env
from routing_rl.training.checkpoint import load_checkpoint
from routing_rl.training.config import TrainConfig
from routing_rl.training.episodes import Episodes, episode_metrics, run_episodes
from routing_rl.app.plots import video_figure

ACCURACY_TOLERANCE = 0.01
MAC_FRACTION = 0.5
FIGURE_CLIP = 0
NON_ORACLE = ("always-deep", "always-cheap", "difference-threshold")


def load_run(run_dir: Path, device: torch.device):
    """``(config, task, net, decide)`` of a finished run: its trained net and learned policy."""
    run_dir = Path(run_dir)
    config = TrainConfig.from_json((run_dir / "config.json").read_text())
    dataset = {"dataset": config.dataset} if config.dataset is not None else {}
    task, _ = task_from_env(config.env, **dataset)
    if config.spec.trains_through_env:
        from routing_rl.agents.sb3 import MODEL_FILE, load_sb3, sb3_decide

        model, net = load_sb3(run_dir / MODEL_FILE, device=device,
                              net=task.make_net(config.arch, config.width, device=device))
        k_cpt = None if config.dynamic_k_cpt else float(config.k_cpt)
        return config, task, net, sb3_decide(model, net, k_cpt)
    net = task.make_net(config.arch, config.width, k_cpt_input=config.dynamic_k_cpt, device=device)
    net.load_state_dict(load_checkpoint(run_dir / "checkpoint.pt", map_location=device)["learner"]["net"])
    return config, task, net, argmax_decide


def compare(run_dir: Path, device: torch.device, error_cost: str = "cross_entropy") -> tuple[dict, dict[str, Episodes]]:
    """Every policy on the test clips with one run's net, charged ``error_cost``: the summary
    and the episodes."""
    config, task, net, learned = load_run(run_dir, device)
    k_cpt = float(config.k_cpt) if not config.dynamic_k_cpt else 4e-9
    dataset = task.dataset()
    _, validation = dataset.validation_split(config.validation_fraction, config.seed, config.validation_mix)
    threshold, tried = baselines.tune_threshold(net, task, validation, k_cpt, error_kind=error_cost)
    policies = {
        f"learned ({config.agent})": learned,
        "always-deep": baselines.ALWAYS_DEEP,
        "always-cheap": baselines.ALWAYS_CHEAP,
        "difference-threshold": baselines.difference_threshold(threshold),
        "oracle": baselines.Oracle(task.clips["test"].event),
    }
    episodes = {name: run_episodes(net, task, dataset.test, policy, k_cpt, error_cost) for name, policy in policies.items()}
    rows = {}
    for name, run in episodes.items():
        rows[name] = {
            "accuracy": float(run.correct.double().mean()),
            "mean_macs": float(run.macs.double().mean()),
            "leaves": {leaf: float((run.leaf == i).double().mean()) for i, leaf in enumerate(net.leaves)},
            **episode_metrics(run, k_cpt),
        }
    summary = {"run": str(run_dir), "agent": config.agent, "k_cpt": k_cpt, "error_cost": error_cost, "threshold": threshold,
               "threshold_search": tried, "policies": rows, "target": target(rows, f"learned ({config.agent})")}
    return summary, episodes


def target(rows: dict[str, dict], learned: str) -> dict:
    """Issue 12's target for the learned policy, and how close it comes to the oracle."""
    mine, deep, oracle = rows[learned], rows["always-deep"], rows["oracle"]
    cheaper = all(mine["mean_cost"] < rows[name]["mean_cost"] for name in NON_ORACLE)
    accurate = mine["accuracy"] >= deep["accuracy"] - ACCURACY_TOLERANCE
    frugal = mine["mean_macs"] <= MAC_FRACTION * deep["mean_macs"]
    gap = deep["mean_cost"] - oracle["mean_cost"]
    return {
        "lower_cost_than_every_baseline": cheaper,
        "accuracy_within_1_point_of_deep": accurate,
        "at_most_half_deep_macs": frugal,
        "met": cheaper and accurate and frugal,
        "cost_above_oracle": mine["mean_cost"] - oracle["mean_cost"],
        "share_of_deep_to_oracle_gap_closed": (deep["mean_cost"] - mine["mean_cost"]) / gap if gap > 0 else None,
    }


def markdown(summaries: list[dict]) -> str:
    lines = ["| run | policy | accuracy (%) | MACs per frame | × always-deep | cost per frame | reuse | cheap | deep |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for summary in summaries:
        deep = summary["policies"]["always-deep"]["mean_macs"]
        for name, row in summary["policies"].items():
            shares = [f"{100 * share:.0f}%" for share in row["leaves"].values()]
            lines.append(f"| {Path(summary['run']).name} | {name} | {100 * row['accuracy']:.2f} | "
                         f"{row['mean_macs'] / 1e6:.3f}M | {row['mean_macs'] / deep:.3f} | {row['mean_cost']:.4f} | "
                         + " | ".join(shares) + " |")
    lines.append("")
    for summary in summaries:
        goal = summary["target"]
        closed = goal["share_of_deep_to_oracle_gap_closed"]
        lines.append(
            f"- {Path(summary['run']).name} ({summary['agent']}, k_cpt {summary['k_cpt']:g}, error cost "
            f"{summary['error_cost']}, threshold "
            f"{summary['threshold']:.4g}): target {'met' if goal['met'] else 'NOT met'} — lower cost than every "
            f"baseline: {goal['lower_cost_than_every_baseline']}, accuracy within 1 point of always-deep: "
            f"{goal['accuracy_within_1_point_of_deep']}, at most half its MACs: {goal['at_most_half_deep_macs']}; "
            f"cost per frame {goal['cost_above_oracle']:+.4f} above the oracle"
            + (f", {100 * closed:.0f}% of the always-deep-to-oracle gap closed." if closed is not None else ".")
        )
    return "\n".join(lines) + "\n"


def video_report(run_dirs: list[Path], out_dir: Path, device: str | torch.device = "cpu",
                 error_cost: str = "cross_entropy") -> list[Path]:
    """Compare every run's learned policy with the baselines, every policy charged
    ``error_cost`` (``cross_entropy`` or ``zero_one``); write JSON, markdown and PNG."""
    if error_cost not in ERROR_COSTS:
        raise ValueError(f"error_cost must be one of {', '.join(ERROR_COSTS)}, got {error_cost!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    missing = [str(d) for d in map(Path, run_dirs) if not (Path(d) / "metrics.json").is_file()]
    if missing:
        raise ValueError(f"no metrics.json in {', '.join(missing)}: those runs have not finished")
    summaries, first = [], None
    for run_dir in run_dirs:
        summary, episodes = compare(Path(run_dir), device, error_cost)
        summaries.append(summary)
        if first is None:
            first = (run_dir, summary, episodes)
    (out_dir / "video.json").write_text(json.dumps(summaries, indent=2))
    (out_dir / "video.md").write_text(markdown(summaries))
    _, task, net, _ = load_run(Path(first[0]), device)
    clips = task.clips["test"]
    events = ["cut" if c else "change" if h else "" for c, h in zip(clips.cut[FIGURE_CLIP].tolist(), clips.change[FIGURE_CLIP].tolist())]
    events[0] = "start"
    runs = [{"name": name, "leaf": run.leaf[FIGURE_CLIP].tolist(), "correct": run.correct[FIGURE_CLIP].tolist(),
             "accuracy_by_frame": first[1]["policies"][name]["accuracy_by_frame"],
             "macs_by_frame": first[1]["policies"][name]["macs_by_frame"]} for name, run in first[2].items()]
    figure = video_figure(clips.frames[FIGURE_CLIP], events, net.leaves, runs)
    figure.savefig(out_dir / "video.png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return [out_dir / "video.json", out_dir / "video.md", out_dir / "video.png"]


def main(argv: list[str] | None = None, prog: str = "video_report.py") -> int:
    """The video report's command line: ``RUN_DIR ... --out FOLDER --device DEVICE``."""
    parser = argparse.ArgumentParser(prog=prog, description="Compare learned video routing with the baselines.")
    parser.add_argument("runs", nargs="+", help="finished run directories on routing_rl/VideoRouting-v0")
    parser.add_argument("--out", default="figures/video", help="folder for video.json, video.md, video.png")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--error-cost", default="cross_entropy", choices=ERROR_COSTS,
                        help="c_err charged per frame: cross_entropy (the env's reward) or zero_one (default: cross_entropy)")
    args = parser.parse_args(argv)
    try:
        written = video_report(args.runs, args.out, args.device, args.error_cost)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {error}\n")
    print("\n".join(map(str, written)))
    return 0
