"""Autocast: the mixed-precision rewrite of a forward graph, as PyTorch's autocast places ops.

`autocast(graph, low, keep)` returns a copy of `graph` in which every node runs in the
element type its op's policy gives it, with a Cast node wherever a value crosses from one
element type to another:

* LOW ops (convolutions, Gemm, MatMul and their fused forms) run in the low-precision type
  `low` (float16 or bfloat16): the tensor-core ops, PyTorch's lower_precision_fp list;
* FLOAT32 ops (softmax, losses, sums and means, exp/log/pow, the normalisations other than
  BatchNorm, resizing) run in float32: PyTorch's fp32 list, the ops whose range or
  accumulation low precision would ruin;
* every other op follows its inputs, promoted to the widest: float32 when any input of rank
  >= 1 is float32, else `low` (scalars, rank 0, follow the tensors as PyTorch's wrapped numbers
  do).  Single-input ops (Relu, MaxPool, Reshape...) so run in whatever type reaches them.

An input whose schema gives it a float type of its own (BatchNormalization's scale and B, ONNX's
T1, and its statistics, T2) is float32 whatever the op runs in.  So BatchNorm normalises the
data in the type that reaches it, with float32 parameters and statistics and float32
accumulation, as PyTorch's autocast leaves batch_norm to cuDNN's mixed-type kernels: a
low-precision network keeps its activations low through every BatchNorm.

Only float32 and `low` values are cast (float64 and integer tensors never are, as in
PyTorch).  One Cast per (value, type) serves every reader.  Parameters stay float32
initializers: a parameter read by a LOW op is cast in the forward graph, and the gradient of
that Cast is a Cast back to float32 (ops/compare.py), so master weights and optimizer state
never leave float32.  The optimizer updates and the gradient accumulator read float16 and
bfloat16 gradients of float32 parameters themselves, widening each element exactly as they
read it: `uncast_gradients` hands them the low-precision gradient in place of that Cast, which
so drops out of the training plan.  The values named in `keep` (graph outputs, fetched values,
state updates) keep their names and element types: where such a value comes out of a
low-precision node, the node writes a new value and a Cast to float32 gives the kept one.

The pass runs on the forward graph before the gradient graph is built, so the gradient graph,
fusion, the scheduler and every provider see ordinary nodes.  A graph the policy leaves alone
(low = float32, or a float32 model with nothing LOW) comes back unchanged.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .bfloat16 import BFLOAT16
from .errors import DTypeError, PrecisionError
from .graph import Node
from .inference import check_graph_node, infer_types, initializer_type, topological_order
from .ops.compare import ONNX_CODE
from .ops.optimizer import LOW_GRADIENT_TYPES
from .ops.schema import MS_DOMAIN, ONNX_DOMAIN, TensorType, get_schema

FLOAT32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Precision:
    """How a session computes: `low` the element type of autocast's LOW ops (None: no autocast),
    `tf32` whether float32 GEMMs and convolutions may use TF32 on CUDA, `loss_scaling` whether
    the loss is scaled dynamically (float16's narrow range needs it; bfloat16's does not)."""
    name: str
    low: Optional[np.dtype] = None
    tf32: bool = False
    loss_scaling: bool = False


PRECISIONS = {"fp32": Precision("fp32"), "tf32": Precision("tf32", tf32=True),
              "bf16": Precision("bf16", BFLOAT16),
              "fp16": Precision("fp16", np.dtype(np.float16), loss_scaling=True)}


_DEFAULT = contextvars.ContextVar("minitrain_precision", default="fp32")


def default_precision():
    """The precision a TrainingSession built now takes when given none (see `precision`)."""
    return _DEFAULT.get()


@contextlib.contextmanager
def precision(name):
    """Sessions built inside `with precision("bf16"):` default to that precision (a name of
    PRECISIONS or a Precision), as code under torch.autocast does: the CLI's --precision
    reaches the examples' sessions this way."""
    token = _DEFAULT.set(name)
    try:
        yield
    finally:
        _DEFAULT.reset(token)


def resolve_precision(precision, device):
    """The Precision a session on `device` ("cpu", "cuda") runs: one of PRECISIONS by name, or a
    Precision (the CPU tests emulate a low type with float64).  PrecisionError for an unknown
    name, and for "bf16"/"fp16" on a device other than CUDA: the CPU kernels compute in float32
    and float64 only.  "tf32" is accepted everywhere and changes nothing off CUDA, as PyTorch's
    allow_tf32 flags do on the CPU."""
    if isinstance(precision, Precision):
        return precision
    chosen = PRECISIONS.get(precision)
    if chosen is None:
        raise PrecisionError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if chosen.name in ("bf16", "fp16") and device != "cuda":
        raise PrecisionError(f"precision {precision!r} needs a CUDA device; device {device!r} has no "
                             f"{precision} kernels for convolutions and GEMMs (use 'fp32' there)")
    if chosen.low is None and chosen.name == "bf16":
        raise PrecisionError("precision 'bf16' needs NumPy's bfloat16 dtype: pip install ml_dtypes")
    return chosen

LOW, FLOAT32_OP, PROMOTE = "low", "float32", "promote"

LOW_OPS = {(ONNX_DOMAIN, op) for op in ("Conv", "ConvTranspose", "Gemm", "MatMul")} | {
    (MS_DOMAIN, "FusedConv"), (MS_DOMAIN, "FusedGemm")}

FLOAT32_OPS = {(ONNX_DOMAIN, op) for op in (
    "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
    "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "CumSum",
    "Exp", "Log", "Pow", "Reciprocal", "Softplus", "Acos", "Asin", "Cosh", "Sinh", "Tan",
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "LpNormalization",
    "Resize", "Upsample")} | {(MS_DOMAIN, "MSELoss")}


def policy(node):
    """LOW, FLOAT32_OP or PROMOTE: where autocast runs `node`."""
    key = (node.domain, node.op_type)
    if key in LOW_OPS:
        return LOW
    if key in FLOAT32_OPS:
        return FLOAT32_OP
    return PROMOTE


def cast_code(dtype):
    """The ONNX TensorProto code of `dtype` for a Cast's `to`; DTypeError where Cast cannot make it."""
    code = ONNX_CODE.get(np.dtype(dtype))
    if code is None:
        raise DTypeError(f"autocast: Cast cannot produce element type {np.dtype(dtype)}; it makes "
                         f"{sorted(str(d) for d in ONNX_CODE)}")
    return code


def _float_inputs(graph, node, var):
    """Indices of the node's inputs of float type variable `var`: "T", the op's float type, or
    "other" for those of a float type of their own ("T1", "T2"...)."""
    formal = get_schema(node.op_type, node.domain, graph.opset(node.domain)).inputs
    indices = []
    for i, name in enumerate(node.inputs):
        f = formal[min(i, len(formal) - 1)] if formal else None
        if name and f is not None and isinstance(f.types, str) and (f.types == "T") == (var == "T"):
            indices.append(i)
    return indices


class _Autocast:
    """One run of the pass: the graph being rewritten and the element type of every value."""

    def __init__(self, graph, low, keep):
        self.graph = graph.copy()
        self.low = np.dtype(low)
        self.keep = set(keep) | set(graph.outputs)
        self.types = {v.name: v.type for v in self.graph.inputs}
        self.types.update({name: initializer_type(a) for name, a in self.graph.initializers.items()})
        self.casts = {}      # (value, dtype) -> name of the Cast's output
        self.nodes = []

    def rank(self, dtype):
        """Order of the types autocast moves between: low < float32 < the rest."""
        return 0 if dtype == self.low else 1 if dtype == FLOAT32 else 2

    def castable(self, name):
        return self.types[name].dtype in (FLOAT32, self.low)

    def target(self, node, inputs):
        """The element type `node` runs in, or None where autocast leaves it as it is."""
        castable = [i for i in inputs if self.castable(node.inputs[i])]
        if not castable:
            return None
        kind = policy(node)
        if kind == LOW:
            return self.low
        if kind == FLOAT32_OP:
            return FLOAT32
        tensors = [i for i in castable if self.types[node.inputs[i]].rank != 0] or castable
        return max((self.types[node.inputs[i]].dtype for i in tensors), key=self.rank)

    def cast(self, name, dtype):
        """The name of `name` in `dtype`, adding the Cast on first use."""
        if self.types[name].dtype == dtype:
            return name
        key = (name, dtype)
        if key not in self.casts:
            out = self.graph.unique_name(f"{name}.{dtype.name}")
            cast = Node("Cast", [name], [out], {"to": cast_code(dtype)}, ONNX_DOMAIN,
                        self.graph.unique_name(f"autocast.{name}.{dtype.name}"))
            self.types[out] = check_graph_node(self.graph, cast, self.types).out_types[0]
            self.nodes.append(cast)
            self.casts[key] = out
        return self.casts[key]

    def rewrite(self, node):
        inputs = _float_inputs(self.graph, node, "T")
        dtype = self.target(node, inputs)
        if dtype is not None:
            for i in inputs:
                if self.castable(node.inputs[i]):
                    node.inputs[i] = self.cast(node.inputs[i], dtype)
        for i in _float_inputs(self.graph, node, "other"):
            if self.castable(node.inputs[i]):
                node.inputs[i] = self.cast(node.inputs[i], FLOAT32)
        renamed = {}
        for k, out in enumerate(node.outputs):
            if out in self.keep:
                renamed[k] = out
                node.outputs[k] = self.graph.unique_name(f"{out}.autocast")
        self.nodes.append(node)
        for out, t in zip(node.outputs, check_graph_node(self.graph, node, self.types).out_types):
            declared = self.graph.value_info.get(out)
            if out:
                self.types[out] = TensorType(t.dtype, declared.shape) if t.shape is None and declared else t
        for k, kept in renamed.items():
            self.restore(node, k, kept)

    def restore(self, node, k, kept):
        """Give the kept value `kept` from output k of `node`: a Cast to float32 where that
        output is low precision, else the output itself renamed back."""
        produced = node.outputs[k]
        if self.types[produced].dtype != self.low:
            node.outputs[k] = kept
            self.types[kept] = self.types.pop(produced)
            return
        cast = Node("Cast", [produced], [kept], {"to": cast_code(FLOAT32)}, ONNX_DOMAIN,
                    self.graph.unique_name(f"autocast.{kept}"))
        self.types[kept] = check_graph_node(self.graph, cast, self.types).out_types[0]
        self.nodes.append(cast)

    def run(self):
        for node in topological_order(self.graph):
            self.rewrite(node)
        self.graph.nodes = self.nodes
        infer_types(self.graph)
        return self.graph


def autocast(graph, low, keep=()):
    """A copy of `graph` with each node in the element type of its autocast policy and Cast
    nodes where values cross between types (see the module docstring).  low: the
    low-precision element type; keep: value names whose name and type must not change."""
    return _Autocast(graph, low, keep).run()


def uncast_gradients(graph, grads):
    """`grads` (parameter -> gradient value of `graph`) with each gradient that is the float32
    Cast of a float16 or bfloat16 value, and that nothing reads yet, replaced by that value: the
    optimizer updates and InPlaceAccumulator read such a gradient exactly as its Cast would give
    it (ops/optimizer.py), so the Cast, a launch and a pass over the gradient, is left out of
    the plan."""
    producers, readers = graph.producers(), graph.consumers()
    casts = {param: producers[grad] for param, grad in grads.items()
             if grad in producers and producers[grad].op_type == "Cast" and not readers.get(grad)}
    uncast = dict(grads)
    if not casts:
        return uncast
    types = infer_types(graph)
    for param, cast in casts.items():
        source = cast.inputs[0]
        if types[cast.outputs[0]].dtype == FLOAT32 and types[source].dtype in LOW_GRADIENT_TYPES:
            uncast[param] = source
    return uncast
