"""CUDA Graphs through ctypes on the driver library (pycuda has no graph API): capture the work
queued on a stream into a graph, instantiate it once, launch it many times.

Capture runs in relaxed mode, so a kernel that still calls the allocator (cuMemAlloc) inside
the captured region does not break the capture; work queued on the stream is recorded, not
run, until the graph is launched.
"""
from __future__ import annotations

import ctypes
import weakref

from ....errors import MinitrainError
from .loader import SharedLibrary, driver_library_path

CAPTURE_MODE_RELAXED = 2
_p = ctypes.c_void_p
_SIGNATURES = {
    "cuStreamBeginCapture_v2": [_p, ctypes.c_int],
    "cuStreamEndCapture": [_p, ctypes.POINTER(_p)],
    "cuGraphInstantiateWithFlags": [ctypes.POINTER(_p), _p, ctypes.c_ulonglong],
    "cuGraphLaunch": [_p, _p],
    "cuGraphExecDestroy": [_p],
    "cuGraphDestroy": [_p],
    "cuGraphGetNodes": [_p, _p, ctypes.POINTER(ctypes.c_size_t)],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}
library = SharedLibrary(lambda: ctypes.CDLL(driver_library_path()), _SIGNATURES)
"""libcuda with the graph functions' argument types set (loaded on first use)."""


class CudaGraphError(MinitrainError):
    """A CUDA Graph call failed (capture, instantiation or launch)."""


def _check(status, call):
    if status:
        name = ctypes.c_char_p()
        library().cuGetErrorName(status, ctypes.byref(name))
        raise CudaGraphError(f"{call} failed: {(name.value or b'unknown error').decode()} ({status})")


_live_graphs = weakref.WeakSet()


def destroy_all_graphs():
    """Destroy every live captured graph now.  A graph that recorded NCCL collectives holds
    resources of their communicator, whose destruction waits for them: the communicator's
    teardown calls this first.  A destroyed graph refuses to launch."""
    for graph in list(_live_graphs):
        graph.destroy()


class CapturedGraph:
    """One captured and instantiated graph; launched on a stream, destroyed with the object
    (or by destroy())."""

    def __init__(self, graph):
        self._lib = library()
        self._graph = graph
        self._exec = _p()
        _check(self._lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), graph, 0),
               "cuGraphInstantiateWithFlags")
        _live_graphs.add(self)

    @property
    def node_count(self):
        """The graph's node count (kernels, copies, memsets)."""
        count = ctypes.c_size_t(0)
        _check(self._lib.cuGraphGetNodes(self._graph, None, ctypes.byref(count)), "cuGraphGetNodes")
        return count.value

    def launch(self, stream):
        if not self._exec:
            raise CudaGraphError("cuGraphLaunch: the graph was destroyed (its NCCL communicator was shut down)")
        _check(self._lib.cuGraphLaunch(self._exec, _p(stream.handle)), "cuGraphLaunch")

    def destroy(self):
        """Release the executable graph and the graph (once)."""
        if self._exec:
            self._lib.cuGraphExecDestroy(self._exec)
            self._exec = _p()
        if self._graph:
            self._lib.cuGraphDestroy(self._graph)
            self._graph = None

    def __del__(self):
        self.destroy()


class StreamCapture:
    """Context manager: the work queued on `stream` inside it becomes `self.graph` (a
    CapturedGraph) instead of running.  On an error inside, the capture is ended and thrown
    away and the error propagates."""

    def __init__(self, stream):
        self.stream = stream
        self.graph = None

    def __enter__(self):
        _check(library().cuStreamBeginCapture_v2(_p(self.stream.handle), CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture")
        return self

    def __exit__(self, kind, error, trace):
        graph = _p()
        status = library().cuStreamEndCapture(_p(self.stream.handle), ctypes.byref(graph))
        if kind is not None:
            if graph:
                library().cuGraphDestroy(graph)
            return False
        _check(status, "cuStreamEndCapture")
        try:
            self.graph = CapturedGraph(graph)
        except CudaGraphError:
            library().cuGraphDestroy(graph)
            raise
        return False
