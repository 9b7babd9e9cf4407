"""Constant folding: the nodes whose outputs are known before a run, evaluated once on the host.

A node folds when its op is one of FOLDED_OPS (deterministic, no side effect: never one that
draws random numbers or changes its inputs) and its value is known:

- a Constant node's value is its attribute;
- Shape and Size read only the dims of their input, known when every dim is an int;
- any other op folds when every input is a known value, the host has a kernel for its element
  type (the node is evaluated through run_node) and each output holds at most MAX_ELEMENTS
  values: a larger constant would keep for the life of a plan the memory that a step holds only
  while it runs.

The callers differ only in where the known values come from and where the results go:

- the scheduler (scheduler.schedule) folds from Constant nodes only, and its plan holds the
  results as constants, placed like initializers and uploaded once;
- a compiled step of the ORT training API (onnx/training/constant_folding.py) also knows the
  model's own constant initializers and, per input signature, the input shapes; the results
  become initializers of the step's graph;
- the shape folder of the importer and nn.GraphModule (shape_folding.py) knows the int
  initializers and the traced dims, and carries on symbolically where a dim is a name.

Initializers that change between runs are never known values: parameters and state, which the
optimizer and the BatchNorm write-back update.  The scheduler cannot tell them from constants
and takes none; a compiled step leaves out the state tensors bound to it.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import DTypeError, KernelNotFoundError, OpAttributeError
from .executor import run_node
from .inference import check_node, initializer_type
from .ops import get_schema
from .ops.constant import constant_array
from .ops.schema import ONNX_DOMAIN

FOLDED_OPS = frozenset({"Constant", "Shape", "Size", "Identity", "Cast", "Concat", "Gather", "Slice", "Reshape",
                        "Unsqueeze", "Squeeze", "Flatten", "ConstantOfShape", "Neg", "Sqrt", "Reciprocal", "Add",
                        "Sub", "Mul", "Div"})
DIMS_OPS = frozenset({"Shape", "Size"})     # they read their input's dims, never its data
MAX_ELEMENTS = 1024


def shape_entries(dims, attrs):
    """What Shape gives for a tensor of `dims` (ints or symbolic names): dims[start:end], with
    start and end clamped as Python's slicing clamps them (ONNX's rule)."""
    return list(dims)[attrs.get("start", 0):attrs.get("end")]


def fold_node(node, opset, constants, shape_of=None):
    """The output arrays of `node` (one per non-empty output) when it folds (see the module
    docstring), else None.

    constants: value name -> array of the values known so far; shape_of: value name -> its
    dims (ints, or names for symbolic ones) or None, for Shape and Size of values not in
    `constants`."""
    if node.domain != ONNX_DOMAIN or node.op_type not in FOLDED_OPS:
        return None
    if node.op_type == "Constant":
        return [constant_array(lambda message: _fail(node, message), node.attrs).copy()]
    if node.op_type in DIMS_OPS:
        return _dims_query(node, constants, shape_of)
    present = [name for name in node.inputs if name]
    if not present or any(name not in constants for name in present):
        return None
    inputs = [constants[name] if name else None for name in node.inputs]
    schema_outputs = get_schema(node.op_type, node.domain, opset).outputs
    wanted = [schema_outputs[i] for i, name in enumerate(node.outputs) if name]
    try:
        checked = check_node(node.op_type, node.domain, opset, node.attrs,
                             [None if a is None else initializer_type(a) for a in inputs], wanted, node.name)
        if any(not _small(t.shape) for t in checked.out_types):
            return None
        return run_node(node.op_type, inputs, attrs=node.attrs, opset=opset, outputs=wanted)
    except (KernelNotFoundError, DTypeError):
        return None     # the host has no kernel for this dtype (int64 Add, float16): the node stays a step


def _dims_query(node, constants, shape_of):
    """Shape or Size of `node`'s input when all its dims are known ints, else None."""
    name = node.inputs[0]
    dims = constants[name].shape if name in constants else shape_of(name) if shape_of else None
    if dims is None or not all(isinstance(d, (int, np.integer)) for d in dims):
        return None
    if node.op_type == "Size":
        return [np.array(math.prod(dims), dtype=np.int64)]
    return [np.array(shape_entries(dims, node.attrs), dtype=np.int64)]


def _small(shape):
    return shape is not None and all(isinstance(d, int) for d in shape) and math.prod(shape) <= MAX_ELEMENTS


def _fail(node, message):
    raise OpAttributeError(f"Constant (node {node.name!r}): {message}")
