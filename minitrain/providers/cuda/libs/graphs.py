"""CUDA Graphs through ctypes on the driver library (pycuda has no graph API): capture the work
queued on a stream into a graph, instantiate it once, launch it many times.

Capture runs in relaxed mode, so a kernel that still calls the allocator (cuMemAlloc) inside
the captured region does not break the capture; work queued on the stream is recorded, not
run, until the graph is launched.  A captured graph may be given head copies when it is
instantiated: device-to-device copies that run before everything captured, whose sources a
launch may move (a step's inputs, copied in by the graph itself).
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
    "cuGraphGetRootNodes": [_p, _p, ctypes.POINTER(ctypes.c_size_t)],
    "cuGraphAddMemcpyNode": [ctypes.POINTER(_p), _p, _p, ctypes.c_size_t, ctypes.c_void_p, _p],
    "cuGraphAddDependencies_v2": [_p, _p, _p, _p, ctypes.c_size_t],
    "cuGraphExecMemcpyNodeSetParams": [_p, _p, ctypes.c_void_p, _p],
    "cuCtxGetCurrent": [ctypes.POINTER(_p)],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}
library = SharedLibrary(lambda: ctypes.CDLL(driver_library_path()), _SIGNATURES)
"""libcuda with the graph functions' argument types set (loaded on first use)."""


MEMORYTYPE_DEVICE = 2


class _Memcpy3D(ctypes.Structure):
    """The driver's CUDA_MEMCPY3D: here always a 1-D copy between device pointers."""
    _fields_ = [(f"{side}{name}", kind) for side in ("src", "dst") for name, kind in (
        ("XInBytes", ctypes.c_size_t), ("Y", ctypes.c_size_t), ("Z", ctypes.c_size_t), ("LOD", ctypes.c_size_t),
        ("MemoryType", ctypes.c_int), ("Host", _p), ("Device", ctypes.c_ulonglong), ("Array", _p),
        ("Reserved", _p), ("Pitch", ctypes.c_size_t), ("Height", ctypes.c_size_t))] + [
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t), ("Depth", ctypes.c_size_t)]


def _device_copy(destination, source, nbytes):
    """The parameters of a copy of `nbytes` from one device pointer to another."""
    return _Memcpy3D(srcMemoryType=MEMORYTYPE_DEVICE, srcDevice=source, srcPitch=nbytes, srcHeight=1,
                     dstMemoryType=MEMORYTYPE_DEVICE, dstDevice=destination, dstPitch=nbytes, dstHeight=1,
                     WidthInBytes=nbytes, Height=1, Depth=1)


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
    """One captured graph: instantiated once (`instantiate`), then launched on a stream;
    destroyed with the object (or by destroy())."""

    def __init__(self, graph):
        self._lib = library()
        self._graph = graph
        self._exec = _p()
        self._context = _p()
        self._head_copies = []      # (memcpy node, its parameters)
        _live_graphs.add(self)

    def instantiate(self, head_copies=()):
        """Make the graph executable, with `head_copies` ((destination, source, nbytes) device
        pointers, nbytes > 0) first: a chain of memcpy nodes that every captured root node
        waits for (a captured stream's graph stays one line, which the driver launches fastest)."""
        lib = self._lib
        _check(lib.cuCtxGetCurrent(ctypes.byref(self._context)), "cuCtxGetCurrent")
        count = ctypes.c_size_t(0)
        _check(lib.cuGraphGetRootNodes(self._graph, None, ctypes.byref(count)), "cuGraphGetRootNodes")
        roots = (_p * max(count.value, 1))()
        _check(lib.cuGraphGetRootNodes(self._graph, roots, ctypes.byref(count)), "cuGraphGetRootNodes")
        previous = None
        for destination, source, nbytes in head_copies:
            node, params = _p(), _device_copy(destination, source, nbytes)
            _check(lib.cuGraphAddMemcpyNode(ctypes.byref(node), self._graph, None if previous is None else
                                            ctypes.byref(previous), 0 if previous is None else 1,
                                            ctypes.byref(params), self._context), "cuGraphAddMemcpyNode")
            self._head_copies.append((node, params))
            previous = node
        if previous is not None and count.value:
            last = (_p * count.value)(*([previous.value] * count.value))
            _check(lib.cuGraphAddDependencies_v2(self._graph, last, roots, None, count.value),
                   "cuGraphAddDependencies")
        _check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), self._graph, 0),
               "cuGraphInstantiateWithFlags")

    def set_copy_source(self, index, source):
        """Point head copy `index` at the device pointer `source` for the launches to come (a
        launch already queued keeps the source it had)."""
        node, params = self._head_copies[index]
        params.srcDevice = source
        _check(self._lib.cuGraphExecMemcpyNodeSetParams(self._exec, node, ctypes.byref(params), self._context),
               "cuGraphExecMemcpyNodeSetParams")

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
    CapturedGraph, to instantiate) instead of running.  On an error inside, the capture is ended and thrown
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
        self.graph = CapturedGraph(graph)
        return False
