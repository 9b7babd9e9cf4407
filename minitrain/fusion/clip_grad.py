"""Clip's gradient as ops/clip.py builds it, Where(Less(X, min), 0, dY) and then
Where(Greater(X, max), 0, .) for the bounds the Clip has -> ClipGrad(dY, X, min?, max?): one
pass over dY and X where the nodes take one each.

It fires only where the result is the chain's, bit for bit: the Where's zero is a constant +0
of X's type, dY has X's shape and each bound is one number, ClipGrad reads the very bounds and
X the comparisons read, and no mask or partial dX is read outside the chain or kept."""
from dataclasses import dataclass

import numpy as np

from ..graph import Node
from ..ops.schema import FUSED_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = "ClipGrad"
BOUNDS = {"Less": 0, "Greater": 1}      # the comparison -> the index of the bound it checks (min, max)


@dataclass
class Mask:
    """One Where of the chain: dX = Where(compare(X, bound), 0, passed)."""
    where: Node
    compare: Node

    @property
    def x(self):
        return self.compare.inputs[0]

    @property
    def bound(self):
        return self.compare.inputs[1]

    @property
    def passed(self):
        return self.where.inputs[2]


def is_positive_zero(value):
    """Whether a constant (or None) is one +0: Where's 0 there is the fused op's."""
    return value is not None and value.size == 1 and value.reshape(-1)[0] == 0 and not np.signbit(value).any()


def mask_of(rewrite, where):
    """The Mask of a Where node of the pattern, or None."""
    if (where.op_type, where.domain) != ("Where", ONNX_DOMAIN) or len(where.inputs) != 3:
        return None
    condition, zero, passed = where.inputs
    compare = rewrite.producers.get(condition)
    if compare is None or compare.domain != ONNX_DOMAIN or compare.op_type not in BOUNDS:
        return None
    x, bound = compare.inputs
    types = rewrite.types
    x_shape, bound_shape = types[x].shape, types[bound].shape
    if x_shape is None or types[passed].shape != x_shape or types[zero].dtype != types[x].dtype:
        return None
    if bound_shape not in ((), (1,)) or len(bound_shape) > len(x_shape):
        return None
    if not is_positive_zero(rewrite.constant(zero)) or not rewrite.only_read_by(condition, where):
        return None
    return Mask(where, compare)


def inner_mask(rewrite, outer):
    """The Mask of the other bound whose Where gives `outer` its passed dX, or None."""
    producer = rewrite.producers.get(outer.passed)
    inner = None if producer is None else mask_of(rewrite, producer)
    if inner is None or inner.compare.op_type == outer.compare.op_type or inner.x != outer.x:
        return None
    return inner if rewrite.only_read_by(outer.passed, outer.where) else None


def apply(rewrite):
    chains = []
    for mask in filter(None, (mask_of(rewrite, node) for node in rewrite.graph.nodes)):
        inner = inner_mask(rewrite, mask)
        chains.append([mask] if inner is None else [mask, inner])
    inners = {id(chain[1].where) for chain in chains if len(chain) == 2}
    for chain in chains:
        if id(chain[0].where) in inners:        # fused with the Where that reads it
            continue
        nodes = [n for mask in chain for n in (mask.where, mask.compare)]
        if not rewrite.can_fuse(nodes, FUSED, FUSED_DOMAIN):
            continue
        bounds = ["", ""]
        for mask in chain:
            bounds[BOUNDS[mask.compare.op_type]] = mask.bound
        inputs = [chain[-1].passed, chain[0].x] + (bounds if bounds[1] else bounds[:1])
        rewrite.replace(chain[0].where, fused_node(FUSED, FUSED_DOMAIN, inputs, [chain[0].where.outputs[0]], {},
                                                   nodes))
        for node in nodes[1:]:
            rewrite.replace(node, None)
