"""Train the runs behind a figure, skipping the ones already complete, then draw it.

    python experiments/sweep.py --agents actor --k-cpts 0 4e-9 1.6e-8 --static 1 2 3 4 5 6 7 8 \
        --static-lr auto --preset cpu-small --logdir runs/hybrid --figures figures/hybrid
    python experiments/sweep.py ... --workers 2            # two runs at a time, one thread each
    python experiments/sweep.py ... --ray-address auto     # each run a task on a Ray cluster

The runs train side by side on local worker processes (``--workers``, default: one per CPU
core), or as Ray tasks (``--ray``); a run that fails is named with its error while the
others finish, and the exit status is then 1. Stopped at any moment, the same command
finishes the sweep.

``--static-lr auto`` chooses the static nets' learning rate on the validation split first
(``--select-static-lr`` does only that and prints it).
"""

import argparse
import sys
from functools import partial
from pathlib import Path

from routing_rl.app.figures import check_out_folder, write_figures
from routing_rl.app.sweep import (LR_CANDIDATES, add_backend_arguments, backend, exit_status, run_sweep,
                                  select_static_lr, static_lr_flag, sweep_configs)
from routing_rl.core.memory import retain_freed_memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="*", default=["actor"], help="learners to train at every k_cpt (default: actor)")
    parser.add_argument("--k-cpts", nargs="*", default=["4e-9"], help="k_cpt values, or 'dynamic' (default: 4e-9)")
    parser.add_argument("--static", nargs="*", type=int, default=[], help="static nets to train, by column count")
    parser.add_argument("--static-lr", type=static_lr_flag, default=None,
                        help="learning rate of the static nets, or 'auto' to choose it on validation (default: the preset's)")
    parser.add_argument("--lr-candidates", nargs="*", type=float, default=list(LR_CANDIDATES),
                        help=f"learning rates --static-lr auto tries, preferred first on a tie (default: {LR_CANDIDATES})")
    parser.add_argument("--lr-iterations", type=int, default=None,
                        help="iterations of each --static-lr auto trial (default: 400, or the runs' iterations when fewer)")
    parser.add_argument("--select-static-lr", action="store_true", help="only choose the static nets' learning rate and print it")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0], help="seeds (default: 0)")
    parser.add_argument("--env", default=None, help="routing task id, or PKG.MODULE:TaskId-v0 (default: routing_rl/HybridRouting-v0)")
    parser.add_argument("--arch", default=None, help="net of the routed learners (default: the task's; chain for the paper's)")
    parser.add_argument("--preset", default="cpu-small", help="schedule preset (default: cpu-small)")
    parser.add_argument("--dataset", default=None, help="dataset (default: hybrid)")
    parser.add_argument("--data-dir", default=None, help="folder with your data copies")
    parser.add_argument("--device", default="auto", help="torch device (default: auto)")
    parser.add_argument("--logdir", default="runs", help="folder for the run directories (default: runs)")
    parser.add_argument("--figures", default=None, help="also write the figures of all runs to this folder")
    add_backend_arguments(parser)
    args = parser.parse_args()
    retain_freed_memory()
    machine = dict(env=args.env, dataset=args.dataset, data_dir=args.data_dir, device=args.device, logdir=args.logdir)

    def sweep() -> int:
        if args.figures:  # before hours of training, not after
            check_out_folder(Path(args.figures), "--figures")
        static_lr = args.static_lr
        if args.select_static_lr or static_lr == "auto":
            log = partial(print, file=sys.stderr) if args.select_static_lr else print
            trials = sweep_configs([], [], static_columns=[8], preset=args.preset, **machine)
            static_lr = select_static_lr(args.lr_candidates, args.lr_iterations, preset=args.preset,
                                         seed=(args.seeds or [0])[0], log=log, backend=backend(args, trials), **machine)
            if args.select_static_lr:
                print(f"{static_lr:g}")
                return 0
        configs = sweep_configs(args.agents, args.k_cpts, args.seeds, args.static, arch=args.arch, preset=args.preset,
                                static_lr=static_lr, **machine)
        run_dirs = run_sweep(configs, **backend(args, configs))
        if args.figures:
            print("\n".join(map(str, write_figures(run_dirs, args.figures))))
        return 0

    return exit_status(parser.prog, sweep)


if __name__ == "__main__":
    sys.exit(main())
