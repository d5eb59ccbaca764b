"""Redraw the paper's figures from finished runs.

    python experiments/figures.py runs/* --out figures/
"""

import argparse
import sys

from routing_rl.app.figures import write_figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories (each with a metrics.json)")
    parser.add_argument("--out", default="figures", help="folder for the PNGs and CSVs (default: figures)")
    parser.add_argument("--title", default="", help="title of the accuracy/MACs plot")
    args = parser.parse_args()
    try:
        written = write_figures(args.runs, args.out, args.title)
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print("\n".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
