"""Static shape and dtype inference over a whole graph, and its topological order.

Both the gradient builder (which needs forward types, e.g. to know which axes were broadcast)
and the scheduler (which needs sizes for the planned peak) read the types from here.  Each node
is validated once: `check_node` remembers what it settled for a node signature (op, opset,
attributes, input types, outputs asked for), so a node that autodiff checked is not checked
again by the scheduler, and the executor runs what the plan settled without checking at all.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from .caches import LRUCache, freeze
from .errors import GraphError
from .ops import get_schema, infer_node, resolve_attrs
from .ops.constant import known_value
from .ops.schema import TensorType, trim_absent


def topological_order(graph, rank=None):
    """Nodes in an order where every input is produced before it is read (Kahn's algorithm,
    iterative).  Among the nodes ready to run, the one of lowest `rank(node)` (an int; None:
    all equal) goes first, ties broken by position in graph.nodes so the order is deterministic."""
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
    def key(node):
        return (0 if rank is None else rank(node), index[id(node)])
    ready = [(key(n), n) for n in graph.nodes if waiting[id(n)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for dep in dependents.get(id(node), ()):
            waiting[id(dep)] -= 1
            if waiting[id(dep)] == 0:
                heapq.heappush(ready, (key(dep), dep))
    if len(order) != len(graph.nodes):
        stuck = [n.name for n in graph.nodes if waiting[id(n)] > 0][:5]
        raise GraphError(f"graph {graph.name!r} has a cycle through nodes {stuck}")
    return order


def initializer_type(array):
    """TensorType of a constant; small int64 and float vectors carry their value (shapes,
    Resize's scales)."""
    array = np.asarray(array)
    return TensorType(array.dtype, tuple(array.shape), known_value(array))


@dataclass(frozen=True)
class CheckedNode:
    """What validating a node settles: its schema, resolved attributes, element type,
    the outputs asked for and their types."""
    schema: object
    attrs: dict
    dtype: np.dtype
    wanted: tuple
    out_types: tuple


_CHECKED = LRUCache("validated nodes", scale=8)     # a graph has one signature per node


def check_node(op_type, domain, opset, attrs, input_types, wanted=None, node_name=None):
    """Validate a node against its schema (once per signature) and settle its CheckedNode.
    `wanted` lists the output names asked for (None: all of them)."""
    input_types = trim_absent(input_types)
    try:
        key = (op_type, domain, opset, freeze(attrs or {}), tuple(input_types),
               None if wanted is None else tuple(wanted))
        hash(key)
    except TypeError:
        key = None
    checked = _CHECKED.get(key) if key is not None else None
    if checked is not None:
        return checked
    sch = get_schema(op_type, domain, opset)
    resolved = resolve_attrs(sch, attrs, node_name)
    wanted = tuple(sch.outputs if wanted is None else wanted)
    for name in wanted:
        sch.output_index(name)
    ctx, out_types = infer_node(sch, list(input_types), resolved, node_name, wanted)
    dtype = ctx.dtype
    if dtype is None:
        present = [t for t in input_types if t is not None]
        dtype = present[0].dtype if present else np.dtype(np.float32)
    checked = CheckedNode(sch, resolved, np.dtype(dtype), wanted, tuple(out_types))
    if key is not None:
        _CHECKED.put(key, checked)
    return checked


def check_graph_node(graph, node, types):
    """check_node for a node of `graph`, its input types read from `types`."""
    sch = get_schema(node.op_type, node.domain, graph.opset(node.domain))
    if len(node.outputs) > len(sch.outputs):
        raise GraphError(f"node {node.name!r} ({node.op_type}) has {len(node.outputs)} outputs; "
                         f"the op defines {list(sch.outputs)}")
    wanted = [sch.outputs[i] for i, out in enumerate(node.outputs) if out]
    return check_node(node.op_type, node.domain, graph.opset(node.domain), node.attrs,
                      tuple(types[n] if n else None for n in node.inputs), wanted, node.name)


def infer_types(graph, order=None):
    """TensorType of every value in the graph, validating each node against its schema.
    A declared graph.value_info entry fills in a shape that inference cannot know."""
    types = {v.name: v.type for v in graph.inputs}
    types.update({name: initializer_type(a) for name, a in graph.initializers.items()})
    for node in order or topological_order(graph):
        out_types = check_graph_node(graph, node, types).out_types
        for name, t in zip(node.outputs, out_types):
            if not name:
                continue
            declared = graph.value_info.get(name)
            if t.shape is None and declared is not None:
                t = TensorType(t.dtype, declared.shape)
            types[name] = t
    return types
