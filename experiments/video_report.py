"""Compare learned video routing with the baselines on the same test clips and nets.

    python experiments/video_report.py runs/video-critic runs/video-dqn --out figures/video
"""

import sys

from routing_rl.app.video import main

if __name__ == "__main__":
    sys.exit(main())
