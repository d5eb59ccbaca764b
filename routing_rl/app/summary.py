"""The one-screen summary ``experiments/train_agent.py`` prints when a run ends.

Accuracy and mean MACs on the test split, where the test images of each source (MNIST
digits, CIFAR images) leave the net, and, on hybrid, where the point stands against the
static nets of the README's reproduction table (:data:`STATIC_REFERENCE`).
"""

from __future__ import annotations

from routing_rl.app.report import static_accuracy_at

STATIC_REFERENCE = (
    ("static-1", 0.8782, 1.36e6),
    ("static-2", 0.9157, 5.27e6),
    ("static-3", 0.9362, 7.56e6),
    ("static-4", 0.9376, 11.39e6),
    ("static-5", 0.9483, 13.46e6),
    ("static-6", 0.9425, 17.00e6),
    ("static-7", 0.9420, 18.19e6),
    ("static-8", 0.9405, 20.55e6),
)
"""(net, test accuracy, mean MACs) of the static nets on hybrid, preset ``cpu-small``, seed 0
(the README's reproduction table)."""
SOURCE_NAMES = {"mnist": "digits", "cifar": "CIFAR"}


def exits_line(evaluation: dict) -> list[str]:
    """Per source (MNIST/CIFAR on the paper's data; whatever sources a plug-in task names):
    how many test examples leave at each exit, and their mean MACs."""
    lines = []
    sources = next(iter(evaluation["leaves"].values()))["by_source"]
    for source in sources:
        counts = [(leaf, v["by_source"][source], v["macs"]) for leaf, v in evaluation["leaves"].items()]
        total = sum(count for _, count, _ in counts)
        if not total:
            continue
        mean_macs = sum(count * macs for _, count, macs in counts) / total
        where = ", ".join(f"{leaf} {count}" for leaf, count, _ in counts if count)
        lines.append(f"  {SOURCE_NAMES.get(source, source):>7} ({total}): {where}; mean {mean_macs / 1e6:.2f}M MACs")
    return lines


def static_line(accuracy: float, mean_macs: float) -> str:
    """The nearest static net of :data:`STATIC_REFERENCE` and the margin over their curve."""
    name, reference_accuracy, reference_macs = min(STATIC_REFERENCE, key=lambda s: abs(s[2] - mean_macs))
    curve = [(macs, acc) for _, acc, macs in STATIC_REFERENCE]
    line = f"  nearest static net: {name} {100 * reference_accuracy:.2f}% at {reference_macs / 1e6:.2f}M MACs"
    at = static_accuracy_at(curve, mean_macs)
    if at is not None:
        line += f"; static curve at {mean_macs / 1e6:.2f}M: {100 * at:.2f}%, this net {100 * (accuracy - at):+.2f} pts"
    return line


def summary_text(metrics: dict) -> str:
    """The summary of a finished run's ``metrics.json`` content, a few lines per test point."""
    config = metrics["config"]
    policy = f", {config.get('policy') or 'default'} policy" if config["agent"] not in ("static", "threshold") else ""
    lines = [
        f"run {metrics['run']}: {metrics['agent']} on {metrics['arch']}{policy}, preset {config['preset']}, "
        f"{metrics['train_seconds']:.0f} s of training",
    ]
    hybrid = isinstance(metrics.get("dataset"), dict) and metrics["dataset"].get("name") == "hybrid"
    for evaluation in metrics["test"]:
        label = evaluation.get("label") or (f"k_cpt {evaluation['k_cpt']:g}" if evaluation.get("k_cpt") is not None else "")
        lines.append(
            f"test accuracy {100 * evaluation['accuracy']:.2f}% at {evaluation['mean_macs'] / 1e6:.2f}M MACs per image"
            + (f" ({label})" if label else "")
        )
        lines += exits_line(evaluation)
        if hybrid:
            lines.append(static_line(evaluation["accuracy"], evaluation["mean_macs"]))
    if hybrid:
        lines.append("  (static nets: README reproduction table, hybrid, preset cpu-small, seed 0)")
    return "\n".join(lines)
