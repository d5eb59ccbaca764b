"""MAC-cost against latency-cost routing on the clock: table and accuracy/time figure.

    python experiments/latency_report.py runs/cost/* --batch-sizes 1 64 256 --out figures/latency
"""

import sys

from routing_rl.app.latency import report_main

if __name__ == "__main__":
    sys.exit(report_main())
