"""Plan-time folding of the values of an artifact's step that only its input shapes and the
model's own constants decide.

ONNX Runtime's gradient builders compute such values at every step: ReduceMean's gradient
divides Size(X) by Size(dY) and expands to Shape(X), Flatten's gradient reshapes to Shape(X),
Pow's gradient subtracts one from the constant exponent.  Once a step's input shapes are known
(compiled_step.py plans a step per input signature), `fold_constants` evaluates those nodes
once, on the CPU, and their outputs become initializers: no step runs them, and on CUDA none of
them is a host node of the captured step.

Which nodes fold, and how, is minitrain/constant_folding.py's rule; this step's known values are
the shapes inferred from its input shapes and its constants: the initializers that are not one
of the step's bound state tensors (those change from step to step) and the outputs of folded
nodes.  A fetched value is never folded: the step computes it.
"""
from __future__ import annotations

from ...constant_folding import fold_node
from ...inference import infer_types, topological_order


def fold_constants(graph, fetch, variable):
    """Fold the nodes of `graph` (changed in place) whose outputs are constants (see the module
    docstring); `variable` names the initializers that are not constants.  Returns the number
    of nodes folded."""
    types = infer_types(graph)
    constants = {name: array for name, array in graph.initializers.items() if name not in variable}

    def shape_of(name):
        return types[name].shape

    kept, folded = [], 0
    for node in topological_order(graph):
        outputs = [name for name in node.outputs if name]
        fetched = any(name in fetch for name in outputs)
        values = None if fetched else fold_node(node, graph.opset(node.domain), constants, shape_of)
        if values is None:
            kept.append(node)
            continue
        for name, value in zip(outputs, values):
            graph.add_initializer(name, value)
            constants[name] = value
        folded += 1
    graph.nodes = kept
    return folded
