"""Redraw the paper's figures from finished runs.

    python experiments/figures.py runs/* --out figures/
"""

import sys

from routing_rl.app.figures import main

if __name__ == "__main__":
    sys.exit(main(prog="figures.py"))
