"""The scheduler process: `gpusched run`."""

from gpusched.daemon.daemon import Daemon, DaemonOptions
from gpusched.daemon.main import run_main

__all__ = ["Daemon", "DaemonOptions", "run_main"]
