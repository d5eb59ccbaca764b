"""The optimisation core shared by the learners and the envs' joint training: configs, SGD, evaluation, checkpoints, logging."""
