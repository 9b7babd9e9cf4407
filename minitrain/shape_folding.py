"""Shape subgraphs folded into constants: the Shape -> Gather -> Unsqueeze -> Concat -> Reshape
chains (and the Add/Div/Mul arithmetic of chunk's split points) that PyTorch's exporter emits
for view, flatten, reshape and chunk.

A ShapeFolder evaluates such nodes on the host when a graph is traced (nn.GraphModule's replay,
the importer's check), on values that are the dims of a tensor's type: ints, or names for the
symbolic ones (the batch "N").  Values all of whose entries are known fold as every constant does
(constant_folding.py: its ops, its evaluation through run_node); the ShapeFolder carries the
names through Gather, Unsqueeze, Squeeze, Concat, Slice, Cast and the integer arithmetic.  What
the subgraph computes then reaches its consumer as a constant, so no step runs a node for it and
nothing is copied between device and host:

- a value whose entries are all known becomes that int64 constant;
- Reshape's target shape with symbolic entries still folds when each of them is the data's own
  dim at the same position (ONNX's 0: copy the dim) or there is one such entry left (-1).

A value that cannot be made constant this way (Reshape's target with symbolic entries elsewhere,
Expand or ConstantOfShape to a batch-sized shape) is computed at run time instead: the nodes of
its subgraph (`run_time_nodes`) go into the traced graph, where they run on the host: Shape's
kernel reads only the dims of its input (a host output on every provider, no copy of the data),
the int64 ops after it run on the CPU, and the consumer reads the result from host memory.
Their values depend on the input signature alone, so a captured CUDA step still replays them
(providers/cuda/capture/step_graph.py).  A subgraph with a node that has no host kernel for
int64 (Add, Sub, Mul) is refused with a GraphError naming it.
"""
from __future__ import annotations

import numpy as np

from .constant_folding import FOLDED_OPS, fold_node, shape_entries
from .errors import GraphError
from .ops.schema import ONNX_DOMAIN, TENSOR_PROTO_DTYPES
from .registry import find

INT_TYPES = (np.dtype(np.int64), np.dtype(np.int32))


class ShapeValue:
    """A 0-d or 1-d int tensor whose entries are ints or symbolic dim names (str)."""

    def __init__(self, entries, scalar=False):
        self.entries = tuple(entries)
        self.scalar = scalar

    @property
    def known(self):
        return all(isinstance(e, (int, np.integer)) for e in self.entries)

    def array(self):
        values = np.array([int(e) for e in self.entries], dtype=np.int64)
        return values.reshape(()) if self.scalar else values

    def __repr__(self):
        return f"ShapeValue({list(self.entries)}{', scalar' if self.scalar else ''})"


def _from_array(array):
    array = np.asarray(array)
    if array.dtype not in INT_TYPES or array.ndim > 1:
        return None
    return ShapeValue(array.reshape(-1).tolist(), scalar=array.ndim == 0)


def _binary(op, a, b):
    if isinstance(a, str) or isinstance(b, str):
        return f"({a} {op} {b})"
    if op == "/":
        if b == 0:
            raise GraphError(f"integer Div by zero in a shape computation: {a} / 0")
        quotient = abs(a) // abs(b)         # ONNX's integer Div truncates toward zero
        return quotient if (a < 0) == (b < 0) else -quotient
    return {"+": a + b, "-": a - b, "*": a * b}[op]


class ShapeFolder:
    """The shape values of one traced graph, by value name; `initializers` (name -> array): the
    graph's, whose int ones (0-d or 1-d) are known values."""

    def __init__(self, initializers=None):
        self.values = {}
        self.sources = {}       # value name -> (the node that computed it, its domain's opset)
        for name, array in (initializers or {}).items():
            self.add_constant(name, array)

    def is_shape_value(self, name):
        return name in self.values

    def add_constant(self, name, array):
        """Record an int initializer (0-d or 1-d) as a known shape value."""
        value = _from_array(array)
        if value is not None:
            self.values[name] = value

    def try_fold(self, node, attrs, opset, dims_of):
        """Evaluate `node` when it is a shape op on shape values; returns True when its outputs
        are now shape values.  dims_of(name) gives a tensor's dims (ints or names) or None.
        Known values fold as every constant does (constant_folding.fold_node); the entries
        that are names are carried through the ops here."""
        if node.op_type not in FOLDED_OPS or node.domain or len(node.outputs) != 1:
            return False
        inputs = [self.values.get(name) if name else None for name in node.inputs]
        known = {name: value.array() for name, value in zip(node.inputs, inputs) if value is not None and value.known}
        folded = fold_node(node, opset, known, dims_of)
        if folded is not None:
            result = _from_array(folded[0])
        else:
            result = self._evaluate(node.op_type, node.inputs, inputs, attrs, opset, dims_of)
        if result is None:
            return False
        self.values[node.outputs[0]] = result
        self.sources[node.outputs[0]] = (node, opset)
        return True

    def run_time_nodes(self, name):
        """The nodes that compute shape value `name` from the tensors' dims at run time, each
        once, every node after those it reads (the known values they read are constants).
        GraphError when one of them has no host kernel."""
        order, seen, stack = [], set(), [(name, False)]
        while stack:
            value, ready = stack.pop()
            if ready:
                order.append(self.sources[value][0])
                continue
            if value in seen or self.values[value].known:
                continue
            seen.add(value)
            node, opset = self.sources[value]
            if find(node.op_type, ONNX_DOMAIN, opset, "cpu", np.int64) is None:
                raise GraphError(f"node {node.name!r} ({node.op_type}) computes {value!r} = "
                                 f"{list(self.values[value].entries)} from symbolic dims; it would run at every "
                                 f"step, and has no host kernel for int64")
            stack.append((value, True))
            stack.extend((x, False) for x in reversed(node.inputs) if x in self.values)
        return order

    def _evaluate(self, op, names, inputs, attrs, opset, dims_of):
        """The shape value of `op` on `inputs` (entries ints or names), or None: what fold_node
        leaves, a name among the entries or int64 arithmetic the host has no kernel for."""
        if op == "Shape":
            dims = dims_of(names[0])
            return None if dims is None else ShapeValue(shape_entries(dims, attrs))
        present = [v for v, name in zip(inputs, names) if name]
        if any(v is None for v in present) or not present:
            return None
        data = inputs[0]
        if op in ("Identity", "Cast"):
            return data if op == "Identity" or TENSOR_PROTO_DTYPES.get(attrs.get("to")) in INT_TYPES else None
        if op == "Gather":
            index = inputs[1]
            if data.scalar or not index.known or attrs.get("axis", 0) != 0:
                return None
            picked = [data.entries[int(i)] for i in index.entries]
            return ShapeValue(picked, scalar=index.scalar)
        if op == "Unsqueeze":
            axes = inputs[1].entries if opset >= 13 and len(inputs) > 1 and inputs[1] else attrs.get("axes")
            return ShapeValue(data.entries) if data.scalar and list(axes or []) in ([0], [-1]) else None
        if op == "Squeeze":
            return ShapeValue(data.entries, scalar=True) if not data.scalar and len(data.entries) == 1 else None
        if op == "Concat":
            if any(v.scalar for v in inputs):
                return None
            return ShapeValue([e for v in inputs for e in v.entries])
        if op == "Slice":
            return self._slice(inputs, attrs, opset)
        if op in ("Add", "Sub", "Mul", "Div"):
            a, b = inputs
            n = max(len(a.entries), len(b.entries))
            if {len(a.entries), len(b.entries)} - {1, n}:
                return None
            symbol = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}[op]
            pick = (lambda v, i: v.entries[0] if len(v.entries) == 1 else v.entries[i])
            return ShapeValue([_binary(symbol, pick(a, i), pick(b, i)) for i in range(n)],
                              scalar=a.scalar and b.scalar)
        return None

    @staticmethod
    def _slice(inputs, attrs, opset):
        data = inputs[0]
        if data.scalar:
            return None
        if opset >= 10:
            bounds = [v.entries if v is not None else None for v in (inputs + [None] * 5)[1:5]]
            starts, ends, axes, steps = bounds
        else:
            starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
        if starts is None or ends is None or any(isinstance(e, str) for e in (*starts, *ends, *(steps or ()))):
            return None
        if axes is not None and list(axes) not in ([0], [-1]):
            return None
        step = steps[0] if steps else 1
        return ShapeValue(data.entries[slice(int(starts[0]), int(ends[0]), int(step))])

    def constant_for(self, name, consumer, index, data_dims):
        """The int64 array that stands for shape value `name` as input `index` of `consumer`;
        data_dims: the dims of the consumer's first input (Reshape's data).  None when a
        symbolic dim cannot be expressed: the value is then computed at run time."""
        value = self.values[name]
        if value.known:
            return value.array()
        if consumer.op_type == "Reshape" and index == 1 and not consumer.attrs.get("allowzero", 0):
            entries = list(value.entries)
            for i, e in enumerate(entries):
                if isinstance(e, str) and data_dims is not None and i < len(data_dims) and data_dims[i] == e:
                    entries[i] = 0
            unknown = [i for i, e in enumerate(entries) if isinstance(e, str)]
            if len(unknown) == 1 and -1 not in entries:
                entries[unknown[0]] = -1
                unknown = []
            if not unknown:
                return np.array(entries, dtype=np.int64)
        return None
