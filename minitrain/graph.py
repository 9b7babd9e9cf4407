"""An ONNX-like graph IR: named Values, Nodes with op type, domain and attributes, and Graphs
with inputs, outputs, initializers (parameters) and opset imports per domain."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import GraphError
from .ops.schema import MS_DOMAIN, ONNX_DOMAIN, TensorType

DEFAULT_OPSETS = {ONNX_DOMAIN: 19, MS_DOMAIN: 1}


@dataclass
class Value:
    """A named tensor of the graph: dtype and shape (dims are ints or symbolic names)."""
    name: str
    dtype: np.dtype = np.dtype(np.float32)
    shape: Optional[tuple] = None

    def __post_init__(self):
        self.dtype = np.dtype(self.dtype)
        if self.shape is not None:
            self.shape = tuple(self.shape)

    @property
    def type(self):
        return TensorType(self.dtype, self.shape)


@dataclass
class Node:
    """One op application.  An empty input name stands for an absent optional input, an
    empty output name for an output nobody asked for."""
    op_type: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    domain: str = ONNX_DOMAIN
    name: str = ""

    def __post_init__(self):
        self.inputs = list(self.inputs)
        self.outputs = list(self.outputs)
        self.attrs = dict(self.attrs)


class UniqueNames:
    """Fresh names, unique among `taken` (a set, grown with every name handed out): `base`
    itself when free (unless always_suffix), else base_<n> with n from one counter that starts at
    `start` and skips the names already taken.  Graphs, the graph builder of minitrain.nn and
    autodiff all name values and nodes with it."""

    def __init__(self, taken=None, start=0):
        self.taken = set() if taken is None else taken
        self._counter = itertools.count(start)

    def __call__(self, base, always_suffix=False):
        if not always_suffix and base not in self.taken:
            self.taken.add(base)
            return base
        while True:
            candidate = f"{base}_{next(self._counter)}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate


class Graph:
    """A computation: nodes in any order (the scheduler sorts them), graph inputs fed at run
    time, initializers (parameters and constants) held by the graph, and graph outputs."""

    def __init__(self, nodes=(), inputs=(), outputs=(), initializers=None, opset_imports=None,
                 name="graph"):
        self.name = name
        self.nodes = list(nodes)
        self.inputs = [v if isinstance(v, Value) else Value(v) for v in inputs]
        self.outputs = list(outputs)
        self.initializers = dict(initializers or {})
        self.opset_imports = {**DEFAULT_OPSETS, **(opset_imports or {})}
        self.value_info = {}   # name -> TensorType declared for intermediate values
        self._names = UniqueNames()     # taken: the names seen so far, grown as nodes are appended
        self._nodes_seen = 0

    # ------------------------------------------------------------------ building
    def unique_name(self, base):
        """A value or node name not used anywhere in the graph yet (nodes are scanned once, as
        they are appended, so building a large graph stays linear)."""
        taken = self._names.taken
        for node in self.nodes[self._nodes_seen:]:
            taken.add(node.name)
            taken.update(node.inputs)
            taken.update(node.outputs)
        self._nodes_seen = len(self.nodes)
        taken.update(self.initializers)
        taken.update(v.name for v in self.inputs)
        return self._names(base, always_suffix=True)

    def add_node(self, op_type, inputs, outputs=None, attrs=None, domain=ONNX_DOMAIN, name=None,
                 num_outputs=1):
        """Append a node; fresh output names are made when `outputs` is None.  Returns the
        output name when exactly one output is named ("" marks an unused output), else the list."""
        if outputs is None:
            outputs = [self.unique_name(f"{op_type.lower()}_out") for _ in range(num_outputs)]
        node = Node(op_type, inputs, outputs, attrs or {}, domain, name or self.unique_name(op_type))
        self.nodes.append(node)
        named = [o for o in node.outputs if o]
        return named[0] if len(named) == 1 else list(node.outputs)

    def add_initializer(self, name, array):
        self.initializers[name] = np.asarray(array)
        return name

    def add_input(self, name, dtype=np.float32, shape=None):
        self.inputs.append(Value(name, dtype, shape))
        return name

    # ------------------------------------------------------------------ queries
    def all_value_names(self):
        names = {v.name for v in self.inputs} | set(self.initializers)
        for n in self.nodes:
            names.update(x for x in n.inputs if x)
            names.update(x for x in n.outputs if x)
        return names

    def producers(self):
        """Map from value name to the node producing it; raises on a value produced twice."""
        produced = {}
        for node in self.nodes:
            for out in node.outputs:
                if not out:
                    continue
                if out in produced or out in self.initializers or out in self.input_names:
                    raise GraphError(f"value {out!r} is defined more than once (by node {node.name!r})")
                produced[out] = node
        return produced

    def consumers(self):
        """Map from value name to the list of nodes reading it."""
        readers = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    readers.setdefault(name, []).append(node)
        return readers

    @property
    def input_names(self):
        return [v.name for v in self.inputs]

    def opset(self, domain):
        try:
            return self.opset_imports[domain]
        except KeyError:
            raise GraphError(f"graph {self.name!r} imports no opset for domain {domain or 'ai.onnx'!r}") from None

    def copy(self):
        """A copy whose node list, nodes and dicts can be changed without touching this graph
        (initializer arrays are shared)."""
        g = Graph([Node(n.op_type, n.inputs, n.outputs, n.attrs, n.domain, n.name) for n in self.nodes],
                  [Value(v.name, v.dtype, v.shape) for v in self.inputs], list(self.outputs),
                  dict(self.initializers), dict(self.opset_imports), self.name)
        g.value_info = dict(self.value_info)
        return g

    def __repr__(self):
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, inputs={self.input_names}, "
                f"outputs={self.outputs}, {len(self.initializers)} initializers)")
