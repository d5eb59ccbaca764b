"""Compare learned video routing with the baselines on the same test clips and nets.

    python experiments/video_report.py runs/video-critic runs/video-dqn --out figures/video
"""

import argparse
import sys

from routing_rl.app.video import video_report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="finished run directories on routing_rl/VideoRouting-v0")
    parser.add_argument("--out", default="figures/video", help="folder for video.json, video.md, video.png")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    args = parser.parse_args()
    try:
        written = video_report(args.runs, args.out, args.device)
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print("\n".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
