"""cuDNN 9's legacy convolution API through ctypes: handles, descriptors and algorithm queries.

libcudnn is found by cuda-pathfinder (the nvidia-cudnn-cu13 wheel, conda or a system install)
and loaded on first use; cuDNN 9's shim then dlopens its sub-libraries (libcudnn_graph,
libcudnn_ops, libcudnn_cnn, the engines) by soname, so the ones beside it are loaded first,
globally, as PyTorch does: a cuDNN of another version elsewhere on the loader's path cannot
then be mixed in.  When libcudnn cannot be loaded, `available()` is False, the conv search's
cuDNN families offer no algorithm and it runs on minitrain's own kernels alone.

The three primitives of conv/kernels.py map onto cuDNN's calls on one descriptor set (image
tensor x, filter w, column tensor y, convolution descriptor; cross-correlation, NCHW, 1D as 2D
with a unit axis):
  * forward (columns = W (*) image):  cudnnConvolutionForward(x -> y)
  * data (image = W^T (*) columns):   cudnnConvolutionBackwardData(y -> x)  (ConvTranspose)
  * weight (dW):                      cudnnConvolutionBackwardFilter(x, y -> dw)
The search's candidates made of them are in conv/cudnn_algorithms.py (and the backend API's
engine configurations, cudnn_backend.py and conv/cudnn_engines.py, which reach the engines
these legacy calls do not).  cuDNN takes symmetric pads only: other keys stay on minitrain's
kernels.

Math types: float16 and bfloat16 data compute in float32 (PSEUDO_HALF, PSEUDO_BFLOAT16) with
tensor ops allowed; float32
runs CUDNN_FMA_MATH unless the provider allows TF32 (CUDNN_DEFAULT_MATH would allow TF32 on
Ampere and later, so strict FP32 needs FMA_MATH); float64 computes in double.
"""
from __future__ import annotations

import ctypes
import glob
import logging
import math
import os
import threading
from functools import lru_cache

from ....errors import MinitrainError
from .loader import SharedLibrary, nvidia_library_path

log = logging.getLogger("minitrain.cuda.cudnn")

# cudnn_graph.h / cudnn_ops.h / cudnn_cnn.h (cuDNN 9)
CUDNN_STATUS_SUCCESS = 0
CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16 = 0, 1, 2, 9
CUDNN_TENSOR_NCHW = 0
CUDNN_CROSS_CORRELATION = 1
CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH = 0, 1, 2, 3
CUDNN_DETERMINISTIC = 1
INT_MAX = 2 ** 31 - 1

# cudnnConvolutionFwdAlgo_t, cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdFilterAlgo_t, in
# enum order (the _COUNT value is the length)
ALGORITHM_NAMES = {
    "forward": ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
                "WINOGRAD_NONFUSED"),
    "data": ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    "weight": ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
}
PREFIX = {"forward": "cudnn_fwd_", "data": "cudnn_bwd_data_", "weight": "cudnn_bwd_filter_"}

# (data type, compute type) per element type
DATA_TYPES = {"float16": (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT), "bfloat16": (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT),
              "float32": (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT), "float64": (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE)}
HALF_TYPES = ("float16", "bfloat16")

# Sub-libraries, loaded before the shim needs them (dependencies first); others beside
# libcudnn (newer releases add some) follow in name order.
SUBLIBRARIES = ("graph", "engines_precompiled", "engines_runtime_compiled", "engines_tensor_ir", "heuristic",
                "ext", "ops", "cnn", "adv")


class AlgoPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (the three share one layout)."""
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("mathType", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


_p, _i, _z = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_I, _Z, _P, _A = ctypes.POINTER(_i), ctypes.POINTER(_z), ctypes.POINTER(_p), ctypes.POINTER(AlgoPerf)
_QUERY = [_p, _p, _p, _p, _p, _i, _I, _A]
_WORKSPACE = [_p, _p, _p, _p, _p, _i, _Z]
_RUN = [_p, _p, _p, _p, _p, _p, _p, _i, _p, _z, _p, _p, _p]
_SIGNATURES = {
    "cudnnCreate": [_P],
    "cudnnDestroy": [_p],
    "cudnnSetStream": [_p, _p],
    "cudnnCreateTensorDescriptor": [_P],
    "cudnnSetTensorNdDescriptor": [_p, _i, _i, _I, _I],
    "cudnnDestroyTensorDescriptor": [_p],
    "cudnnCreateFilterDescriptor": [_P],
    "cudnnSetFilterNdDescriptor": [_p, _i, _i, _i, _I],
    "cudnnDestroyFilterDescriptor": [_p],
    "cudnnCreateConvolutionDescriptor": [_P],
    "cudnnSetConvolutionNdDescriptor": [_p, _i, _I, _I, _I, _i, _i],
    "cudnnSetConvolutionGroupCount": [_p, _i],
    "cudnnSetConvolutionMathType": [_p, _i],
    "cudnnDestroyConvolutionDescriptor": [_p],
    "cudnnGetConvolutionForwardAlgorithm_v7": _QUERY,
    "cudnnGetConvolutionBackwardDataAlgorithm_v7": _QUERY,
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7": _QUERY,
    "cudnnGetConvolutionForwardWorkspaceSize": _WORKSPACE,
    "cudnnGetConvolutionBackwardDataWorkspaceSize": _WORKSPACE,
    "cudnnGetConvolutionBackwardFilterWorkspaceSize": _WORKSPACE,
    "cudnnConvolutionForward": _RUN,
    "cudnnConvolutionBackwardData": _RUN,
    "cudnnConvolutionBackwardFilter": _RUN,
    "cudnnGetErrorString": ([_i], ctypes.c_char_p),
    "cudnnGetVersion": ([], ctypes.c_size_t),
}
# per direction: the _v7 query, the workspace query and the call; each takes its descriptors
# in the order DESCRIPTORS names (plan attributes)
CALLS = {
    "forward": ("cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionForwardWorkspaceSize",
                "cudnnConvolutionForward"),
    "data": ("cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardDataWorkspaceSize",
             "cudnnConvolutionBackwardData"),
    "weight": ("cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnGetConvolutionBackwardFilterWorkspaceSize",
               "cudnnConvolutionBackwardFilter"),
}
DESCRIPTORS = {"forward": ("img", "filt", "col"), "data": ("filt", "col", "img"), "weight": ("img", "col", "filt")}


class CudnnError(MinitrainError, RuntimeError):
    """A cuDNN call returned a status other than CUDNN_STATUS_SUCCESS."""


class CudnnUnavailable(MinitrainError, RuntimeError):
    """libcudnn could not be loaded (the reason is the message)."""


_library = None
_failure = None
_lock = threading.RLock()


def _open():
    """libcudnn, opened globally after the sub-libraries beside it (dependencies first), so the
    shim's own dlopen of them finds these."""
    path = nvidia_library_path("cudnn", "nvidia-cudnn-cu13")
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    folder = os.path.dirname(path)
    found = {os.path.basename(p): p for p in glob.glob(os.path.join(folder, "libcudnn_*.so.9"))}
    order = [f"libcudnn_{name}.so.9" for name in SUBLIBRARIES]
    for name in [n for n in order if n in found] + sorted(set(found) - set(order)):
        try:
            ctypes.CDLL(found[name], mode=ctypes.RTLD_GLOBAL)
        except OSError as e:   # cuDNN reports what it then misses (SUBLIBRARY_LOADING_FAILED)
            log.info("cuDNN: could not preload %s: %s", name, e)
    return lib


_shared = SharedLibrary(_open, _SIGNATURES)


def _load():
    """libcudnn with the entry points used here typed, if it is cuDNN 9."""
    lib = _shared()
    version = lib.cudnnGetVersion()
    if version // 10000 != 9:
        raise CudnnUnavailable(f"the libcudnn found is cuDNN {version}; these bindings are for cuDNN 9")
    return lib


def library():
    """The loaded libcudnn; raises CudnnUnavailable (once logged) when it cannot be loaded."""
    global _library, _failure
    with _lock:
        if _library is None and _failure is None:
            try:
                _library = _load()
            except Exception as e:   # no pathfinder, no wheel, a missing symbol, another major version
                _failure = f"cuDNN is not available ({type(e).__name__}: {e}); pip install minitrain[cudnn]"
                log.info("%s: convolutions run on minitrain's own kernels", _failure)
    if _library is None:
        raise CudnnUnavailable(_failure)
    return _library


_hidden = None


def hide(reason):
    """Make `available()` False until `unhide()` (benchmarks of minitrain's own algorithms)."""
    global _hidden
    _hidden = reason


def unhide():
    global _hidden
    _hidden = None


def available():
    """Whether libcudnn 9 loads (and is not hidden)."""
    if _hidden is not None:
        return False
    try:
        library()
        return True
    except CudnnUnavailable:
        return False


def check(call, status):
    """Raise CudnnError naming `call` and cudnnGetErrorString(status) when status is not success."""
    if status != CUDNN_STATUS_SUCCESS:
        text = library().cudnnGetErrorString(status)
        raise CudnnError(f"{call} failed with {text.decode() if text else 'status'} ({status})")


def call(name, *args):
    """library().name(*args), its status checked."""
    check(name, getattr(library(), name)(*args))


def _ints(values):
    return (ctypes.c_int * len(values))(*(int(v) for v in values))


# --------------------------------------------------------------------------- handles, descriptors
class Handle:
    """One cuDNN handle bound to a provider's stream."""

    def __init__(self, stream):
        self.lib = library()
        handle = _p()
        call("cudnnCreate", ctypes.byref(handle))
        self.handle = handle
        call("cudnnSetStream", self.handle, _p(stream.handle))

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None and handle.value:
            try:
                self.lib.cudnnDestroy(handle)
            except Exception:   # interpreter shutdown: the library or context may be gone
                pass


def handle_for(provider):
    """The provider's cuDNN handle (created on first use, bound to its stream)."""
    return provider.cache.get("cudnn handle", lambda: Handle(provider.stream)).handle


def _as_2d(values, fill):
    """Per-axis values of a 1D convolution with a leading unit axis (cuDNN needs rank >= 4)."""
    return (fill,) + tuple(values) if len(values) == 1 else tuple(values)


def _dense_strides(dims):
    strides, step = [], 1
    for d in reversed(dims):
        strides.append(step)
        step *= max(1, d)
    return tuple(reversed(strides))


class Plan:
    """The descriptors of one geometry, batch and element type: image tensor `img`, column
    tensor `col`, filter `filt`, and a convolution descriptor per math type (made on first use)."""

    def __init__(self, geom, n, dtype):
        self.lib = library()
        self.data_type, self.compute_type = DATA_TYPES[dtype]
        self.geom = geom
        self._owned = []
        self.img = self._tensor((n, geom.img_channels) + _as_2d(geom.img_spatial, 1))
        self.col = self._tensor((n, geom.col_channels) + _as_2d(geom.col_spatial, 1))
        self.filt = self._make("Filter")
        dims = (geom.col_channels, geom.img_channels // geom.group) + _as_2d(geom.kernel, 1)
        call("cudnnSetFilterNdDescriptor", self.filt, self.data_type, CUDNN_TENSOR_NCHW, len(dims), _ints(dims))
        self._convs = {}

    def _make(self, kind):
        desc = _p()
        call(f"cudnnCreate{kind}Descriptor", ctypes.byref(desc))
        self._owned.append((kind, desc))
        return desc

    def _tensor(self, dims):
        desc = self._make("Tensor")
        call("cudnnSetTensorNdDescriptor", desc, self.data_type, len(dims), _ints(dims), _ints(_dense_strides(dims)))
        return desc

    def conv(self, math_type):
        """The convolution descriptor running with `math_type`."""
        with _lock:
            desc = self._convs.get(math_type)
            if desc is None:
                g = self.geom
                desc = self._make("Convolution")
                call("cudnnSetConvolutionNdDescriptor", desc, len(_as_2d(g.kernel, 1)), _ints(_as_2d(g.pads_begin, 0)),
                     _ints(_as_2d(g.strides, 1)), _ints(_as_2d(g.dilations, 1)), CUDNN_CROSS_CORRELATION,
                     self.compute_type)
                call("cudnnSetConvolutionGroupCount", desc, g.group)
                call("cudnnSetConvolutionMathType", desc, math_type)
                self._convs[math_type] = desc
        return desc

    def __del__(self):
        for kind, desc in getattr(self, "_owned", ()):
            try:
                getattr(self.lib, f"cudnnDestroy{kind}Descriptor")(desc)
            except Exception:   # interpreter shutdown
                pass


@lru_cache(maxsize=256)
def plan_for(geom, n, dtype):
    return Plan(geom, n, dtype)


# --------------------------------------------------------------------------- algorithms
def supports(key):
    """Whether cuDNN can run `key`: symmetric pads, 32-bit sizes, and column dims that cuDNN's
    forward-output rule gives back from the image (not so for a ConvTranspose whose
    output_padding reaches a whole stride)."""
    g = key.geom
    if g.pads_begin != g.pads_end or key.dtype not in DATA_TYPES:
        return False
    if max(key.n * g.img_channels * math.prod(g.img_spatial), key.n * g.col_channels * math.prod(g.col_spatial),
           g.col_channels * g.img_channels // g.group * math.prod(g.kernel)) > INT_MAX:
        return False
    return all((i + 2 * p - d * (k - 1) - 1) // s + 1 == o
               for i, o, k, s, d, p in zip(g.img_spatial, g.col_spatial, g.kernel, g.strides, g.dilations,
                                           g.pads_begin))


def math_types(key):
    """(math type set on the descriptor for the query, math types an answer may run with, the
    math type to run an allowed answer with or None for its own)."""
    if key.dtype in HALF_TYPES:
        return CUDNN_TENSOR_OP_MATH, {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH,
                                      CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION}, None
    if key.dtype == "float32" and key.tf32:
        return CUDNN_DEFAULT_MATH, {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH}, None
    if key.dtype == "float32":
        return CUDNN_FMA_MATH, {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH}, CUDNN_FMA_MATH
    return CUDNN_DEFAULT_MATH, {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH}, None
