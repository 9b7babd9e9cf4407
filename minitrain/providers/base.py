"""The interface every execution provider implements, in the spirit of ONNX Runtime's
execution providers and tinygrad's per-device allocators.

A provider owns its tensor type ("native" values), their allocation, the copies between host
memory and its memory, and synchronisation.  Kernels allocate their outputs through
`ctx.provider.empty/zeros`; the executor moves values between providers only through
`from_numpy`, `to_numpy` and `copy_into`.
"""
from __future__ import annotations

import abc
import time

import numpy as np


class Provider(abc.ABC):
    """An execution provider: where values live and how they are made and moved."""

    name: str = ""
    # Whether native values live in host memory (NumPy arrays): a plan keeps its host-resident
    # values (learning rates, shapes, what no device reads) at this provider's location.
    host_memory: bool = False

    @abc.abstractmethod
    def from_numpy(self, array):
        """A native value holding `array`'s contents (C-contiguous; may share memory with it
        where the provider's memory is host memory)."""

    @abc.abstractmethod
    def to_numpy(self, value):
        """A NumPy array with `value`'s contents, after the work queued on it is done."""

    @abc.abstractmethod
    def is_native(self, value):
        """Whether `value` is already this provider's tensor type."""

    @abc.abstractmethod
    def empty(self, shape, dtype):
        """An uninitialised native tensor."""

    def zeros(self, shape, dtype):
        """A native tensor of zeros."""
        value = self.empty(shape, dtype)
        self.fill_zero(value)
        return value

    @abc.abstractmethod
    def fill_zero(self, value):
        """Set a native tensor to zero in place."""

    @abc.abstractmethod
    def copy_into(self, dst, src):
        """Copy `src` (native, or a NumPy array) into the native tensor `dst` of the same shape."""

    @abc.abstractmethod
    def synchronize(self):
        """Wait until the work queued so far has finished."""

    def as_native(self, value):
        """`value` itself when native, else a native copy of it (NumPy input)."""
        return value if self.is_native(value) else self.from_numpy(np.asarray(value))

    def for_session(self, use_tf32=False, conv_search=None):
        """The provider a session runs on: one that may own its own stream and memory pool
        (the same object where the provider has no per-session state).  `use_tf32` lets
        float32 matrix products use TF32 where the provider has it, `conv_search` sets the
        convolution algorithm search where there is one (providers/cuda_options.py); others
        ignore them."""
        return self

    def fetch_async(self, values):
        """PendingValues of `values` (name -> native tensor) copied to the host without waiting
        (on the CPU the values are host arrays already)."""
        from .pending import PendingValues
        return PendingValues({name: self.to_numpy(value) for name, value in values.items()})

    # Whether a profiled run (per-node times) may go through step_graphs: where the object
    # still runs the step node by node (the CPU's arena), not as one replayed graph.
    profiles_step_graphs = False

    def step_graphs(self, executor):
        """An object that captures `executor`'s whole step and replays it (providers with
        graphs, like CUDA; the CPU replays its memory plan), or None: the step runs node by
        node with nothing planned."""
        return None

    def hold(self, seconds):
        """Keep the work queued after this call from starting for about `seconds` (a device
        with a queue); used by the profiler so that node times measure the device alone."""

    def time_marker(self):
        """A point in this provider's timeline (host wall clock here; an event on a device)."""
        return time.perf_counter()

    def seconds_between(self, start, end):
        """Seconds from one time_marker to a later one (waiting for the device if needed)."""
        return end - start

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"
