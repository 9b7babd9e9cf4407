"""NCCL through ctypes: the communicator of the data-parallel world on this process's GPU, and
the collectives the CUDA kernels queue on a provider's stream.

libnccl.so.2 comes from the nvidia-nccl-cu13 wheel and is found by cuda-pathfinder, as cuBLAS
and cuDNN are (loader.py).  The world communicator is made once per process, collectively: rank
0 draws an ncclUniqueId, its 128 bytes travel to every rank by the broadcast the caller passes
(MPI Bcast of raw bytes: the id holds NUL bytes), and every rank calls ncclCommInitRank on the
device of the current (primary) context, its local rank's GPU.  It is destroyed by the world's
shutdown hook and at exit, while the CUDA context still lives.  Collectives are queued on the given stream, so they record into a
CUDA Graph being captured like any kernel.
"""
from __future__ import annotations

import atexit
import ctypes

import numpy as np

from ....errors import DistributedUnavailableError, MinitrainError, ProviderUnavailableError
from .graphs import destroy_all_graphs
from .loader import SharedLibrary, nvidia_library_path

UNIQUE_ID_BYTES = 128
NCCL_SUM = 0
DATA_TYPE = {np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.float64): 8}


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed to ncclCommInitRank by value."""
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


_p, _i, _size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_SIGNATURES = {
    "ncclGetVersion": [ctypes.POINTER(_i)],
    "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_p), _i, UniqueId, _i],
    "ncclCommDestroy": [_p],
    "ncclAllReduce": [_p, _p, _size, _i, _i, _p, _p],
    "ncclBroadcast": [_p, _p, _size, _i, _i, _p, _p],
    "ncclGetErrorString": ([_i], ctypes.c_char_p),
}


def _open():
    try:
        return ctypes.CDLL(nvidia_library_path("nccl", "nvidia-nccl-cu13"))
    except ProviderUnavailableError as e:
        raise DistributedUnavailableError(f"data-parallel training on CUDA needs NCCL (libnccl.so.2): {e}") from None


library = SharedLibrary(_open, _SIGNATURES)
"""The NCCL shared library with the entry points used here typed (loaded once)."""


class NcclError(MinitrainError, RuntimeError):
    """An NCCL call returned a status other than ncclSuccess."""


def _check(lib, call, status):
    if status != 0:
        text = lib.ncclGetErrorString(status)
        raise NcclError(f"{call} failed: {text.decode() if text else 'unknown error'} (ncclResult_t {status})")


def version():
    """NCCL's version code (major * 10000 + minor * 100 + patch for 2.9 on)."""
    lib, code = library(), ctypes.c_int()
    _check(lib, "ncclGetVersion", lib.ncclGetVersion(ctypes.byref(code)))
    return code.value


class Communicator:
    """An NCCL communicator of `size` ranks on the current device."""

    def __init__(self, unique_id, size, rank):
        self.size, self.rank = size, rank
        self.handle = ctypes.c_void_p()
        lib = library()
        _check(lib, "ncclCommInitRank", lib.ncclCommInitRank(ctypes.byref(self.handle), size, unique_id, rank))

    def all_reduce(self, send, receive, stream):
        """Queue receive = the sum over ranks of send (GPUArrays of one shape and dtype) on
        `stream`."""
        lib = library()
        _check(lib, "ncclAllReduce", lib.ncclAllReduce(int(send.gpudata), int(receive.gpudata), send.size,
                                                       _data_type(send), NCCL_SUM, self.handle, stream.handle))

    def broadcast(self, send, receive, root, stream):
        """Queue receive = rank `root`'s send on every rank (send is read on root only)."""
        lib = library()
        _check(lib, "ncclBroadcast", lib.ncclBroadcast(int(send.gpudata), int(receive.gpudata), receive.size,
                                                       _data_type(receive), root, self.handle, stream.handle))

    def destroy(self):
        """Free the communicator (once; later calls do nothing)."""
        if self.handle.value:
            lib = library()
            status = lib.ncclCommDestroy(self.handle)
            self.handle = ctypes.c_void_p()
            _check(lib, "ncclCommDestroy", status)


def _data_type(array):
    try:
        return DATA_TYPE[np.dtype(array.dtype)]
    except KeyError:
        raise NcclError(f"NCCL collectives here take {[str(d) for d in DATA_TYPE]}, got {array.dtype}") from None


_world_communicator = None


def world_communicator(rank, size, broadcast, add_shutdown_hook):
    """The NCCL communicator of the world of `size` processes, this one `rank`, on this process's
    device, made on the first call, which every rank must make (it is collective):
    `broadcast(buffer)` overwrites a bytearray in place with rank 0's, and
    `add_shutdown_hook(hook)` has the world's shutdown call destroy_world_communicator."""
    global _world_communicator
    if _world_communicator is None:
        lib = library()
        unique_id = UniqueId()
        if rank == 0:
            _check(lib, "ncclGetUniqueId", lib.ncclGetUniqueId(ctypes.byref(unique_id)))
        raw = bytearray(bytes(unique_id))
        broadcast(raw)
        _world_communicator = Communicator(UniqueId.from_buffer_copy(raw), size, rank)
        add_shutdown_hook(destroy_world_communicator)
        atexit.register(destroy_world_communicator)     # registered after the CUDA context: runs before it goes
    return _world_communicator


def destroy_world_communicator():
    """Destroy the world communicator, if one was made, after the captured graphs that may hold
    its resources (ncclCommDestroy would wait for them forever)."""
    global _world_communicator
    if _world_communicator is not None:
        comm, _world_communicator = _world_communicator, None
        destroy_all_graphs()
        comm.destroy()
