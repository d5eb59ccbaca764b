"""Train a routed network with any learner on any routing env.

    python experiments/train_agent.py                                   # actor chain, hybrid data, quick preset
    python experiments/train_agent.py --agent=critic --policy=eps-greedy
    python experiments/train_agent.py --agent=static --arch=static-3 --preset=cpu-small
    python experiments/train_agent.py --resume runs/actor-chain-20261126-101500
    torchrun --nproc_per_node=8 experiments/train_agent.py --agent=critic   # data parallel, see the README

Watch it with ``tensorboard --logdir runs``. See ``--help`` for every flag.
"""

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from routing_rl.app.cli import main

if __name__ == "__main__":
    # under torchrun, a process's uncaught error reaches the launcher's failure summary
    sys.exit(record(main)(prog="train_agent.py"))
