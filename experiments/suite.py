"""Train one learner over the task suite and judge it per task (docs/suite.md).

    python experiments/suite.py --agent critic --policy eps-greedy --preset quick
    python experiments/suite.py --agent actor --tasks hybrid hybrid-hard-digits --seeds 0 1 2 --json suite.json

Resumable: run the same command again and finished runs are skipped, interrupted ones resumed.
"""

import sys

from routing_rl.app.suite import main

if __name__ == "__main__":
    sys.exit(main(prog="suite.py"))
