"""Launching a test worker on an MPI world of N processes: `launch(n, scenario, *args)` runs
`mpiexec -n N python tests/distributed_worker.py SCENARIO ARGS...` in a subprocess with this
tree's minitrain, and returns the CompletedProcess.  `mpiexec()` finds mpiexec next to the
interpreter (the venv of the `distributed` extra) or on PATH; `needs_mpi` skips a test where
mpi4py or mpiexec is missing."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "distributed_worker.py")


def mpiexec():
    """The mpiexec launcher to use, or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


needs_mpi = pytest.mark.skipif(mpiexec() is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")


def launch(n, scenario, *args, timeout=120, env=None):
    """Run the worker's `scenario` on `n` ranks (one OpenMP thread each, this tree first on
    PYTHONPATH); the CompletedProcess (stdout and stderr as text)."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    environment = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(env or {})}
    command = [mpiexec(), "-n", str(n), sys.executable, WORKER, scenario, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd=ROOT)
