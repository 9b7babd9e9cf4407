"""Mul's gradient as ops/elementwise.py builds it for C = A * B with B broadcast over A (a
squeeze-excitation gate, a per-channel scale): Identity(Mul(dC, B)) for dA and
SumToShape(Mul(dC, A), Shape(B)) for dB -> MulGrad(dC, A, B): one pass over dC and A where the
nodes take three, without the product dC A ever written out.

It fires where A has dC's static shape and B a static shape other than it that broadcasts to
it, both products read the same dC, the SumToShape sums to B's shape (a Shape of B, or a
constant equal to B's static shape) and neither product is read outside the pattern or kept.
The Identity goes with it when it is the dA product's one reader; a Shape of B read elsewhere
stays."""
from ..graph import Node
from ..ops.math import broadcasts_to
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = "MulGrad"


def is_op(node, op_type, domain=ONNX_DOMAIN):
    return isinstance(node, Node) and (node.op_type, node.domain) == (op_type, domain)


def summed_to(rewrite, total, b):
    """Whether the SumToShape node `total` sums to the shape of value b."""
    producer = rewrite.producers.get(total.inputs[1])
    if is_op(producer, "Shape") and not producer.attrs.get("start") and producer.attrs.get("end") is None:
        return producer.inputs[0] == b
    shape = rewrite.constant(total.inputs[1])
    return shape is not None and tuple(int(d) for d in shape.reshape(-1)) == rewrite.types[b].shape


def sibling_product(rewrite, grad, a, total):
    """The Mul(grad, b) beside Mul(grad, a) whose dA pairs with the dB that `total` sums, or None."""
    for node in rewrite.readers_of(grad):
        if not is_op(node, "Mul") or len(node.inputs) != 2 or node.inputs[0] != grad or node.inputs[1] == a:
            continue
        b = node.inputs[1]
        types = rewrite.types
        b_shape, grad_shape = types[b].shape, types[grad].shape
        if b_shape is None or b_shape == grad_shape or not broadcasts_to(b_shape, grad_shape):
            continue
        if summed_to(rewrite, total, b) and node.outputs[0] not in rewrite.kept:
            return node
    return None


def match(rewrite, total):
    """(the nodes that the fused one replaces, its inputs, its outputs) of the pattern that ends
    in the SumToShape node `total`, or None."""
    product_b = rewrite.producers.get(total.inputs[0])
    if not is_op(product_b, "Mul") or len(product_b.inputs) != 2 or not rewrite.only_read_by(total.inputs[0], total):
        return None
    grad, a = product_b.inputs
    types = rewrite.types
    if types[a].shape is None or types[a].shape != types[grad].shape or types[a].dtype != types[grad].dtype:
        return None
    product_a = sibling_product(rewrite, grad, a, total)
    if product_a is None:
        return None
    nodes = [product_a, product_b, total]
    d_a = product_a.outputs[0]
    readers = rewrite.readers_of(d_a)
    if d_a not in rewrite.kept and len(readers) == 1 and is_op(readers[0], "Identity"):
        nodes.append(readers[0])
        d_a = readers[0].outputs[0]
    shape = rewrite.producers.get(total.inputs[1])
    if is_op(shape, "Shape") and rewrite.only_read_by(total.inputs[1], total):
        nodes.append(shape)
    return nodes, [grad, a, product_a.inputs[1]], [d_a, total.outputs[0]]


def apply(rewrite):
    for total in [n for n in rewrite.graph.nodes if is_op(n, "SumToShape", MS_DOMAIN)]:
        found = match(rewrite, total)
        if found is None:
            continue
        nodes, inputs, outputs = found
        if not rewrite.can_fuse(nodes, FUSED, FUSED_DOMAIN):
            continue
        rewrite.replace(nodes[0], fused_node(FUSED, FUSED_DOMAIN, inputs, outputs, {}, nodes))
        for node in nodes[1:]:
            rewrite.replace(node, None)
        rewrite.refresh()
