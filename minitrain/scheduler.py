"""Execution plans: node order, tensor lifetimes and the planned peak memory.

`schedule` prunes the nodes that no fetched value depends on, orders the rest topologically
(iteratively: a chain of thousands of nodes is fine), records for every value the step of its
last use, and lists at each step the values to free right after it.  The executor drops those
values from its environment, so the provider can free or reuse their buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import GraphError
from .inference import infer_types, topological_order
from .ops import get_schema


@dataclass
class Step:
    """One node of the plan, with the values whose last use it is."""
    index: int
    node: object
    schema_outputs: tuple
    out_types: list
    frees: tuple = ()
    _shape_cache: dict = field(default_factory=dict, repr=False)

    def output_shapes(self, dims, key=None):
        """Shapes of this node's outputs that the graph knows, with symbolic dims bound by
        `dims` (what the kernel would otherwise have to guess, e.g. a pooling gradient's dX);
        `key` is the hashable form of dims, when the caller has it."""
        key = tuple(sorted(dims.items())) if key is None else key
        shapes = self._shape_cache.get(key)
        if shapes is None:
            shapes = {}
            for i, (name, t) in enumerate(zip(self.node.outputs, self.out_types)):
                if name and t is not None and t.shape is not None:
                    concrete = tuple(dims.get(d, d) if isinstance(d, str) else d for d in t.shape)
                    if all(isinstance(d, int) for d in concrete):
                        shapes[self.schema_outputs[i]] = concrete
            self._shape_cache[key] = shapes
        return shapes


@dataclass
class Plan:
    graph: object
    steps: list
    types: dict
    fetch: list
    needed_inputs: set
    last_use: dict

    def free_step(self, name):
        """Index of the step after which `name` is dropped (None: kept to the end)."""
        for step in self.steps:
            if name in step.frees:
                return step.index
        return None

    def peak_bytes(self, dims=None):
        """Planned peak of the bytes held by node outputs (graph inputs and initializers are
        the caller's), simulating allocation at each step and freeing at last use.  Views
        (Reshape, Identity) count as copies, so this is an upper bound.  Values whose shape
        stays unknown count as 0."""
        dims = dims or {}
        live = peak = 0
        sizes = {}
        for step in self.steps:
            for name, t in zip(step.node.outputs, step.out_types):
                if name and t is not None and t.shape is not None:
                    shape = [dims.get(d, d) if isinstance(d, str) else d for d in t.shape]
                    if all(isinstance(d, int) for d in shape):
                        sizes[name] = t.dtype.itemsize * _prod(shape)
                        live += sizes[name]
            peak = max(peak, live)
            for name in step.frees:
                live -= sizes.pop(name, 0)
        return peak

    def total_bytes(self, dims=None):
        """Sum of the sizes of every node output: what running without freeing would hold."""
        dims = dims or {}
        total = 0
        for step in self.steps:
            for name, t in zip(step.node.outputs, step.out_types):
                if name and t is not None and t.shape is not None:
                    shape = [dims.get(d, d) if isinstance(d, str) else d for d in t.shape]
                    if all(isinstance(d, int) for d in shape):
                        total += t.dtype.itemsize * _prod(shape)
        return total


def _prod(shape):
    result = 1
    for d in shape:
        result *= d
    return result


def schedule(graph, fetch=None):
    """Plan the run of `graph` producing `fetch` (default: the graph outputs)."""
    fetch = list(graph.outputs if fetch is None else fetch)
    order = topological_order(graph)
    types = infer_types(graph, order)
    unknown = [f for f in fetch if f not in types]
    if unknown:
        raise GraphError(f"graph {graph.name!r} cannot produce {unknown}: no such value")
    # prune: keep only the nodes some fetched value depends on
    needed = set(fetch)
    kept = []
    for node in reversed(order):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(x for x in node.inputs if x)
    kept.reverse()
    persistent = set(graph.initializers) | set(fetch)
    last_use = {}
    for index, node in enumerate(kept):
        for name in node.outputs:
            if name:
                last_use[name] = index      # an output nobody reads dies right away
        for name in node.inputs:
            if name:
                last_use[name] = index
    frees = {}
    for name, index in last_use.items():
        if name not in persistent:
            frees.setdefault(index, []).append(name)
    steps = []
    for index, node in enumerate(kept):
        sch = get_schema(node.op_type, node.domain, graph.opset(node.domain))
        out_types = [types.get(o) if o else None for o in node.outputs]
        steps.append(Step(index, node, sch.outputs, out_types, tuple(frees.get(index, ()))))
    needed_inputs = {n for n in graph.input_names if n in needed}
    return Plan(graph, steps, types, fetch, needed_inputs, last_use)
