"""The static frontier: what a routed net is judged against.

A routed net should beat every static net at its cost, and every mixture of two static
nets (sending a share of the examples through one and the rest through the other gives
any point on the segment between them). So the frontier of a set of static nets is the
upper-left hull of their (mean MACs, accuracy) points: dominated nets (no more accurate than
a cheaper one) and nets below the segment joining two others are dropped, and the frontier
is linear between the points that remain. Right of its most accurate point it is flat (a
deeper, worse net is never the reference); left of its cheapest point it says nothing.

A run is judged only against static nets of its own task, trained on the same images for as
long, and tested on the same examples (:func:`comparable`): a short run is never set against
a longer schedule's nets, nor a point on 64 test images beside one on 1,500.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Point = tuple[float, float]
"""(mean MACs per example, accuracy as a fraction)."""


def static_frontier(points: Iterable[Point]) -> list[Point]:
    """The frontier's corner points, in order of MACs (both coordinates increasing).

    >>> static_frontier([(1, 0.80), (2, 0.90), (3, 0.85), (4, 0.95)])
    [(1, 0.8), (2, 0.9), (4, 0.95)]
    """
    hull: list[Point] = []
    # cheapest first, and at equal MACs the most accurate first (the others are dominated)
    for macs, accuracy in sorted(points, key=lambda p: (p[0], -p[1])):
        if hull and accuracy <= hull[-1][1]:
            continue  # dominated: a cheaper (or as cheap) net is at least as accurate
        while len(hull) >= 2 and _below_chord(hull[-2], hull[-1], (macs, accuracy)):
            hull.pop()
        hull.append((float(macs), float(accuracy)))
    return hull


def _below_chord(left: Point, middle: Point, right: Point) -> bool:
    """Whether ``middle`` lies on or under the segment from ``left`` to ``right``."""
    cross = (middle[0] - left[0]) * (right[1] - left[1]) - (middle[1] - left[1]) * (right[0] - left[0])
    return cross >= 0


def frontier_accuracy(frontier: Sequence[Point], macs: float) -> float | None:
    """The frontier's accuracy at ``macs`` MACs per example: linear between its points, flat
    right of the last, None left of the first (or for an empty frontier)."""
    if not frontier or macs < frontier[0][0]:
        return None
    for (left_macs, left_acc), (right_macs, right_acc) in zip(frontier, frontier[1:]):
        if macs <= right_macs:
            return left_acc + (macs - left_macs) / (right_macs - left_macs) * (right_acc - left_acc)
    return frontier[-1][1]


def frontier_margin(frontier: Sequence[Point], accuracy: float, macs: float) -> float | None:
    """Accuracy points (×100) of a net above the frontier at its mean MACs (None where the
    frontier says nothing)."""
    reference = frontier_accuracy(frontier, macs)
    return None if reference is None else 100 * (accuracy - reference)


SCHEDULE = ("preset", "iterations", "batch_size", "train_examples", "validation_fraction", "validation_mix")
"""The config fields that decide which training images, and how many, a net learned from."""
COMPARED = ("env", "dataset", "seed", *SCHEDULE)
"""The config fields two runs must share to be compared: the task, the schedule, and the seed
(it draws the validation part and any test subset)."""


def test_subset(run: dict) -> tuple[int, int] | None:
    """The test examples a run (a ``metrics.json``'s content) was judged on: None for its whole
    test split, else ``(how many, the seed that drew them)`` (``--eval-examples`` below the
    split's size)."""
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    limit = config.get("eval_examples")
    if limit is None:
        return None
    dataset = run.get("dataset") if isinstance(run.get("dataset"), dict) else {}
    size = (dataset.get("sizes") or {}).get("test") if isinstance(dataset.get("sizes"), dict) else None
    if size is None:  # a task without sizes: it ran out of examples if it judged fewer than the limit
        tests = run.get("test")
        examples = tests[0].get("examples") if isinstance(tests, list) and tests and isinstance(tests[0], dict) else None
        size = examples if isinstance(examples, int) and examples < limit else None
    return None if size is not None and limit >= size else (limit, config.get("seed"))


def comparable(run: dict, other: dict) -> bool:
    """Whether two runs' points may be judged against each other: the same :data:`COMPARED`
    config fields (a field neither run's config holds counts as the same) and test examples."""
    config, others = run.get("config") or {}, other.get("config") or {}
    return all(config.get(k) == others.get(k) for k in COMPARED) and test_subset(run) == test_subset(other)
