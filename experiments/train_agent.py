"""Train a routed network with any learner on any routing env.

    python experiments/train_agent.py                                   # actor chain, hybrid data, quick preset
    python experiments/train_agent.py --agent=critic --policy=eps-greedy
    python experiments/train_agent.py --agent=static --arch=static-3 --preset=cpu-small
    python experiments/train_agent.py --resume runs/actor-chain-20261126-101500
    torchrun --nproc_per_node=8 experiments/train_agent.py --agent=critic   # data parallel, see the README

Watch it with ``tensorboard --logdir runs``. See ``--help`` for every flag.
Ctrl-C or SIGTERM at any moment, the imports included, ends it with one line (exit 130 / 143).
"""

import signal
import sys


def interrupted_while_starting(signum=signal.SIGINT, frame=None):
    """Ctrl-C or SIGTERM before the command line handles signals: nothing has started yet."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"\ntrain_agent.py: interrupted ({signal.Signals(signum).name}) while starting; nothing was written",
          file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, interrupted_while_starting)
    try:
        from torch.distributed.elastic.multiprocessing.errors import record

        from routing_rl.app.cli import main
    except KeyboardInterrupt:
        interrupted_while_starting()
    # under torchrun, a process's uncaught error reaches the launcher's failure summary
    sys.exit(record(main)(prog="train_agent.py", leaving=True))
