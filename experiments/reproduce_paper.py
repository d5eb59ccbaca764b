"""Reproduce the paper's experimental section claim by claim: train the runs behind each
figure (local workers or Ray), draw the figures, write docs/reproduction.md.

    python experiments/reproduce_paper.py --figure hybrid --preset cpu-small --seeds 0 1 2
    python experiments/reproduce_paper.py --figure all --dry-run
    python experiments/reproduce_paper.py --figure all --ray-address auto --logdir /shared/runs/paper
"""

import sys

from routing_rl.app.reproduce import main

if __name__ == "__main__":
    sys.exit(main(prog="reproduce_paper.py"))
