"""Gradient builders: how a forward node becomes gradient nodes.

A builder is declared per (domain, op_type, since_version), like a schema, and versioned as
strictly: the builder in force is the newest one whose since_version is at or below the graph's
opset.  It speaks ONNX Runtime's small vocabulary (forward input I(i), forward output O(i),
gradient of output GO(i), gradient of input GI(i)) and emits gradients only for the inputs
that need them:

    @gradient("Relu", since=6, emits=("ReluGrad",))
    def relu_grad(g):
        g.node("ReluGrad", [g.GO(0), g.I(0)], [g.GI(0)], domain=MS_DOMAIN)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import GraphError
from .schema import ONNX_DOMAIN, add_version, in_force


@dataclass(frozen=True)
class GradientBuilder:
    op_type: str
    domain: str
    since_version: int
    differentiable: object  # forward input indices that can receive a gradient; None: all
    emits: tuple            # op types of the gradient nodes this builder may emit
    build: Callable


_BUILDERS: dict = {}


def gradient(op_type, *, domain=ONNX_DOMAIN, since=1, differentiable=(0,), emits=()):
    """Decorator registering `build(g)` as the gradient of an op version."""
    def register(build):
        b = GradientBuilder(op_type, domain, since,
                            None if differentiable is None else tuple(differentiable), tuple(emits), build)
        add_version(_BUILDERS, (domain, op_type), b)
        return build
    return register


def get_gradient_builder(op_type, domain, opset):
    """The builder in force at `opset`, or None when the op has no gradient."""
    return in_force(_BUILDERS.get((domain, op_type), []), opset)


class GradContext:
    """The vocabulary a builder uses; made by autodiff for one forward node (`forward`)."""

    def __init__(self, graph, node, builder, output_grads, input_grads, types, make_name,
                 request_output):
        self.graph = graph
        self.forward = node
        self.builder = builder
        self.attrs = dict(node.attrs)
        self.opset = graph.opset(node.domain)
        self._output_grads = output_grads    # output index -> gradient value name
        self._input_grads = input_grads      # input index -> name to write, for needed ones
        self._types = types
        self._make_name = make_name
        self._request_output = request_output
        self.emitted = []

    # forward tensors and their gradients
    def I(self, i):
        return self.forward.inputs[i] if i < len(self.forward.inputs) else ""

    def O(self, i):
        """Forward output i; an output the forward node did not produce is added to it."""
        return self._request_output(self.forward, i)

    def GO(self, i):
        return self._output_grads.get(i, "")

    def GI(self, i):
        return self._input_grads.get(i, "")

    def needs(self, i):
        return i in self._input_grads

    def type_of(self, name):
        """Static TensorType of a forward value (shape may hold symbolic dims or be None)."""
        return self._types.get(name)

    def tmp(self, base):
        return self._make_name(f"{self.forward.name}_{base}")

    def constant(self, array, base="const"):
        """Add a constant (an initializer of the gradient graph) and return its name."""
        name = self.tmp(base)
        self.graph.add_initializer(name, array)
        return name

    def shape_of(self, name):
        """The shape of forward value `name` as an int64 value of the gradient graph: a constant
        where it is known, else a Shape node read at run time."""
        t = self.type_of(name)
        if t is not None and t.is_concrete:
            return self.constant(np.array(t.shape, dtype=np.int64), "shape")
        return self.node("Shape", [name], [self.tmp("shape")])

    def node(self, op_type, inputs, outputs, attrs=None, domain=ONNX_DOMAIN):
        """Emit a gradient node; skipped when none of its outputs is wanted."""
        if not any(outputs):
            return
        if self.builder.emits and op_type not in self.builder.emits:
            raise GraphError(f"gradient builder of {self.forward.op_type} emitted {op_type}, "
                             f"which it does not declare in emits={self.builder.emits}")
        self.emitted.append((op_type, list(inputs), list(outputs), dict(attrs or {}), domain))
        return outputs[0] if len(outputs) == 1 else outputs
