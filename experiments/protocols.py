"""The early-exit field's evaluation protocols for a routed chain, beside learned routers.

    python experiments/protocols.py runs/threshold-resnet20 --routers runs/actor-resnet20 --out protocols/

Writes protocols.png (anytime prediction, budgeted batch with thresholds calibrated on the
validation split, the routers' test points), protocols.csv, protocols.md and TensorBoard
events into --out (see routing_rl/app/protocols.py).
"""

import sys

from routing_rl.app.protocols import main

if __name__ == "__main__":
    sys.exit(main(prog="protocols.py"))
