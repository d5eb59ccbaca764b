"""The application: command line, runs, the training loop, sweeps, reports and figures."""
