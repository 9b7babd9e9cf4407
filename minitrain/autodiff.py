"""The gradient graph builder.

`build_gradient_graph` differentiates a loss with respect to chosen values (parameters or graph
inputs).  Only nodes on a path from one of those values to the loss get gradient nodes; the
gradient of a value read by several nodes is accumulated with a `Sum` node; stop-gradient cuts
a value or a single edge; a value nobody differentiates gets no gradient node.  Each forward
node is differentiated by the gradient builder registered for its op at the graph's opset
(minitrain/ops/gradients.py), walking the nodes in reverse topological order, iteratively.
"""
from __future__ import annotations

import numpy as np

from .errors import GraphError
from .graph import Node, UniqueNames
from .inference import check_graph_node, infer_types, topological_order
from .ops import get_gradient_builder
from .ops.gradients import GradContext
from .ops.schema import GRAPH_FLOAT_TYPES


def _is_differentiable(builder, index):
    return builder is not None and (builder.differentiable is None or index in builder.differentiable)


def build_gradient_graph(graph, loss, wrt, *, stop_gradients=(), seeds=None):
    """Return (new_graph, grads): the forward graph plus gradient nodes, and a dict mapping each
    name in `wrt` to the name of its gradient value (None when the loss does not depend on it).

    loss: a value name or a list of them.  Without `seeds` each loss must be a scalar and is
    seeded with 1; `seeds` maps a loss name to the name of a graph input (or initializer)
    holding its upstream gradient, for non-scalar outputs.
    stop_gradients: value names, or (node_name, input_index) pairs cutting one edge.
    The new graph's outputs are the forward outputs, the losses, then the gradients.
    """
    losses = [loss] if isinstance(loss, str) else list(loss)
    wrt = list(wrt)
    g = graph.copy()
    order = topological_order(g)
    types = infer_types(g, order)
    for name in losses + wrt:
        if name not in types:
            raise GraphError(f"build_gradient_graph: {name!r} is not a value of graph {g.name!r}")
    stop_values = {s for s in stop_gradients if isinstance(s, str)}
    stop_edges = {tuple(s) for s in stop_gradients if not isinstance(s, str)}
    builders = {id(n): get_gradient_builder(n.op_type, n.domain, g.opset(n.domain)) for n in order}

    def edge_open(node, i, name):
        return (name and name not in stop_values and (node.name, i) not in stop_edges
                and _is_differentiable(builders[id(node)], i) and types[name].dtype in GRAPH_FLOAT_TYPES)

    # values depending on a wrt value, through differentiable edges
    requires = set(v for v in wrt if v not in stop_values)
    for node in order:
        if any(edge_open(node, i, x) and x in requires for i, x in enumerate(node.inputs)):
            requires.update(o for o in node.outputs if o and types[o].dtype in GRAPH_FLOAT_TYPES)
    # values the losses depend on, through differentiable edges
    contributes = set(losses)
    for node in reversed(order):
        if any(o in contributes for o in node.outputs if o):
            contributes.update(x for i, x in enumerate(node.inputs) if edge_open(node, i, x))
    needs_grad = requires & contributes

    make_name = UniqueNames(g.all_value_names() | {n.name for n in g.nodes}, start=1)
    contributions = {}
    for name in losses:
        if seeds and name in seeds:
            contributions[name] = [seeds[name]]
        else:
            shape = types[name].shape
            if shape is None or any(d != 1 for d in shape):
                raise GraphError(f"loss {name!r} has shape {shape}; a non-scalar loss needs a seed gradient")
            contributions[name] = [g.add_initializer(make_name(f"{name}_grad_seed"),
                                                     np.ones(shape, dtype=types[name].dtype))]

    def accumulated(name):
        parts = contributions.get(name)
        if not parts:
            return ""
        if len(parts) > 1:
            total = make_name(f"{name}_grad")
            g.nodes.append(Node("Sum", parts, [total], {}, "", make_name(f"{name}_grad_sum")))
            types[total] = types[name]
            contributions[name] = [total]
        return contributions[name][0]

    def request_output(node, i):
        """Make the forward node produce output i (ONNX Runtime's builders do the same)."""
        if i < len(node.outputs) and node.outputs[i]:
            return node.outputs[i]
        node.outputs.extend([""] * (i + 1 - len(node.outputs)))
        node.outputs[i] = make_name(f"{node.name}_out{i}")
        types[node.outputs[i]] = check_graph_node(g, node, types).out_types[i]
        return node.outputs[i]

    for node in reversed(order):
        output_grads = {i: accumulated(o) for i, o in enumerate(node.outputs) if o in needs_grad}
        output_grads = {i: v for i, v in output_grads.items() if v}
        if not output_grads:
            continue
        builder = builders[id(node)]
        if builder is None:
            raise GraphError(f"node {node.name!r}: op {node.op_type!r} (domain {node.domain or 'ai.onnx'!r}, "
                             f"opset {g.opset(node.domain)}) has no registered gradient")
        input_grads = {}
        for i, x in enumerate(node.inputs):
            if x in needs_grad and edge_open(node, i, x):
                input_grads[i] = make_name(f"{x}_grad_{node.name}")
                g.value_info[input_grads[i]] = types[x]
        if not input_grads:
            continue
        ctx = GradContext(g, node, builder, output_grads, input_grads, types, make_name, request_output)
        builder.build(ctx)
        produced = set()
        for op_type, inputs, outputs, attrs, domain in ctx.emitted:
            g.nodes.append(Node(op_type, inputs, outputs, attrs, domain, make_name(f"{node.name}_{op_type}")))
            produced.update(o for o in outputs if o)
        for i, name in input_grads.items():
            if name not in produced:
                raise GraphError(f"gradient builder of {node.op_type} (node {node.name!r}) did not produce "
                                 f"the gradient of input #{i} {node.inputs[i]!r}")
            types[name] = types[node.inputs[i]]
            contributions.setdefault(node.inputs[i], []).append(name)

    grads = {name: (accumulated(name) or None) for name in wrt}
    g.outputs = list(dict.fromkeys(list(g.outputs) + losses + [v for v in grads.values() if v]))
    return g, grads
