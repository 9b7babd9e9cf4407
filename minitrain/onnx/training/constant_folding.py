"""Plan-time folding of the values of an artifact's step that only its input shapes and the
model's own constants decide.

ONNX Runtime's gradient builders compute such values at every step: ReduceMean's gradient
divides Size(X) by Size(dY) and expands to Shape(X), Flatten's gradient reshapes to Shape(X),
Pow's gradient subtracts one from the constant exponent.  Once a step's input shapes are known
(compiled_step.py plans a step per input signature), `fold_constants` evaluates those nodes
once, on the CPU, and their outputs become initializers: no step runs them, and on CUDA none of
them is a host node of the captured step.

A node folds when its op is one of FOLDABLE (deterministic, no side effect, a CPU kernel for
its element type), none of its outputs is fetched, each output holds at most MAX_ELEMENTS
values (a larger constant would keep memory for the life of the step that was transient), and
either it is Shape or Size of a value whose shape is fully known, or every input is a constant:
an initializer that is not one of the step's bound state tensors (those change from step to
step) or the output of a folded node.
"""
from __future__ import annotations

import math

import numpy as np

from ...executor import run_node
from ...inference import infer_types, topological_order
from ...ops import get_schema
from ...ops.schema import ONNX_DOMAIN
from ...registry import find

FOLDABLE = frozenset({"Shape", "Size", "Identity", "Cast", "Add", "Sub", "Mul", "Div", "Neg", "Unsqueeze", "Squeeze",
                      "Concat", "Gather", "Slice", "Reshape"})
MAX_ELEMENTS = 1024


def fold_constants(graph, fetch, variable):
    """Fold the nodes of `graph` (changed in place) whose outputs are constants (see the module
    docstring); `variable` names the initializers that are not constants.  Returns the number
    of nodes folded."""
    types = infer_types(graph)
    constants = {name: array for name, array in graph.initializers.items() if name not in variable}
    kept, folded = [], 0
    for node in topological_order(graph):
        values = _fold(graph, node, types, constants) if _may_fold(node, fetch, types) else None
        if values is None:
            kept.append(node)
            continue
        for name, value in values.items():
            graph.add_initializer(name, value)
            constants[name] = value
        folded += 1
    graph.nodes = kept
    return folded


def _may_fold(node, fetch, types):
    if node.domain != ONNX_DOMAIN or node.op_type not in FOLDABLE:
        return False
    outputs = [name for name in node.outputs if name]
    if any(name in fetch for name in outputs):
        return False
    shapes = [types[name].shape for name in outputs]
    return all(shape is not None and all(isinstance(d, int) for d in shape) and math.prod(shape) <= MAX_ELEMENTS
               for shape in shapes)


def _fold(graph, node, types, constants):
    """{output name: value} of `node` evaluated now, or None where it is not constant."""
    if node.op_type in ("Shape", "Size"):
        shape = types[node.inputs[0]].shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        if node.op_type == "Size":
            value = np.array(math.prod(shape), dtype=np.int64)
        else:       # Shape's start and end clamp as Python's slicing does
            value = np.array(shape[node.attrs.get("start", 0):node.attrs.get("end")], dtype=np.int64)
        return {node.outputs[0]: value}
    present = [name for name in node.inputs if name]
    if not present or any(name not in constants for name in present):
        return None
    opset = graph.opset(node.domain)
    if find(node.op_type, node.domain, opset, "cpu", constants[present[0]].dtype) is None:
        return None
    schema_outputs = get_schema(node.op_type, node.domain, opset).outputs
    wanted = [(schema_outputs[i], name) for i, name in enumerate(node.outputs) if name]
    results = run_node(node.op_type, [constants[name] if name else None for name in node.inputs], attrs=node.attrs,
                       domain=node.domain, opset=opset, outputs=[output for output, _ in wanted])
    return {name: np.asarray(value) for (_, name), value in zip(wanted, results)}
