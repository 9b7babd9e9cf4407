"""A Linear layer as PyTorch's exporter writes it, Transpose(W) -> MatMul(X, W^T), then, where
they follow, -> Add(., B) -> Mul(., S) (a layer scale) -> minitrain's Linear(X, W, B?, S?)
(ops/linear.py): one GEMM with the bias and scale applied as it writes the product,
differentiated as one LinearGrad node.  ONNX Runtime's MatMulTransposeFusion and
MatMulAddFusion make the same products of the first three nodes.

It fires where W is two-dimensional and transposed by perm [1, 0] (or no perm), every value
between the nodes of the pattern is read only by its next node and not kept, X has rank >= 2,
and B and S are one-dimensional of the product's last dim (each node's operands in either
order); an Add or Mul that does not fit ends the pattern before it.  Only where Linear and
LinearGrad run on the provider that runs the nodes, so it is a rule of the CPU provider."""
from ..ops.schema import FUSED_DOMAIN
from .bias_gelu import input_and_bias
from .mul_grad import is_op
from .rewrite import fused_node

FUSED, GRADIENT = "Linear", "LinearGrad"


def transposed_weight(rewrite, matmul):
    """The Transpose node giving a two-dimensional weight transposed to MatMul's B, or None."""
    transpose = rewrite.producers.get(matmul.inputs[1])
    if not is_op(transpose, "Transpose") or transpose.attrs.get("perm") not in (None, [1, 0], (1, 0)):
        return None
    w_type = rewrite.types.get(transpose.inputs[0])
    if w_type is None or w_type.shape is None or len(w_type.shape) != 2:
        return None
    if not rewrite.only_read_by(matmul.inputs[1], matmul):
        return None
    return transpose


def following(rewrite, node, op_type):
    """(the node of `op_type` that takes `node`'s product and a vector of its last dim, the
    vector) when it is the product's one reader, else (None, None)."""
    y = node.outputs[0]
    readers = rewrite.readers_of(y)
    if y in rewrite.kept or len(readers) != 1 or not is_op(readers[0], op_type) or len(readers[0].inputs) != 2:
        return None, None
    operands = input_and_bias(rewrite, readers[0])
    if operands is None or operands[0] != y:
        return None, None
    return readers[0], operands[1]


def apply(rewrite):
    for matmul in [n for n in rewrite.graph.nodes if is_op(n, "MatMul")]:
        transpose = transposed_weight(rewrite, matmul)
        x_type = rewrite.types.get(matmul.inputs[0])
        if transpose is None or x_type is None or x_type.shape is None or len(x_type.shape) < 2:
            continue
        dtype = rewrite.dtype_of(matmul)
        if rewrite.fuses_on(GRADIENT, FUSED_DOMAIN, dtype) != rewrite.fuses_on(FUSED, FUSED_DOMAIN, dtype):
            continue
        parts, vectors = [transpose, matmul], {}
        for op_type, role in (("Add", "bias"), ("Mul", "scale")):
            node, vector = following(rewrite, parts[-1], op_type)
            if node is None or not rewrite.can_fuse(parts + [node], FUSED, FUSED_DOMAIN):
                continue
            parts.append(node)
            vectors[role] = vector
        if not rewrite.can_fuse(parts, FUSED, FUSED_DOMAIN):
            continue
        inputs = [matmul.inputs[0], transpose.inputs[0], vectors.get("bias", ""), vectors.get("scale", "")]
        while not inputs[-1]:
            inputs.pop()
        last = parts[-1]        # where every input of the fused node is there and its readers follow
        rewrite.replace(last, fused_node(FUSED, FUSED_DOMAIN, inputs, list(last.outputs), {}, parts))
        for node in parts[:-1]:
            rewrite.replace(node, None)
        rewrite.refresh()
