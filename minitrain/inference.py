"""Static shape and dtype inference over a whole graph, and its topological order.

Both the gradient builder (which needs forward types, e.g. to know which axes were broadcast)
and the scheduler (which needs sizes for the planned peak) read the types from here.
"""
from __future__ import annotations

import heapq

import numpy as np

from .errors import GraphError
from .ops import get_schema, infer_node, resolve_attrs
from .ops.schema import TensorType


def topological_order(graph):
    """Nodes in an order where every input is produced before it is read (Kahn's algorithm,
    iterative, ties broken by position in graph.nodes so the order is deterministic)."""
    producers = graph.producers()
    available = set(graph.input_names) | set(graph.initializers)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    waiting = {}
    dependents = {}
    for node in graph.nodes:
        deps = set()
        for name in node.inputs:
            if not name or name in available:
                continue
            if name not in producers:
                raise GraphError(f"node {node.name!r} ({node.op_type}) reads {name!r}, which no node, "
                                 "graph input or initializer defines")
            deps.add(id(producers[name]))
        waiting[id(node)] = len(deps)
        for d in deps:
            dependents.setdefault(d, []).append(node)
    ready = [(index[id(n)], n) for n in graph.nodes if waiting[id(n)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for dep in dependents.get(id(node), ()):
            waiting[id(dep)] -= 1
            if waiting[id(dep)] == 0:
                heapq.heappush(ready, (index[id(dep)], dep))
    if len(order) != len(graph.nodes):
        stuck = [n.name for n in graph.nodes if waiting[id(n)] > 0][:5]
        raise GraphError(f"graph {graph.name!r} has a cycle through nodes {stuck}")
    return order


def initializer_type(array):
    """TensorType of a constant; small int64 vectors carry their value (shapes)."""
    array = np.asarray(array)
    value = tuple(int(v) for v in array) if array.dtype == np.int64 and array.ndim == 1 and array.size <= 16 else None
    return TensorType(array.dtype, tuple(array.shape), value)


def infer_types(graph, order=None):
    """TensorType of every value in the graph, validating each node against its schema.
    A declared graph.value_info entry fills in a shape that inference cannot know."""
    types = {v.name: v.type for v in graph.inputs}
    types.update({name: initializer_type(a) for name, a in graph.initializers.items()})
    for node in order or topological_order(graph):
        sch = get_schema(node.op_type, node.domain, graph.opset(node.domain))
        attrs = resolve_attrs(sch, node.attrs, node.name)
        input_types = [types[n] if n else None for n in node.inputs]
        while input_types and input_types[-1] is None:
            input_types.pop()
        wanted = [sch.outputs[i] for i, out in enumerate(node.outputs) if out and i < len(sch.outputs)]
        if len(node.outputs) > len(sch.outputs):
            raise GraphError(f"node {node.name!r} ({node.op_type}) has {len(node.outputs)} outputs; "
                             f"the op defines {list(sch.outputs)}")
        _, out_types = infer_node(sch, input_types, attrs, node.name, wanted)
        for name, t in zip(node.outputs, out_types):
            if not name:
                continue
            declared = graph.value_info.get(name)
            if t.shape is None and declared is not None:
                t = TensorType(t.dtype, declared.shape)
            types[name] = t
    return types
