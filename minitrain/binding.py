"""Binding a validated node to its kernel: `BoundNode`, and `bind`, the one place that picks it.

A plan's steps (scheduler.py) and a single node run on NumPy arrays (executor.run_node) are
bound the same way: the node is validated once against its schema (inference.check_node), and
the kernel is the one of the first provider in the ordered provider list that registers one
for the node's opset and element type.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .caches import freeze
from .inference import check_node
from .registry import KernelContext, find, lookup


_MISSING = object()


@dataclass
class BoundNode:
    """A node with its schema, resolved attributes and kernel settled."""
    op_type: str
    name: str
    schema: object
    attrs: dict
    kernel: object
    dtype: np.dtype
    wanted: tuple
    kdef: object = None
    attrs_key: object = field(default=None, init=False)

    def __post_init__(self):
        try:        # the kernels' plan caches key by it on every run: made once here
            self.attrs_key = freeze(self.attrs)
        except TypeError:
            self.attrs_key = None

    def run(self, provider, inputs, output_shapes=None):
        """The outputs asked for, in order, of the kernel run on `inputs` (where the kernel
        reads them) on the Provider object `provider`."""
        ctx = KernelContext(self.op_type, self.name, inputs, self.attrs, self.wanted,
                            output_shapes or {}, self.dtype, provider, self.attrs_key)
        results = self.kernel(ctx)
        outputs = []
        for w in self.wanted:
            r = results.get(w, _MISSING)
            if r is _MISSING:
                missing = [w for w in self.wanted if w not in results]
                raise RuntimeError(f"kernel of {self.op_type} did not produce {missing}")
            # NumPy gives scalars, not 0-d arrays, for 0-d arithmetic and full reductions
            outputs.append(np.asarray(r) if isinstance(r, np.generic) else r)
        return outputs


def bind(checked, op_type, *, domain, opset, providers, node_name=None):
    """The BoundNode of the validated node `checked` (an inference.CheckedNode) on the first of
    `providers` (names, in order) with a kernel for it; a node that none serves fails with the
    KernelNotFoundError of the first provider, which names what is registered instead."""
    for provider in providers:
        found = find(op_type, domain, opset, provider, checked.dtype)
        if found is not None:
            break
    else:
        lookup(op_type, domain, opset, providers[0], checked.dtype)
    kdef, kernel = found
    return BoundNode(op_type, node_name, checked.schema, checked.attrs, kernel, checked.dtype, checked.wanted, kdef)


def bind_node(op_type, input_types, attrs, *, domain="", opset, provider, wanted=None, node_name=None):
    """Validate a node of these input types against its schema and bind it on the Provider
    `provider`.  Returns (BoundNode, output types)."""
    checked = check_node(op_type, domain, opset, attrs, tuple(input_types), wanted, node_name)
    bound = bind(checked, op_type, domain=domain, opset=opset, providers=(provider.name,), node_name=node_name)
    return bound, list(checked.out_types)
