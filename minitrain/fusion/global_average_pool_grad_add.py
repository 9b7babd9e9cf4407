"""A global average pool's gradient summed with another gradient of its input ->
GlobalAveragePoolGradAdd.

    dX = Sum(dA, GlobalAveragePoolGrad(dP, Shape(X)))      ->  dX = GlobalAveragePoolGradAdd(dP, dA)

A tensor read by a global average pool and by another node (a squeeze-excitation's input, which
the gate's Mul reads too) gets its gradient as the Sum of the two; fused, the pooled gradient is
spread over the planes and added in one pass, never written out as a tensor of X's shape.  The
rule fires where the Sum has these two inputs of one static shape and element type, and the pool
gradient's dX has no other reader and is not kept; the Shape node feeding it goes too where
nothing else reads it.  Only the CPU has a kernel of the fused op, so the rule leaves graphs on
CUDA as they are."""
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = "GlobalAveragePoolGradAdd"


def match(rewrite, total):
    """(the pool gradient node, the other addend) of the Sum node `total`, or None."""
    if len(total.inputs) != 2 or total.inputs[0] == total.inputs[1]:
        return None
    types = rewrite.types
    for spread, other in (total.inputs, reversed(total.inputs)):
        back = rewrite.producers.get(spread)
        if back is None or (back.op_type, back.domain) != ("GlobalAveragePoolGrad", MS_DOMAIN):
            continue
        if not rewrite.only_read_by(spread, total):
            continue
        shape = types[spread].shape
        if shape is None or shape != types[other].shape or types[spread].dtype != types[other].dtype:
            continue
        return back, other
    return None


def apply(rewrite):
    for total in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("Sum", ONNX_DOMAIN)]:
        found = match(rewrite, total)
        if found is None or not rewrite.can_fuse([found[0], total], FUSED, FUSED_DOMAIN):
            continue
        back, other = found
        parts = [back, total]
        shape = rewrite.producers.get(back.inputs[1])
        if shape is not None and (shape.op_type, shape.domain) == ("Shape", ONNX_DOMAIN) \
                and rewrite.only_read_by(back.inputs[1], back):
            parts.append(shape)
        rewrite.replace(total, fused_node(FUSED, FUSED_DOMAIN, [back.inputs[0], other], list(total.outputs), {}, parts))
        for node in parts[:1] + parts[2:]:
            rewrite.replace(node, None)
        rewrite.refresh()
