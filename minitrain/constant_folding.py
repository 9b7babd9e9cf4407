"""Constant folding at plan time: values that no step needs to compute.

A Constant node, and a cheap deterministic node whose inputs are all such folded values (an
Identity, a Cast or a Concat of constants, the arithmetic of a few scalars), gives the same
tensor at every run.  The scheduler evaluates it once on the host and the plan holds the result
as a constant, which the executor places where its readers want it, uploaded once: no step runs
for it, and a device plan copies nothing from the host per run for it (which would also stop
its capture in a CUDA Graph).

Initializers are never folded from: they are parameters and state, which the optimizer and the
BatchNorm write-back change between runs.  Ops that draw random numbers or change their inputs
are never folded either: only the ops in FOLDED_OPS are.
"""
from __future__ import annotations

from .errors import DTypeError, KernelNotFoundError, OpAttributeError
from .executor import run_node
from .ops.constant import constant_array
from .ops.schema import ONNX_DOMAIN

FOLDED_OPS = frozenset({"Identity", "Cast", "Concat", "Reshape", "Unsqueeze", "Squeeze", "Flatten",
                        "ConstantOfShape", "Neg", "Sqrt", "Reciprocal", "Add", "Sub", "Mul", "Div"})


def folded_outputs(node, opset, constants, checked):
    """The output arrays of `node` (one per non-empty output) when it folds, else None.

    constants: value name -> array of the values folded so far; checked: the node as
    inference validated it (its schema's output names and those asked for)."""
    if node.domain != ONNX_DOMAIN:
        return None
    if node.op_type == "Constant":
        return [constant_array(lambda message: _fail(node, message), node.attrs).copy()]
    present = [name for name in node.inputs if name]
    if node.op_type not in FOLDED_OPS or not present or any(name not in constants for name in present):
        return None
    inputs = [constants[name] if name else None for name in node.inputs]
    try:
        return run_node(node.op_type, inputs, attrs=node.attrs, opset=opset, outputs=list(checked.wanted))
    except (KernelNotFoundError, DTypeError):
        return None     # the host has no kernel for this dtype (float16, say): the node stays a step


def _fail(node, message):
    raise OpAttributeError(f"Constant (node {node.name!r}): {message}")
