"""Time every node and router of a net on the device that will run inference.

    python experiments/profile_latency.py --arch chain --batch-size 64 --device cpu --out profile.json
    python experiments/train_agent.py --cost latency --latency-profile profile.json ...
"""

import sys

from routing_rl.app.latency import profile_main

if __name__ == "__main__":
    sys.exit(profile_main())
