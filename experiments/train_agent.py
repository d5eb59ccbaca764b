"""Train a routed network with any learner on any routing env.

    python experiments/train_agent.py                                   # actor chain, hybrid data, quick preset
    python experiments/train_agent.py --agent=critic --policy=eps-greedy
    python experiments/train_agent.py --agent=static --arch=static-3 --preset=cpu-small
    python experiments/train_agent.py --resume runs/actor-chain-20261126-101500
    torchrun --nproc_per_node=8 experiments/train_agent.py --agent=critic   # data parallel: docs/training.md

Watch it with ``tensorboard --logdir runs``. See ``--help`` or docs/flags.md for every flag.
Ctrl-C or SIGTERM at any moment, the imports included, ends it with one line (exit 130 / 143).
"""

import signal
import sys

received = []


def interrupted_while_starting(signum: int) -> None:
    """Ctrl-C or SIGTERM before the command line handles signals: nothing has started yet."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"\ntrain_agent.py: interrupted ({signal.Signals(signum).name}) while starting; nothing was written",
          file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":
    # a KeyboardInterrupt inside a library's import can leave it half imported (numpy without
    # its functions): signals are only noted until the imports are done
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: received.append(signum))
    from torch.distributed.elastic.multiprocessing.errors import record

    from routing_rl.app.cli import main

    if received:
        interrupted_while_starting(received[0])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda signum, frame: interrupted_while_starting(signum))
    # under torchrun, a process's uncaught error reaches the launcher's failure summary
    sys.exit(record(main)(prog="train_agent.py", leaving=True))
