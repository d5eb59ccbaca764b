"""Train the runs behind a figure, skipping the ones already complete, then draw it.

    python experiments/sweep.py --agents actor --k-cpts 0 4e-9 1.6e-8 --static 1 2 3 4 5 6 7 8 \
        --static-lr 0.02 --preset cpu-small --logdir runs/hybrid --figures figures/hybrid
    python experiments/sweep.py --env mytasks:mytasks/Blobs-v0 --agents actor critic --logdir runs/blobs

See ``--help`` for every flag.
"""

import sys

from routing_rl.app.sweep import main

if __name__ == "__main__":
    sys.exit(main(prog="sweep.py"))
