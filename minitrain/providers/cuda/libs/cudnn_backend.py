"""cuDNN 9's backend (graph) API through ctypes: descriptors, the one-operation convolution
graph of a key, the engine heuristics' configurations and their notes.

The legacy calls of cudnn.py reach only the engines behind the legacy algorithm enums; the
backend API lists every engine that supports a graph, as PyTorch's cudnn.benchmark does.  The
graph of a key is one convolution forward, backward data or backward filter operation (dense
NCHW tensors, 1D as 2D with a unit axis; groups implied by the filter's channels); the search's
candidates made of its execution plans are in conv/cudnn_engines.py.

Filters (as PyTorch's): engines that down-convert inputs are never offered; float32 without
TF32 drops engines with the tensor-core note; deterministic mode drops the nondeterministic
ones (through the search's `deterministic` attribute); engines that need runtime compilation
(NVRTC, seconds per plan) are skipped, so the search stays fast.

The three primitives on the graph's tensors (uid 1 image, 2 filter, 3 columns):
  * forward:  Y(columns) = conv(X(image), W)
  * data:     dX(image) = conv_backward_data(dY(columns), W)
  * weight:   dW = conv_backward_filter(X(image), dY(columns))
"""
from __future__ import annotations

import ctypes
import logging

from . import cudnn
from .loader import SharedLibrary

log = logging.getLogger("minitrain.cuda.cudnn")

# cudnnBackendDescriptorType_t
CONVOLUTION, ENGINE, ENGINECFG, ENGINEHEUR, EXECUTION_PLAN, KNOB_CHOICE = 1, 2, 3, 4, 5, 7
OPERATION = {"forward": 10, "weight": 11, "data": 12}
OPERATIONGRAPH, VARIANT_PACK, TENSOR = 15, 16, 17
# cudnnBackendAttributeType_t
T_HANDLE, T_DATA_TYPE, T_INT64, T_FLOAT, T_DOUBLE, T_VOID_PTR = 0, 1, 3, 4, 5, 6
T_CONVOLUTION_MODE, T_HEUR_MODE, T_KNOB_TYPE, T_NUMERICAL_NOTE, T_BACKEND_DESCRIPTOR, T_BEHAVIOR_NOTE = \
    7, 8, 9, 11, 15, 19
# cudnnBackendAttributeName_t
CONV_COMP_TYPE, CONV_MODE, CONV_DILATIONS, CONV_STRIDES, CONV_POST_PAD, CONV_PRE_PAD, CONV_DIMS = range(100, 107)
HEUR_MODE, HEUR_GRAPH, HEUR_RESULTS = 200, 201, 202
CFG_ENGINE, CFG_KNOB_CHOICES = 300, 302
PLAN_HANDLE, PLAN_CONFIG, PLAN_WORKSPACE = 400, 401, 402
KNOB_TYPE, KNOB_VALUE = 600, 601
# per direction: alpha, beta, conv desc, then its three tensors in (attribute, uid) pairs
OPERATION_ATTRS = {
    "forward": (700, 701, 702, ((704, 1), (703, 2), (705, 3))),     # X, W, Y
    "data": (706, 707, 708, ((710, 1), (709, 2), (711, 3))),        # DX, W, DY
    "weight": (712, 713, 714, ((716, 1), (715, 2), (717, 3))),      # X, DW, DY
}
GRAPH_OPS, GRAPH_HANDLE = 801, 800
TENSOR_ALIGNMENT, TENSOR_DATA_TYPE, TENSOR_DIMS, TENSOR_STRIDES, TENSOR_UID = 900, 901, 902, 903, 906
PACK_UIDS, PACK_POINTERS, PACK_WORKSPACE = 1000, 1001, 1003
ENGINE_INDEX, ENGINE_NUMERICAL_NOTE, ENGINE_BEHAVIOR_NOTE = 1301, 1303, 1305
# notes and modes
NOTE_TENSOR_CORE, NOTE_DOWN_CONVERT, NOTE_NONDETERMINISTIC = 0, 1, 4
BEHAVIOR_RUNTIME_COMPILATION = 0
MODE_INSTANT, MODE_FALLBACK, MODE_A = 0, 2, 3
ALIGNMENT = 16
IMAGE, FILTER, COLUMNS = 1, 2, 3

MAX_CONFIGS = 10    # allowed configurations taken from each heuristics mode (PyTorch times 10)
MAX_RESULTS = 64    # configurations read from the heuristics, before filtering
MAX_KNOBS = 32

_p, _i64 = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "cudnnBackendCreateDescriptor": [ctypes.c_int, ctypes.POINTER(_p)],
    "cudnnBackendDestroyDescriptor": [_p],
    "cudnnBackendFinalize": [_p],
    "cudnnBackendSetAttribute": [_p, ctypes.c_int, ctypes.c_int, _i64, _p],
    "cudnnBackendGetAttribute": [_p, ctypes.c_int, ctypes.c_int, _i64, ctypes.POINTER(_i64), _p],
    "cudnnBackendExecute": [_p, _p, _p],
}
_lib = SharedLibrary(cudnn.library, _SIGNATURES)
"""libcudnn (cudnn.py's) with the backend entry points typed."""


class Descriptor:
    """One backend descriptor, destroyed with the object."""

    def __init__(self, kind):
        self.lib = _lib()
        self.value = _p()
        cudnn.check("cudnnBackendCreateDescriptor", self.lib.cudnnBackendCreateDescriptor(kind, ctypes.byref(self.value)))
        self.keep = []      # descriptors this one refers to, kept alive with it

    def set(self, name, kind, values, ctype):
        array = (ctype * len(values))(*values)
        cudnn.check(f"cudnnBackendSetAttribute({name})",
                    self.lib.cudnnBackendSetAttribute(self.value, name, kind, len(values), array))

    def set_descriptors(self, name, descriptors):
        self.keep.extend(descriptors)
        self.set(name, T_BACKEND_DESCRIPTOR, [d.value.value for d in descriptors], _p)

    def get(self, name, kind, count, ctype):
        array, got = (ctype * count)(), _i64(0)
        cudnn.check(f"cudnnBackendGetAttribute({name})",
                    self.lib.cudnnBackendGetAttribute(self.value, name, kind, count, ctypes.byref(got), array))
        return list(array[:got.value])

    def finalize(self):
        cudnn.check("cudnnBackendFinalize", self.lib.cudnnBackendFinalize(self.value))
        return self

    def __del__(self):
        value = getattr(self, "value", None)
        if value is not None and value.value:
            try:
                self.lib.cudnnBackendDestroyDescriptor(value)
            except Exception:   # interpreter shutdown
                pass


def _tensor(uid, dims, data_type):
    desc = Descriptor(TENSOR)
    desc.set(TENSOR_DATA_TYPE, T_DATA_TYPE, [data_type], ctypes.c_int)
    desc.set(TENSOR_DIMS, T_INT64, dims, _i64)
    desc.set(TENSOR_STRIDES, T_INT64, cudnn._dense_strides(dims), _i64)
    desc.set(TENSOR_UID, T_INT64, [uid], _i64)
    desc.set(TENSOR_ALIGNMENT, T_INT64, [ALIGNMENT], _i64)
    return desc.finalize()


def operation_graph(handle, key):
    """The finalized one-operation graph of `key`'s primitive."""
    g = key.geom
    data_type, compute_type = cudnn.DATA_TYPES[key.dtype]
    as_2d = cudnn._as_2d
    tensors = {
        IMAGE: _tensor(IMAGE, (key.n, g.img_channels) + as_2d(g.img_spatial, 1), data_type),
        FILTER: _tensor(FILTER, (g.col_channels, g.img_channels // g.group) + as_2d(g.kernel, 1), data_type),
        COLUMNS: _tensor(COLUMNS, (key.n, g.col_channels) + as_2d(g.col_spatial, 1), data_type),
    }
    conv = Descriptor(CONVOLUTION)
    conv.set(CONV_COMP_TYPE, T_DATA_TYPE, [compute_type], ctypes.c_int)
    conv.set(CONV_MODE, T_CONVOLUTION_MODE, [cudnn.CUDNN_CROSS_CORRELATION], ctypes.c_int)
    conv.set(CONV_DIMS, T_INT64, [len(as_2d(g.kernel, 1))], _i64)
    conv.set(CONV_DILATIONS, T_INT64, as_2d(g.dilations, 1), _i64)
    conv.set(CONV_STRIDES, T_INT64, as_2d(g.strides, 1), _i64)
    conv.set(CONV_PRE_PAD, T_INT64, as_2d(g.pads_begin, 0), _i64)
    conv.set(CONV_POST_PAD, T_INT64, as_2d(g.pads_end, 0), _i64)
    conv.finalize()
    alpha, beta, conv_attr, operands = OPERATION_ATTRS[key.direction]
    op = Descriptor(OPERATION[key.direction])
    for attr, uid in operands:
        op.set_descriptors(attr, [tensors[uid]])
    op.set_descriptors(conv_attr, [conv])
    scalar, kind = (ctypes.c_double, T_DOUBLE) if key.dtype == "float64" else (ctypes.c_float, T_FLOAT)
    op.set(alpha, kind, [1.0], scalar)
    op.set(beta, kind, [0.0], scalar)
    op.finalize()
    graph = Descriptor(OPERATIONGRAPH)
    graph.set_descriptors(GRAPH_OPS, [op])
    graph.set(GRAPH_HANDLE, T_HANDLE, [handle.value], _p)
    return graph.finalize()


def heuristic_configs(graph, mode, limit):
    """Up to `limit` engine configurations the heuristics of `mode` rank for `graph`, best first."""
    heur = Descriptor(ENGINEHEUR)
    heur.set_descriptors(HEUR_GRAPH, [graph])
    heur.set(HEUR_MODE, T_HEUR_MODE, [mode], ctypes.c_int)
    heur.finalize()
    count = _i64(0)
    cudnn.check("cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)",
                heur.lib.cudnnBackendGetAttribute(heur.value, HEUR_RESULTS, T_BACKEND_DESCRIPTOR, 0,
                                                  ctypes.byref(count), None))
    configs = [Descriptor(ENGINECFG) for _ in range(min(count.value, limit))]
    if not configs:
        return []
    array, n = (_p * len(configs))(*[c.value.value for c in configs]), _i64(0)
    cudnn.check("cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)",
                heur.lib.cudnnBackendGetAttribute(heur.value, HEUR_RESULTS, T_BACKEND_DESCRIPTOR, len(configs),
                                                  ctypes.byref(n), array))
    return configs[:n.value]


def describe(config):
    """(engine index, knob choices as ((type, value), ...), numerical notes, behavior notes)."""
    engine = Descriptor(ENGINE)
    array, n = (_p * 1)(engine.value.value), _i64(0)
    cudnn.check("cudnnBackendGetAttribute(ENGINECFG_ENGINE)",
                config.lib.cudnnBackendGetAttribute(config.value, CFG_ENGINE, T_BACKEND_DESCRIPTOR, 1,
                                                    ctypes.byref(n), array))
    index = engine.get(ENGINE_INDEX, T_INT64, 1, _i64)[0]
    numerical = set(engine.get(ENGINE_NUMERICAL_NOTE, T_NUMERICAL_NOTE, 16, ctypes.c_int))
    behavior = set(engine.get(ENGINE_BEHAVIOR_NOTE, T_BEHAVIOR_NOTE, 16, ctypes.c_int))
    choices = [Descriptor(KNOB_CHOICE) for _ in range(MAX_KNOBS)]
    array, n = (_p * MAX_KNOBS)(*[c.value.value for c in choices]), _i64(0)
    cudnn.check("cudnnBackendGetAttribute(ENGINECFG_KNOB_CHOICES)",
                config.lib.cudnnBackendGetAttribute(config.value, CFG_KNOB_CHOICES, T_BACKEND_DESCRIPTOR, MAX_KNOBS,
                                                    ctypes.byref(n), array))
    knobs = tuple(sorted((c.get(KNOB_TYPE, T_KNOB_TYPE, 1, ctypes.c_int)[0], c.get(KNOB_VALUE, T_INT64, 1, _i64)[0])
                         for c in choices[:n.value]))
    return index, knobs, numerical, behavior


def allowed(key, numerical):
    """Whether an engine with these numerical notes may run `key` (PyTorch's filter)."""
    if NOTE_DOWN_CONVERT in numerical:
        return False
    return not (key.dtype == "float32" and not key.tf32 and NOTE_TENSOR_CORE in numerical)
