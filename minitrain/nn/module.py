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
    """A trainable array (C-contiguous; float32 unless given otherwise)."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = np.ascontiguousarray(data)

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self):
        return self.data.size

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype})"


class Buffer(Parameter):
    """A non-trainable array of the model's state (saved and loaded with it)."""
    __slots__ = ()


class Module:
    """Base class of layers and models.  Subclasses call super().__init__(), assign
    Parameters, Buffers and sub-Modules as attributes, and define forward(*tensors)."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning {name!r}")
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)
        if isinstance(value, Buffer):
            self._buffers[name] = value
        elif isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(registry)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

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
        """(qualified name, module) for this module and every descendant, depth first."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _named(self, registry):
        for prefix, module in self.named_modules():
            for name, value in getattr(module, registry).items():
                yield (f"{prefix}.{name}" if prefix else name), value

    def named_parameters(self):
        return list(self._named("_parameters"))

    def named_buffers(self):
        return list(self._named("_buffers"))

    def parameters(self):
        """Parameter arrays by qualified name (the arrays themselves, not copies)."""
        return OrderedDict((n, p.data) for n, p in self.named_parameters())

    def buffers(self):
        return OrderedDict((n, b.data) for n, b in self.named_buffers())

    def num_parameters(self):
        return sum(p.size for _, p in self.named_parameters())

    def names(self):
        """id() of every sub-module, parameter and buffer -> its qualified name."""
        names = {id(m): n for n, m in self.named_modules()}
        names.update({id(p): n for n, p in self.named_parameters() + self.named_buffers()})
        return names

    # ------------------------------------------------------------------ state
    def state_dict(self):
        """Copies of every parameter and buffer array, by qualified name."""
        return OrderedDict((n, p.data.copy()) for n, p in self.named_parameters() + self.named_buffers())

    def check_state_dict(self, state):
        """Raise ValueError naming the first mismatch between `state` and this model."""
        own = OrderedDict((n, p.data) for n, p in self.named_parameters() + self.named_buffers())
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
        for name, p in self.named_parameters() + self.named_buffers():
            np.copyto(p.data, state[name])

    def to_dtype(self, dtype):
        """Convert every parameter and buffer to `dtype` (new arrays: do it before compiling)."""
        for _, p in self.named_parameters() + self.named_buffers():
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
