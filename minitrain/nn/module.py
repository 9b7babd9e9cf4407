"""Module, Parameter, Buffer and Sequential: the containers of the layer API.

A Module holds Parameters (trained), Buffers (state such as BatchNorm's running statistics)
and sub-Modules, registered by attribute assignment as in PyTorch; `forward` describes the
computation on symbolic Tensors.  The arrays are owned by the Parameters and keep their
identity for the model's lifetime: compiled plans and optimizers hold references to them, and
every update (optimizer steps, load_state_dict) writes into them in place.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .tensor import GraphBuilder, Tensor


class Parameter:
    """A trainable array (C-contiguous; float32 unless given otherwise).

    requires_grad=False freezes it: a TrainingSession built afterwards gives it no gradient
    nodes and no update (it reads the flag when it is built; see TrainingSession)."""
    __slots__ = ("data", "requires_grad")

    def __init__(self, data, requires_grad=True):
        self.data = np.ascontiguousarray(data)
        self.requires_grad = bool(requires_grad)

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self):
        return self.data.size

    def __array__(self, dtype=None, copy=None):
        """np.asarray(parameter) is its array (np.array(parameter) a copy)."""
        if copy or (dtype is not None and np.dtype(dtype) != self.data.dtype):
            return self.data.astype(dtype or self.data.dtype, copy=True)
        return self.data

    def __repr__(self):
        frozen = "" if self.requires_grad else ", requires_grad=False"
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}{frozen})"


class Buffer(Parameter):
    """A non-trainable array of the model's state (saved and loaded with it)."""
    __slots__ = ()

    def __init__(self, data):
        super().__init__(data, requires_grad=False)

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype})"


class Module:
    """Base class of layers and models.  Subclasses call super().__init__(), assign
    Parameters, Buffers and sub-Modules as attributes, and define forward(*tensors)."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())

    def __setattr__(self, name, value):
        """Register Parameters, Buffers and Modules by assignment, with PyTorch's rules: a new
        kind of value under a name replaces the old one (a plain `self.downsample = None`
        followed by a Module); a registered name takes None (registered as absent) or a value
        of its kind, anything else is a TypeError."""
        if "_modules" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning {name!r}")
        kinds = (("_buffers", Buffer), ("_parameters", Parameter), ("_modules", Module))
        for registry, kind in kinds:
            if isinstance(value, kind):
                self.__dict__.pop(name, None)
                for other, _ in kinds:
                    self.__dict__[other].pop(name, None)
                self.__dict__[registry][name] = value
                return
        for registry, kind in kinds:
            if name in self.__dict__[registry]:
                if value is not None:
                    raise TypeError(f"{type(self).__name__}: cannot assign a {type(value).__name__} to "
                                    f"{name!r}, which holds a {kind.__name__} (a {kind.__name__} or None expected)")
                self.__dict__[registry][name] = None
                return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(registry)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[registry]:
                del self.__dict__[registry][name]
                return
        object.__delattr__(self, name)

    # ------------------------------------------------------------------ building
    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *inputs):
        tensors = [x for x in inputs if isinstance(x, Tensor)]
        if not tensors:
            raise TypeError(f"{type(self).__name__} is called on symbolic Tensors (build a graph with "
                            "minitrain.nn.trace or a TrainingSession), got "
                            f"{[type(x).__name__ for x in inputs]}")
        builder = tensors[0].builder
        qualified = builder.names.get(id(self))
        scope = builder.scope(qualified, absolute=True) if qualified is not None \
            else builder.scope(type(self).__name__.lower())
        with scope:
            return self.forward(*inputs)

    # ------------------------------------------------------------------ introspection
    def named_modules(self, prefix=""):
        """(qualified name, module) for this module and every descendant, depth first (a
        child set to None is skipped)."""
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _named(self, registry):
        for prefix, module in self.named_modules():
            for name, value in getattr(module, registry).items():
                if value is not None:
                    yield (f"{prefix}.{name}" if prefix else name), value

    def named_parameters(self):
        """(qualified name, Parameter) pairs, as PyTorch's named_parameters()."""
        return self._named("_parameters")

    def named_buffers(self):
        """(qualified name, Buffer) pairs."""
        return self._named("_buffers")

    def parameters(self):
        """The Parameters (their arrays are `.data`; names come with named_parameters())."""
        return (p for _, p in self.named_parameters())

    def buffers(self):
        """The Buffers (BatchNorm's running statistics)."""
        return (b for _, b in self.named_buffers())

    def named_state(self):
        """(qualified name, Parameter or Buffer): every array saved with the model."""
        return list(self.named_parameters()) + list(self.named_buffers())

    def requires_grad_(self, requires_grad=True):
        """Set requires_grad on every parameter (False freezes this module); returns self."""
        for p in self.parameters():
            p.requires_grad = bool(requires_grad)
        return self

    def num_parameters(self):
        return sum(p.size for p in self.parameters())

    def names(self):
        """id() of every sub-module, parameter and buffer -> its qualified name."""
        names = {id(m): n for n, m in self.named_modules()}
        names.update({id(p): n for n, p in self.named_state()})
        return names

    # ------------------------------------------------------------------ state
    def state_dict(self):
        """Copies of every parameter and buffer array, by qualified name."""
        return OrderedDict((n, p.data.copy()) for n, p in self.named_state())

    def check_state_dict(self, state):
        """Raise ValueError naming the first mismatch between `state` and this model."""
        own = OrderedDict((n, p.data) for n, p in self.named_state())
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(f"state does not fit the model: missing {missing}, unexpected {unexpected}")
        for name, array in own.items():
            value = np.asarray(state[name])
            if value.shape != array.shape or value.dtype != array.dtype:
                raise ValueError(f"state {name!r} is {value.dtype}{value.shape}, the model has "
                                 f"{array.dtype}{array.shape}")

    def load_state_dict(self, state):
        """Copy `state` into the model's arrays in place, after checking all of it."""
        self.check_state_dict(state)
        for name, p in self.named_state():
            np.copyto(p.data, state[name])

    def to_dtype(self, dtype):
        """Convert every parameter and buffer to `dtype` (new arrays: do it before compiling)."""
        for _, p in self.named_state():
            p.data = np.ascontiguousarray(p.data, dtype=dtype)
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class Sequential(Module):
    """Layers applied in order; children are named "0", "1", ... or by the keys of a dict."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], dict):
            items = layers[0].items()
        else:
            items = ((str(i), layer) for i, layer in enumerate(layers))
        for name, layer in items:
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential: item {name!r} is a {type(layer).__name__}, not a Module")
            setattr(self, name, layer)

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, index):
        return list(self._modules.values())[index]

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for layer in self._modules.values():
            x = layer(x)
        return x


def trace(model, inputs, *, training=False, name=None):
    """Build the graph of `model` applied to symbolic inputs.

    inputs: {name: (dtype, shape)} with symbolic dims allowed, e.g. {"x": (np.float32, ("N", 1, 8, 8))}.
    Returns (builder, outputs): builder.graph holds the nodes, parameters as initializers, and
    the outputs listed in graph.outputs.
    """
    builder = GraphBuilder(name or type(model).__name__, training=training, names=model.names())
    tensors = [builder.input(n, dtype, shape) for n, (dtype, shape) in inputs.items()]
    outputs = model(*tensors)
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    builder.graph.outputs = [t.name for t in outs]
    return builder, outputs
