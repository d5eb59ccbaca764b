"""The static frontier: what a routed net is judged against.

A routed net should beat every static net at its cost, and every mixture of two static
nets (sending a share of the examples through one and the rest through the other gives
any point on the segment between them). So the frontier of a set of static nets is the
upper-left hull of their (mean MACs, accuracy) points: dominated nets (no more accurate than
a cheaper one) and nets below the segment joining two others are dropped, and the frontier
is linear between the points that remain. Right of its most accurate point it is flat (a
deeper, worse net is never the reference); left of its cheapest point it says nothing.
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
