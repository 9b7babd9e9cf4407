"""CudaProvider: GPUArrays from a caching pool, copies and kernel launches on one stream.

Each session takes its own provider object (`for_session`): its own stream, memory pool and
cuBLAS handle, all in the process's one primary context.  A block freed at a value's last use
goes back to that session's pool, and since the session queues all its work on one stream, the
next allocation can reuse it at once: the stream orders the reuse after the last reader.

Step capture (step_graph.py) routes the step's allocations elsewhere (`allocating`), and while
it captures, host work that must happen on every execution of the step (queueing a verdict
copy, drawing a Dropout seed) is handed to the capture instead of done once (`per_execution`,
`uploaded`).
"""
from __future__ import annotations

import contextlib

import numpy as np
import pycuda.driver as driver
from pycuda.gpuarray import GPUArray
from pycuda.tools import DeviceMemoryPool

from ..base import Provider
from ..cuda_options import ConvSearchOptions
from .capture.fetch import FetchRing
from .capture.step_graph import StepGraphs
from .capture.uploads import UploadRing
from .compiler import module
from .driver import primary_context, register_provider
from .layout import make_contiguous
from .libs.cublas import CublasHandle
from .session_cache import SessionCache

STREAM_NON_BLOCKING = 1     # CU_STREAM_NON_BLOCKING: no implicit order with the legacy stream


class CudaProvider(Provider):
    """The "cuda" provider; `use_tf32` lets float32 GEMMs use TF32 tensor cores (off: strict
    FP32, as PyTorch's and ONNX Runtime's defaults); `conv_search` (a ConvSearchOptions or a
    dict of its fields) sets how convolutions pick their algorithm.  `cache` holds what the
    kernels keep for this provider between calls."""
    name = "cuda"

    def __init__(self, use_tf32=False, conv_search=None):
        self.context = primary_context()
        self.device = self.context.get_device()
        self.stream = driver.Stream()
        self.pool = DeviceMemoryPool()
        self.use_tf32 = bool(use_tf32)
        self.conv_search = ConvSearchOptions.of(conv_search)
        self.cache = SessionCache()
        self.multiprocessors = self.device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
        self.compute_capability = self.device.compute_capability()
        self._blas = None
        self._sync_checks = []
        self._allocate = self.pool.allocate
        self.capture = None             # the StepCaptureRecord while a step is being captured
        self._upload_ring = None
        self._capture_copies = None     # a stream outside the capture, for persistent_from_numpy
        self._fetch_ring = None
        self._spin = None
        register_provider(self)

    def add_sync_check(self, check):
        """Call `check()` whenever the host has waited for this stream: kernels that find bad
        input on the device (a label out of range) report it there, without a sync of their own."""
        self._sync_checks.append(check)

    def run_sync_checks(self):
        """Run the checks that wait for a host sync (see add_sync_check): after one."""
        for check in self._sync_checks:
            check()

    def for_session(self, use_tf32=None, conv_search=None):
        return CudaProvider(self.use_tf32 if use_tf32 is None else use_tf32,
                            self.conv_search if conv_search is None else conv_search)

    @property
    def blas(self):
        """This provider's cuBLAS handle, bound to its stream (created on first use)."""
        if self._blas is None:
            self._blas = CublasHandle(self.stream, self.use_tf32)
        return self._blas

    # ------------------------------------------------------------------ tensors
    def is_native(self, value):
        return isinstance(value, GPUArray)

    def empty(self, shape, dtype):
        return GPUArray(tuple(int(d) for d in shape), np.dtype(dtype), allocator=self._allocate)

    def persistent_empty(self, shape, dtype):
        """A tensor from the session's pool, never from a step's arena: for what outlives a
        step (caches, a captured graph's inputs)."""
        return GPUArray(tuple(int(d) for d in shape), np.dtype(dtype), allocator=self.pool.allocate)

    def persistent_from_numpy(self, array):
        """persistent_empty holding `array`, copied from pinned memory on the stream; while a
        step is being captured, at once on a stream of its own, so that the graph reads the
        values without copying them again on every replay."""
        array = np.asarray(array)
        pinned = driver.pagelocked_empty(array.shape, array.dtype)
        pinned[...] = array
        value = GPUArray(array.shape, array.dtype, gpudata=self.pool.allocate(max(array.nbytes, 1)), base=pinned)
        if array.size and self.capture is None:
            driver.memcpy_htod_async(value.gpudata, pinned, self.stream)
        elif array.size:
            if self._capture_copies is None:
                self._capture_copies = driver.Stream(STREAM_NON_BLOCKING)
            driver.memcpy_htod_async(value.gpudata, pinned, self._capture_copies)
            self._capture_copies.synchronize()
        return value

    @contextlib.contextmanager
    def allocating(self, allocate):
        """Route empty() (every kernel's outputs and scratch) through `allocate(nbytes)`."""
        previous, self._allocate = self._allocate, allocate
        try:
            yield
        finally:
            self._allocate = previous

    def per_execution(self, hook):
        """Run `hook()` now; while a step is being captured, after every launch of its graph
        instead (host bookkeeping of work queued in the step, e.g. reading a verdict)."""
        if self.capture is None:
            hook()
        else:
            self.capture.after_launch.append(hook)

    def uploaded(self, make, shape, dtype):
        """A device array of the host values `make()` returns, made anew for every execution
        (a Dropout seed): copied now through pinned memory; while a step is being captured, a
        persistent array the capture refills before every launch of its graph."""
        if self.capture is not None:
            value = self.persistent_empty(shape, dtype)
            self.capture.uploads.append((value, make))
            return value
        if self._upload_ring is None:
            self._upload_ring = UploadRing(self)
        return self._upload_ring.upload(np.asarray(make(), dtype).reshape(shape))

    def fill_zero(self, value):
        if value.size:
            driver.memset_d8_async(value.gpudata, 0, value.nbytes, self.stream)

    def from_numpy(self, array):
        array = np.asarray(array)
        array = np.ascontiguousarray(array).reshape(array.shape)    # ascontiguousarray makes 0-d 1-d
        value = self.empty(array.shape, array.dtype)
        if array.size:
            driver.memcpy_htod_async(value.gpudata, array, self.stream)
        return value

    def to_numpy(self, value):
        value = self.contiguous(value)
        array = np.empty(value.shape, value.dtype)
        if array.size:
            driver.memcpy_dtoh_async(array, value.gpudata, self.stream)
        self.stream.synchronize()
        self.run_sync_checks()
        return array

    def as_native(self, value):
        return self.contiguous(value) if self.is_native(value) else self.from_numpy(np.asarray(value))

    def contiguous(self, value):
        """`value` when C-contiguous, else a C-contiguous device copy (kernels index densely)."""
        if value.flags.c_contiguous:
            return value
        return make_contiguous(self, value)

    def copy_into(self, dst, src):
        if dst.shape != tuple(np.shape(src)):
            raise ValueError(f"copy_into: destination shape {dst.shape} differs from source shape {np.shape(src)}")
        if self.is_native(src):
            src = self.contiguous(src)
            if src.size:
                driver.memcpy_dtod_async(dst.gpudata, src.gpudata, src.nbytes, self.stream)
        else:
            src = np.ascontiguousarray(src, dtype=dst.dtype)
            if src.size:
                driver.memcpy_htod_async(dst.gpudata, src, self.stream)

    def fetch_async(self, values):
        if self._fetch_ring is None:
            self._fetch_ring = FetchRing(self)
        return self._fetch_ring.fetch(values)

    def step_graphs(self, executor):
        return StepGraphs(executor, self)

    def hold(self, seconds):
        if self._spin is None:
            self._spin = module("timing").get_function("spin")
            self._spin.prepare("q")
        clock_khz = self.device.get_attribute(driver.device_attribute.CLOCK_RATE)
        self._spin.prepared_async_call((1, 1, 1), (1, 1, 1), self.stream, int(seconds * clock_khz * 1e3))

    def time_marker(self):
        event = driver.Event()
        event.record(self.stream)
        return event

    def seconds_between(self, start, end):
        end.synchronize()
        return end.time_since(start) / 1e3

    def synchronize(self):
        self.stream.synchronize()
        self.run_sync_checks()
