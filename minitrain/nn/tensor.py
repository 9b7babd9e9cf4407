"""Symbolic tensors and the builder that records them into a Graph.

Calling a layer on a `Tensor` does not compute anything: it appends nodes to the builder's
graph and returns a new Tensor naming the node's output.  Shapes and dtypes are inferred as
each node is added, so a mistake (a channel mismatch, a wrong rank) raises at build time with
the layer's name in the message.  Parameters become initializers named by their path in the
model (`conv1.weight`, `0.bias`).
"""
from __future__ import annotations

import contextlib
import numbers

import numpy as np

from ..errors import GraphError
from ..graph import Graph, UniqueNames
from ..inference import initializer_type
from ..ops import get_schema, infer_node, resolve_attrs
from ..ops.schema import TensorType

INT64_MAX = 2 ** 63 - 1


class Tensor:
    """A value of the graph being built: `name`, inferred `shape` and `dtype`.

    Arithmetic (+, -, *, /, **, unary -), the reductions (sum, mean, max over `dim` with
    `keepdim`), elementwise math (log, exp, sqrt, abs, clamp), reshape and indexing with ints,
    slices, None and ... each add one standard ONNX node; Python numbers become constants of
    the tensor's dtype.  Everything here has a gradient, so a loss written with them trains."""

    def __init__(self, builder, name):
        self.builder = builder
        self.name = name

    @property
    def type(self) -> TensorType:
        return self.builder.types[self.name]

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def ndim(self):
        return self.type.rank

    def _binary(self, op, other, reverse=False):
        other = self.builder.as_input(other, like=self)
        a, b = (other, self.name) if reverse else (self.name, other)
        return self.builder.op(op, [a, b])

    def __add__(self, other):
        return self._binary("Add", other)

    def __radd__(self, other):
        return self._binary("Add", other, reverse=True)

    def __sub__(self, other):
        return self._binary("Sub", other)

    def __rsub__(self, other):
        return self._binary("Sub", other, reverse=True)

    def __mul__(self, other):
        return self._binary("Mul", other)

    def __rmul__(self, other):
        return self._binary("Mul", other, reverse=True)

    def __truediv__(self, other):
        return self._binary("Div", other)

    def __rtruediv__(self, other):
        return self._binary("Div", other, reverse=True)

    def __pow__(self, exponent):
        return self._binary("Pow", exponent)

    def __rpow__(self, base):
        return self._binary("Pow", base, reverse=True)

    def __neg__(self):
        return self.builder.op("Neg", [self.name])

    def pow(self, exponent):
        return self ** exponent

    # ------------------------------------------------------------------ reductions
    def _reduce(self, op, dim, keepdim):
        """ReduceSum/ReduceMean/ReduceMax over `dim` (an int, a sequence, None: every dim), the
        axes an int64 input (the form of the builder's opset, ONNX 19)."""
        attrs = {"keepdims": int(bool(keepdim))}
        if dim is None:
            return self.builder.op(op, [self], attrs)
        axes = [int(dim)] if isinstance(dim, numbers.Integral) else [int(d) for d in dim]
        return self.builder.op(op, [self, self.builder.constant(np.array(axes, dtype=np.int64), "axes")], attrs)

    def sum(self, dim=None, keepdim=False):
        """The sum over `dim` (every dim when None), as torch.sum."""
        return self._reduce("ReduceSum", dim, keepdim)

    def mean(self, dim=None, keepdim=False):
        """The mean over `dim` (every dim when None), as torch.mean."""
        return self._reduce("ReduceMean", dim, keepdim)

    def max(self, dim=None, keepdim=False):
        """The largest value over `dim` (every dim when None), as torch.amax: values only, and
        tied maxima share the gradient evenly."""
        return self._reduce("ReduceMax", dim, keepdim)

    # ------------------------------------------------------------------ elementwise math
    def log(self):
        return self.builder.op("Log", [self])

    def exp(self):
        return self.builder.op("Exp", [self])

    def sqrt(self):
        return self.builder.op("Sqrt", [self])

    def abs(self):
        return self.builder.op("Abs", [self])

    def clamp(self, min=None, max=None):
        """Limit to [min, max] (either may be None), as torch.clamp; the gradient passes where
        min <= x <= max."""
        if min is None and max is None:
            raise ValueError("clamp: give min, max or both")
        bounds = [None if v is None else self.builder.as_input(v, like=self) for v in (min, max)]
        return self.builder.op("Clip", [self] + bounds)

    # ------------------------------------------------------------------ layout
    def flatten(self, start_dim=1):
        """Collapse the dims from start_dim on into one (ONNX Flatten)."""
        return self.builder.op("Flatten", [self.name], {"axis": start_dim})

    def reshape(self, *shape):
        """ONNX Reshape to `shape` (ints, or one sequence of them): -1 is inferred from the
        other dims, 0 copies the input's dim at that position (the symbolic batch, say)."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        target = self.builder.constant(np.array([int(d) for d in shape], dtype=np.int64), "shape")
        return self.builder.op("Reshape", [self, target])

    def __getitem__(self, key):
        """Basic indexing as NumPy's: ints (the dim dropped), slices with any step, None (a new
        dim of 1) and ...; lowered to Slice, then Squeeze and Unsqueeze where needed."""
        if self.ndim is None:
            raise GraphError(f"indexing {self.name!r}: its rank is unknown")
        cuts, dropped, inserted = index_plan(self.name, self.shape, key if isinstance(key, tuple) else (key,))
        b, out = self.builder, self
        if cuts:
            columns = zip(*cuts)
            index = [b.constant(np.array(v, dtype=np.int64), base)
                     for v, base in zip(columns, ("starts", "ends", "axes", "steps"))]
            out = b.op("Slice", [out] + index)
        if dropped:
            out = b.op("Squeeze", [out, b.constant(np.array(dropped, dtype=np.int64), "axes")])
        if inserted:
            out = b.op("Unsqueeze", [out, b.constant(np.array(inserted, dtype=np.int64), "axes")])
        return out

    def __iter__(self):
        raise TypeError(f"a symbolic Tensor cannot be iterated ({self.name!r}); index it instead")

    def __repr__(self):
        return f"Tensor({self.name!r}, shape={self.shape}, dtype={self.dtype})"


def index_plan(name, shape, key):
    """What indexing a tensor of `shape` with the tuple `key` takes: the Slice cuts (start, end,
    axis, step), the sliced axes an int index drops (Squeeze) and the output positions None
    inserts (Unsqueeze).  Raises IndexError/TypeError as NumPy would, naming the tensor."""
    for k in key:
        supported = k is None or k is Ellipsis or isinstance(k, (numbers.Integral, slice))
        if not supported or isinstance(k, (bool, np.bool_)):
            raise TypeError(f"indexing {name!r}: only ints, slices, None and ... are supported, got {k!r}")
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError(f"indexing {name!r}: an index can only have one ellipsis")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > len(shape):
        raise IndexError(f"indexing {name!r} of shape {shape}: too many indices ({used})")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - used) + key[at + 1:]
    cuts, dropped, inserted = [], [], []
    axis = position = 0
    for k in key:
        if k is None:
            inserted.append(position)
            position += 1
            continue
        if isinstance(k, numbers.Integral):
            k, dim = int(k), shape[axis]
            if isinstance(dim, int) and not -dim <= k < dim:
                raise IndexError(f"indexing {name!r} of shape {shape}: index {k} is out of range for dim {axis} "
                                 f"of size {dim}")
            cuts.append((k, k + 1 if k != -1 else INT64_MAX, axis, 1))
            dropped.append(axis)
        else:
            if k != slice(None):
                step = 1 if k.step is None else int(k.step)
                if step == 0:
                    raise ValueError(f"indexing {name!r}: slice step cannot be zero")
                start = int(k.start) if k.start is not None else 0 if step > 0 else INT64_MAX
                stop = int(k.stop) if k.stop is not None else INT64_MAX if step > 0 else -INT64_MAX - 1
                cuts.append((start, stop, axis, step))
            position += 1
        axis += 1
    return cuts, dropped, inserted


class GraphBuilder:
    """Records a model into a Graph.

    `training` selects the graph's mode: layers such as Dropout and BatchNorm build their
    training form when it is true and their inference form otherwise.  `names` maps id() of
    the model's modules and parameters to their qualified names (Module.names()).
    `state_updates` maps output values to the buffers they replace after each training run
    (BatchNorm's running statistics).
    """

    def __init__(self, name="model", *, training=False, names=None):
        self.graph = Graph(name=name)
        self.training = training
        self.types = {}
        self.names = names or {}
        self.state_updates = {}
        self._scope = []
        self._initializer_of = {}       # id(array) -> initializer name
        self._used = set()
        self._unique = UniqueNames(self._used)

    # ------------------------------------------------------------------ values
    def input(self, name, dtype=np.float32, shape=None):
        """Declare a graph input; dims may be symbolic names such as "N"."""
        self.graph.add_input(name, dtype, shape)
        self._used.add(name)
        self.types[name] = self.graph.inputs[-1].type
        return Tensor(self, name)

    def parameter(self, holder):
        """The initializer name of a Parameter or Buffer of the model (added on first use)."""
        key = id(holder)
        if key not in self._initializer_of:
            name = self.names.get(key)
            if name is None:
                raise GraphError("a layer uses a parameter that is not registered in the model: assign every "
                                 "layer to an attribute of a Module (or put it in a Sequential)")
            self.graph.add_initializer(name, holder.data)
            self.types[name] = initializer_type(holder.data)
            self._used.add(name)
            self._initializer_of[key] = name
        return self._initializer_of[key]

    def constant(self, array, base="const"):
        name = self.fresh(base)
        self.graph.add_initializer(name, np.asarray(array))
        self.types[name] = initializer_type(self.graph.initializers[name])
        return name

    def as_input(self, value, like=None):
        """A value name for a node input: names as they are, Tensors by name, Parameters as
        initializers, Python numbers and arrays as constants (numbers take `like`'s dtype)."""
        if isinstance(value, str):
            return value
        if isinstance(value, Tensor):
            if value.builder is not self:
                raise GraphError(f"tensor {value.name!r} belongs to another graph")
            return value.name
        if isinstance(value, numbers.Number) and like is not None:
            return self.constant(np.array(value, dtype=like.dtype))
        if hasattr(value, "data") and not isinstance(value, np.ndarray):
            return self.parameter(value)         # a Parameter or Buffer of the model
        return self.constant(np.asarray(value))

    # ------------------------------------------------------------------ nodes
    def fresh(self, base):
        """A value or node name not used yet, scoped by the module being built."""
        prefix = self._scope[-1] if self._scope else ""
        return self._unique(f"{prefix}.{base}" if prefix else base)

    @contextlib.contextmanager
    def scope(self, name, absolute=False):
        """Name the nodes built inside after a module: `name` is the module's qualified name
        (absolute) or a name relative to the enclosing scope."""
        outer = self._scope[-1] if self._scope else ""
        self._scope.append(name if absolute or not outer else f"{outer}.{name}" if name else outer)
        try:
            yield
        finally:
            self._scope.pop()

    def op(self, op_type, inputs, attrs=None, *, domain="", outputs=1):
        """Append a node and infer its output types.  `outputs` is a count of outputs to
        produce (the first ones), or a list of output slots where None skips an output.
        Returns a Tensor, or a tuple of Tensors (None for skipped slots) when there are
        several."""
        inputs = [self.as_input(x) if x is not None else "" for x in inputs]
        slots = [True] * outputs if isinstance(outputs, int) else [o is not None for o in outputs]
        sch = get_schema(op_type, domain, self.graph.opset(domain))
        node_name = self.fresh(op_type)
        out_names = [self._unique(f"{node_name}.{sch.outputs[i]}") if keep else "" for i, keep in enumerate(slots)]
        resolved = resolve_attrs(sch, attrs, node_name)
        wanted = [sch.outputs[i] for i, o in enumerate(out_names) if o]
        input_types = [self.types[x] if x else None for x in inputs]
        _, out_types = infer_node(sch, input_types, resolved, node_name, wanted)
        self.graph.add_node(op_type, inputs, out_names, attrs or {}, domain, name=node_name)
        for name, t in zip(out_names, out_types):
            if name:
                self.types[name] = t
        tensors = [Tensor(self, n) if n else None for n in out_names]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)
