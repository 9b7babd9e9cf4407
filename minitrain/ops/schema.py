"""Op schemas: the inputs, outputs and attributes of every op, and its shape/dtype inference.

A schema is registered per (domain, op_type, since_version), like ONNX's; the schema in force
for a graph is the newest one whose since_version is at or below the graph's opset import for
that domain.  The inference function both validates (raising errors that name the op, node,
attribute or input and the bad value) and computes the output TensorTypes.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..bfloat16 import BFLOAT16_TYPES
from ..errors import DTypeError, KernelNotFoundError, OpAttributeError, ShapeError
from ..tensor_limit import check_tensor_bytes
from .shape_utils import shapes_differ

ONNX_DOMAIN = ""
MS_DOMAIN = "com.microsoft"
# minitrain's own ops: the data-parallel flat buffer (ConcatFlat, SliceFlat), and the fused ops
# the fusion pass writes where ONNX Runtime has none
MINITRAIN_DOMAIN = "ai.minitrain"
FUSED_DOMAIN = "ai.minitrain.fused"

# The float element types of NumPy, which the CPU kernels register from; GRAPH_FLOAT_TYPES adds
# bfloat16 (with ml_dtypes installed), which a graph may hold and only CUDA kernels serve.
FLOAT_TYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
GRAPH_FLOAT_TYPES = FLOAT_TYPES + BFLOAT16_TYPES
# ops that move shape tensors take int64 too: in a graph (GRAPH_DATA_TYPES) and on the CPU (DATA_TYPES)
DATA_TYPES = FLOAT_TYPES + (np.dtype(np.int64),)
GRAPH_DATA_TYPES = GRAPH_FLOAT_TYPES + (np.dtype(np.int64),)
INDEX_TYPES = (np.dtype(np.int64), np.dtype(np.int32))
# ONNX's TensorProto.DataType codes and their NumPy element types (bfloat16, 16, where ml_dtypes
# gives NumPy one); Cast, the checkpoint format and shape folding each take the codes they serve.
TENSOR_PROTO_DTYPES = {code: np.dtype(t) for code, t in (
    (1, np.float32), (2, np.uint8), (3, np.int8), (4, np.uint16), (5, np.int16), (6, np.int32), (7, np.int64),
    (9, np.bool_), (10, np.float16), (11, np.float64), (12, np.uint32), (13, np.uint64))}
TENSOR_PROTO_DTYPES.update({16: t for t in BFLOAT16_TYPES})

REQUIRED = object()


@dataclass(frozen=True)
class TensorType:
    """dtype and shape of a value.  A dim is an int, or a str naming a symbolic dim
    (the batch, say); shape None means the rank is unknown.  `value` holds the contents of
    small constant int tensors (shapes) when inference knows them."""
    dtype: np.dtype
    shape: Optional[tuple] = None
    value: Optional[tuple] = None

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    @property
    def is_concrete(self):
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def nbytes(self):
        """Bytes the tensor occupies; only for concrete shapes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def onnx_float(value):
    """A float attribute's value as ONNX holds it: a float32, here as the Python float of it."""
    return float(np.float32(value))


@dataclass(frozen=True)
class Attr:
    """An attribute: kind is one of int, ints, float, floats, string, tensor; default REQUIRED
    means the attribute must be given, None means it is optional and absent unless given.  A float
    default is ONNX's, a float32 (LeakyRelu's alpha is float32(0.01), not 0.01), so that float64
    results match ONNX Runtime's."""
    kind: str
    default: object = None

    def __post_init__(self):
        if self.kind == "float" and isinstance(self.default, float):
            object.__setattr__(self, "default", onnx_float(self.default))


@dataclass(frozen=True)
class Input:
    """A formal input.  `types` is "T" (the op's float type, shared by all "T" inputs), another
    name of a float type variable (BatchNormalization's "T1" and "T2", as ONNX names them: a float
    type of its own, shared by the inputs that name it), or a tuple of accepted dtypes (indices,
    labels, shapes)."""
    name: str
    types: object = "T"
    optional: bool = False
    variadic: bool = False


@dataclass
class OpSchema:
    op_type: str
    domain: str
    since_version: int
    inputs: tuple
    outputs: tuple
    attrs: dict
    infer: Callable
    float_types: tuple = GRAPH_FLOAT_TYPES
    optional_outputs: frozenset = field(default_factory=frozenset)
    doc: str = ""
    placement: str = None   # "early" / "late": scheduled as soon / as late as its inputs allow (scheduler.py)

    def output_index(self, name):
        try:
            return self.outputs.index(name)
        except ValueError:
            raise OpAttributeError(
                f"{self.op_type}: unknown output {name!r}; the op's outputs are {list(self.outputs)}") from None


_SCHEMAS: dict = {}
PLACEMENTS = (None, "early", "late")


def add_version(table, key, entry):
    """Add `entry` (anything with a since_version) to the versions of `key`, kept sorted."""
    versions = table.setdefault(key, [])
    versions.append(entry)
    versions.sort(key=lambda v: v.since_version)


def in_force(versions, opset):
    """The newest entry whose since_version is at or below `opset`, or None."""
    chosen = None
    for entry in versions:
        if entry.since_version <= opset:
            chosen = entry
    return chosen


def schema(op_type, *, domain=ONNX_DOMAIN, since=1, inputs=(), outputs=("Y",), attrs=None,
           float_types=GRAPH_FLOAT_TYPES, optional_outputs=(), placement=None):
    """Decorator registering `infer(ctx) -> list[TensorType]` as the schema of an op version.

    `inputs` holds Input objects or plain names (a required "T" input).  `placement` ("early",
    "late" or None) is where the scheduler puts the op's nodes among those ready to run: a
    collective's launch early, so it overlaps the compute after it; its wait late."""
    if placement not in PLACEMENTS:
        raise ValueError(f"schema {op_type}: placement must be one of {list(PLACEMENTS)}, got {placement!r}")
    formal = tuple(i if isinstance(i, Input) else Input(i) for i in inputs)

    def register(infer):
        s = OpSchema(op_type, domain, since, formal, tuple(outputs), dict(attrs or {}), infer,
                     tuple(np.dtype(t) for t in float_types), frozenset(optional_outputs),
                     (infer.__doc__ or "").strip(), placement)
        add_version(_SCHEMAS, (domain, op_type), s)
        return infer
    return register


def get_schema(op_type, domain, opset):
    """The schema of `op_type` in force at `opset` of `domain` (None: the newest)."""
    versions = _SCHEMAS.get((domain, op_type))
    if not versions:
        raise KernelNotFoundError(f"unknown op {op_type!r} in domain {domain or 'ai.onnx'!r}: no schema is registered")
    if opset is None:
        return versions[-1]
    chosen = in_force(versions, opset)
    if chosen is None:
        raise KernelNotFoundError(
            f"{op_type}: no schema at opset {opset} of domain {domain or 'ai.onnx'!r}; "
            f"versions start at {[v.since_version for v in versions]}")
    return chosen


def registered_ops():
    """All (domain, op_type) pairs with a schema."""
    return sorted(_SCHEMAS)


def describe_op(op_type, node_name=None):
    return f"{op_type} (node {node_name!r})" if node_name else op_type


# --------------------------------------------------------------------------- attributes
INT64_RANGE = (-2 ** 63, 2 ** 63 - 1)


def _as_int(v):
    """An int attribute: ONNX stores int64, so a value outside its range is refused."""
    if isinstance(v, (bool, np.bool_, numbers.Integral)):
        v = int(v)
        if not INT64_RANGE[0] <= v <= INT64_RANGE[1]:
            raise ValueError("outside the int64 range")
        return v
    raise TypeError


def _as_float(v):
    """A float attribute: NaN and infinities are refused (they pass every range check)."""
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        v = float(v)
        if not math.isfinite(v):
            raise ValueError("not finite")
        return v
    raise TypeError


def _as_string(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, str):
        return v
    raise TypeError


def _as_tensor(v):
    """A tensor attribute (Constant's value): a NumPy array of a numeric or bool dtype."""
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
        return v
    if isinstance(v, (np.generic, numbers.Number)) and not isinstance(v, complex):
        return np.asarray(v)
    raise TypeError


def _as_list(conv):
    def convert(v):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise TypeError
        return tuple(conv(x) for x in v)
    return convert


_CONVERTERS = {"int": _as_int, "float": _as_float, "string": _as_string, "tensor": _as_tensor,
               "ints": _as_list(_as_int), "floats": _as_list(_as_float)}


def resolve_attrs(sch: OpSchema, attrs, node_name=None):
    """Check `attrs` against the schema, convert them, and fill in the defaults."""
    who = describe_op(sch.op_type, node_name)
    attrs = dict(attrs or {})
    unknown = sorted(set(attrs) - set(sch.attrs))
    if unknown:
        raise OpAttributeError(
            f"{who}: unknown attribute {unknown[0]!r}={attrs[unknown[0]]!r}; "
            f"{sch.op_type} defines {sorted(sch.attrs) or 'no attributes'}")
    resolved = {}
    for name, spec in sch.attrs.items():
        if name in attrs and attrs[name] is not None:
            try:
                resolved[name] = _CONVERTERS[spec.kind](attrs[name])
            except TypeError:
                raise OpAttributeError(
                    f"{who}: attribute {name!r} must be of type {spec.kind}, got {attrs[name]!r}") from None
            except ValueError as e:
                raise OpAttributeError(f"{who}: attribute {name!r}={attrs[name]!r} is {e}") from None
        elif spec.default is REQUIRED:
            raise OpAttributeError(f"{who}: required attribute {name!r} is missing")
        else:
            resolved[name] = spec.default
    return resolved


# --------------------------------------------------------------------------- inference
class InferContext:
    """What an inference function sees: input types, resolved attributes, and error helpers."""

    def __init__(self, sch: OpSchema, input_types, attrs, node_name=None, wanted_outputs=None):
        self.schema = sch
        self.op_type = sch.op_type
        self.node_name = node_name
        self.input_types = list(input_types)
        self.attrs = attrs
        self.wanted_outputs = tuple(sch.outputs if wanted_outputs is None else wanted_outputs)
        self.dtype = None

    @property
    def who(self):
        return describe_op(self.op_type, self.node_name)

    def fail(self, message, error=ShapeError):
        raise error(f"{self.who}: {message}")

    def attr_fail(self, name, message):
        raise OpAttributeError(f"{self.who}: attribute {name!r}={self.attrs.get(name)!r} {message}")

    def input(self, i) -> Optional[TensorType]:
        return self.input_types[i] if i < len(self.input_types) else None

    def shape(self, i):
        t = self.input(i)
        return None if t is None else t.shape

    def wants(self, output_name):
        return output_name in self.wanted_outputs

    def out(self, shape, dtype=None, value=None):
        """A TensorType of the op's float dtype (or `dtype`)."""
        return TensorType(np.dtype(dtype) if dtype is not None else self.dtype,
                          None if shape is None else tuple(shape), value)

    def require_rank(self, i, ranks, what=None):
        """Fail unless input i has one of `ranks` (an int, or a collection of ints)."""
        shape = self.shape(i)
        if shape is None:
            return
        allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
        if len(shape) not in allowed:
            name = what or self.schema.inputs[min(i, len(self.schema.inputs) - 1)].name
            self.fail(f"input {name!r} has shape {tuple(shape)} (rank {len(shape)}), "
                      f"expected rank {' or '.join(map(str, allowed))}")

    def require_shape(self, i, expected, because):
        """Fail unless input i (when present and known) has the shape `expected`; dims are
        compared where both are ints, symbolic dims match anything.  Gradient ops use this to
        check each input against the forward shapes it implies: their kernels index every
        input with those sizes."""
        shape = self.shape(i)
        if shape is None or expected is None:
            return
        if shapes_differ(shape, expected):
            name = self.schema.inputs[min(i, len(self.schema.inputs) - 1)].name
            self.fail(f"input {name!r} has shape {tuple(shape)}; expected {tuple(expected)} ({because})")

    def require_scalar(self, i, because):
        """Fail unless input i (when present and known) holds one element: shape () or (1,),
        the shape the CPU provider gives a 0-d array."""
        shape = self.shape(i)
        if shape is not None and (len(shape) > 1 or any(isinstance(d, int) and d != 1 for d in shape)):
            name = self.schema.inputs[min(i, len(self.schema.inputs) - 1)].name
            self.fail(f"input {name!r} has shape {tuple(shape)}; expected a scalar, () or (1,) ({because})")


def check_inputs(ctx: InferContext):
    """Arity and dtype checks shared by every op, done before its own inference."""
    sch = ctx.schema
    types = ctx.input_types
    formal = sch.inputs
    variadic = bool(formal) and formal[-1].variadic
    required = sum(1 for f in formal if not f.optional)
    if len(types) > len(formal) and not variadic:
        ctx.fail(f"takes at most {len(formal)} inputs {[f.name for f in formal]}, got {len(types)}")
    type_vars = {}      # float type variable ("T", "T1"...) -> the dtype its inputs share
    for i, t in enumerate(types):
        f = formal[min(i, len(formal) - 1)]
        if t is None:
            if f.variadic:
                ctx.fail(f"input #{i}, of the variadic input {f.name!r}, is absent; every tensor of a variadic "
                         "input must be given")
            if i < required and not f.optional:
                ctx.fail(f"required input {f.name!r} (#{i}) is missing")
            continue
        if isinstance(f.types, str):
            if t.dtype not in sch.float_types:
                ctx.fail(f"input {f.name!r} has unsupported dtype {t.dtype}; "
                         f"supported: {[str(d) for d in sch.float_types]}", DTypeError)
            shared = type_vars.setdefault(f.types, t.dtype)
            if t.dtype != shared:
                ctx.fail(f"input {f.name!r} has dtype {t.dtype} but an earlier input has {shared}; "
                         f"inputs of type {f.types} must share one float dtype", DTypeError)
        elif t.dtype not in tuple(np.dtype(d) for d in f.types):
            ctx.fail(f"input {f.name!r} has dtype {t.dtype}; expected one of "
                     f"{[str(np.dtype(d)) for d in f.types]}", DTypeError)
    if len(types) < required:
        ctx.fail(f"needs {required} inputs {[f.name for f in formal[:required]]}, got {len(types)}")
    ctx.dtype = type_vars.get("T")


def check_output_sizes(ctx, outs):
    """Fail before any planning or allocation when an output would exceed the tensor limit
    (minitrain/tensor_limit.py)."""
    for name, t in zip(ctx.schema.outputs, outs):
        if t is not None and t.is_concrete and t.dtype is not None:
            check_tensor_bytes(ctx.who, name, t.shape, t.dtype, ctx.attrs)


def trim_absent(input_types):
    """The input types without trailing absent (None) ones, as a tuple: an optional input left
    out at the end is the same node as one not given."""
    end = len(input_types)
    while end and input_types[end - 1] is None:
        end -= 1
    return tuple(input_types[:end])


def infer_node(sch: OpSchema, input_types, attrs, node_name=None, wanted_outputs=None):
    """Validate and infer output types; `attrs` must already be resolved.  Returns the
    InferContext (carrying the float dtype) and the list of output TensorTypes."""
    ctx = InferContext(sch, list(trim_absent(input_types)), attrs, node_name, wanted_outputs)
    check_inputs(ctx)
    outs = list(sch.infer(ctx))
    check_output_sizes(ctx, outs)
    return ctx, outs
