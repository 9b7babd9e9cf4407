"""The MPI world of a data-parallel run: which process this is, how many there are, which GPU
of its host it takes.

mpi4py is imported by `init()` alone, so `import minitrain` never starts MPI.  Processes are
launched by MPI (`mpiexec -n N python ...`); a script run without mpiexec is a world of one.
The ranks of one host are found with MPI's shared-memory split, and a rank's local rank is the
GPU it drives (init() hands it to the providers: providers.set_device_index).  `shutdown()` (also run at exit) first runs the hooks that release what lives on
top of MPI (NCCL communicators, which must go while the CUDA context lives), then finalises MPI.
"""
from __future__ import annotations

import atexit
from dataclasses import dataclass

from ..errors import DistributedUnavailableError
from ..providers import set_device_index
from .failure import abort_on_uncaught_exception

INSTALL_HINT = 'pip install -e ".[distributed]" (mpi4py and the mpich wheel, which puts mpiexec in the venv)'


@dataclass(frozen=True)
class World:
    """This process's place in the run: `rank` in [0, size), `local_rank` among the ranks of its
    host (the GPU it takes)."""
    rank: int
    size: int
    local_rank: int


_world = None
_comm = None
_mpi = None           # the mpi4py.MPI module, once init() imported it
_finalised = False
_shutdown_hooks = []


def init():
    """Join the MPI world (once; later calls return the same World).  Installs the handler that
    ends every rank when one raises (failure.py).  DistributedUnavailableError without mpi4py,
    or after shutdown()."""
    global _world, _comm, _mpi
    if _world is not None:
        return _world
    if _finalised:
        raise DistributedUnavailableError("minitrain.distributed.init(): MPI was already finalised by shutdown() in "
                                          "this process; it cannot be started again")
    try:
        from mpi4py import MPI     # optional dependency (the `distributed` extra); importing it starts MPI
    except ImportError as e:
        raise DistributedUnavailableError(f"data-parallel training needs mpi4py, which is not importable ({e}); "
                                          f"{INSTALL_HINT}") from None
    _mpi, _comm = MPI, MPI.COMM_WORLD
    host = _comm.Split_type(MPI.COMM_TYPE_SHARED)
    _world = World(rank=_comm.Get_rank(), size=_comm.Get_size(), local_rank=host.Get_rank())
    host.Free()
    set_device_index(_world.local_rank)
    abort_on_uncaught_exception(_world.rank, _comm)
    atexit.register(shutdown)
    return _world


def world():
    """The current World, or None before init() (and after shutdown())."""
    return _world


def communicator():
    """The MPI communicator of the world (mpi4py's COMM_WORLD); DistributedUnavailableError
    naming `init()` before it."""
    if _comm is None:
        raise DistributedUnavailableError("no distributed world: call minitrain.distributed.init() first "
                                          "(and launch the ranks with mpiexec)")
    return _comm


def is_main():
    """True on rank 0, and in a process that is not part of a world (it is its own main)."""
    return _world is None or _world.rank == 0


def barrier():
    """Wait until every rank reaches this call; nothing to wait for outside a world."""
    if _comm is not None:
        _comm.Barrier()


def add_shutdown_hook(hook):
    """Call `hook()` at shutdown(), before MPI is finalised (last added, first called)."""
    _shutdown_hooks.append(hook)


def shutdown():
    """Release what lives on top of MPI (the shutdown hooks), then finalise MPI.  Safe to call
    more than once; run at exit by init()."""
    global _world, _comm, _finalised
    while _shutdown_hooks:
        _shutdown_hooks.pop()()
    if _comm is None:
        return
    if not _mpi.Is_finalized():
        _mpi.Finalize()
    _world, _comm, _finalised = None, None, True
    set_device_index(None)
