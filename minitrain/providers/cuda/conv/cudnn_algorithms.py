"""cuDNN's legacy algorithms as candidates of the convolution search.

For a key, CudnnFamily asks the _v7 heuristic (libs/cudnn.py) for the direction's algorithms and
offers one CudnnAlgorithm per supported algorithm: its workspace from cudnnGet*WorkspaceSize,
its determinism and math type from the answer.  An algorithm runs the primitive with cuDNN and
adds the bias with bias.py's kernel (cudnnAddTensor took a third longer).
"""
from __future__ import annotations

import ctypes
import logging

import numpy as np

from ..driver import device_ptr
from ..libs import cudnn
from . import bias as conv_bias

log = logging.getLogger("minitrain.cuda.cudnn")


class CudnnAlgorithm:
    """One cuDNN algorithm of one direction, as the _v7 heuristic offered it for one key."""
    family = "cudnn"

    def __init__(self, direction, algo, math_type, workspace, deterministic, rank):
        self.direction, self.algo, self.math_type = direction, algo, math_type
        self.workspace, self.deterministic, self.rank = workspace, deterministic, rank
        tensor_op = math_type in (cudnn.CUDNN_TENSOR_OP_MATH, cudnn.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        self.name = (cudnn.PREFIX[direction] + cudnn.ALGORITHM_NAMES[direction][algo]
                     + ("_tensor_op" if tensor_op else ""))

    def __repr__(self):
        return f"<{self.name} workspace={self.workspace}>"

    def workspace_bytes(self, key):
        return self.workspace

    def supports(self, key):
        return True   # made for its key by CudnnFamily

    def heuristic_rank(self, key):
        return self.rank

    def run(self, provider, key, buffers):
        plan = cudnn.plan_for(key.geom, key.n, key.dtype)
        handle = cudnn.handle_for(provider)
        scalar = ctypes.c_double if key.dtype == "float64" else ctypes.c_float
        one, zero = scalar(1.0), scalar(0.0)
        workspace = provider.empty((self.workspace,), np.uint8) if self.workspace else None
        if self.direction == "weight":
            cols, img, out = buffers
            operands, bias = (img, cols), None
        else:
            source, w, bias, out = buffers
            operands = (source, w) if self.direction == "forward" else (w, source)
        descriptors = [getattr(plan, name) for name in cudnn.DESCRIPTORS[self.direction]]
        cudnn.call(cudnn.CALLS[self.direction][2], handle, ctypes.byref(one), descriptors[0], device_ptr(operands[0]),
                   descriptors[1], device_ptr(operands[1]), plan.conv(self.math_type), self.algo,
                   device_ptr(workspace) if workspace is not None else None, self.workspace, ctypes.byref(zero),
                   descriptors[2], device_ptr(out))
        if bias is not None:
            conv_bias.add_bias(provider, out, bias, out.shape[1])


class CudnnFamily:
    """cuDNN's algorithms for a key, for the search to time with minitrain's own: `for_key`
    returns one CudnnAlgorithm per algorithm the _v7 heuristic finds supported (none when
    libcudnn is missing or the key is not for cuDNN).  `own_first(key)`: whether the heuristic
    mode should still try minitrain's kernels before cuDNN's (the small-channel shapes its
    direct kernel is for); otherwise cuDNN's first choice leads."""

    def __init__(self, own_first):
        self.own_first = own_first

    def for_key(self, provider, key):
        if not cudnn.supports(key) or not cudnn.available():
            return []
        try:
            return self._query(provider, key)
        except cudnn.CudnnError as e:
            log.warning("cuDNN offers no algorithm for %s: %s", key, e)
            return []

    def _query(self, provider, key):
        plan = cudnn.plan_for(key.geom, key.n, key.dtype)
        handle = cudnn.handle_for(provider)
        query_math, allowed, forced = cudnn.math_types(key)
        query, workspace_query, _ = cudnn.CALLS[key.direction]
        descriptors = [getattr(plan, name) for name in cudnn.DESCRIPTORS[key.direction]]
        count = len(cudnn.ALGORITHM_NAMES[key.direction])
        perfs, returned = (cudnn.AlgoPerf * count)(), ctypes.c_int(0)
        cudnn.call(query, handle, descriptors[0], descriptors[1], plan.conv(query_math), descriptors[2], count,
                   ctypes.byref(returned), perfs)
        base = 0.5 if self.own_first(key) else -1.0
        found, names = [], set()
        for perf in perfs[:returned.value]:
            if perf.status != cudnn.CUDNN_STATUS_SUCCESS or perf.mathType not in allowed:
                continue
            math_type = perf.mathType if forced is None else forced
            size = ctypes.c_size_t(0)
            status = getattr(cudnn.library(), workspace_query)(handle, descriptors[0], descriptors[1],
                                                               plan.conv(math_type), descriptors[2], perf.algo,
                                                               ctypes.byref(size))
            if status != cudnn.CUDNN_STATUS_SUCCESS:
                continue
            algorithm = CudnnAlgorithm(key.direction, perf.algo, math_type, size.value,
                                       perf.determinism == cudnn.CUDNN_DETERMINISTIC, base + len(found) / 100)
            if algorithm.name not in names:
                names.add(algorithm.name)
                found.append(algorithm)
        return found
