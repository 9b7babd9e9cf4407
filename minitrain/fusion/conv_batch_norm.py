"""Conv followed by an inference BatchNormalization -> BatchNormFold and a Conv: the
normalisation folded into the Conv's weight and bias (minitrain/ops/fused.py).

The fold is a node of the plan, run every step on the current parameters and statistics, so
the folded weights always follow training (an eval plan is built once and serves the whole
run).  What goes is BatchNormalization's pass over the activations; the fold reads only the
weights, a small fraction of what the Conv reads.  The Conv's output must have
no reader but the BatchNormalization, and the BatchNormalization must normalise with its
input statistics (training_mode 0, or at version 9 no running statistics asked for) and give
nothing but Y.  Rounding differs from the unfused pair's (the Conv sums scaled products)."""
from ..ops.normalization import BN_OUTPUTS, is_training
from ..ops.schema import FUSED_DOMAIN, ONNX_DOMAIN, TensorType
from .rewrite import fused_node

FUSED = "BatchNormFold"


def _inference_batch_norm(rewrite, z):
    """The inference BatchNormalization that is z's only reader and gives only Y, or None."""
    readers = rewrite.readers_of(z)
    if len(readers) != 1:
        return None
    bn = readers[0]
    if (bn.op_type, bn.domain) != ("BatchNormalization", ONNX_DOMAIN) or bn.inputs[0] != z:
        return None
    given = {BN_OUTPUTS[i] for i, name in enumerate(bn.outputs) if name}
    if is_training(bn.attrs, given.__contains__) or given != {"Y"}:
        return None
    dtypes = {rewrite.types[name].dtype for name in bn.inputs[:5]}
    return bn if len(dtypes) == 1 else None     # one element type (version 15 allows several)


def apply(rewrite):
    for conv in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("Conv", ONNX_DOMAIN)]:
        z = conv.outputs[0]
        if z in rewrite.kept:
            continue
        bn = _inference_batch_norm(rewrite, z)
        if bn is None or not rewrite.can_fuse([conv, bn], FUSED, FUSED_DOMAIN):
            continue
        w = conv.inputs[1]
        folded = [rewrite.graph.unique_name(f"{w}.folded"), rewrite.graph.unique_name(f"{w}.folded_bias")]
        bias = [conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else []
        fold = fused_node(FUSED, FUSED_DOMAIN, [w] + bn.inputs[1:5] + bias, folded,
                          {"epsilon": bn.attrs.get("epsilon", 1e-5)}, [conv, bn])
        fold.name += ".fold"
        w_type = rewrite.types[w]
        rewrite.types[folded[0]] = w_type
        rewrite.types[folded[1]] = TensorType(w_type.dtype, None if w_type.shape is None else (w_type.shape[0],))
        rewrite.replace(conv, fold)
        rewrite.replace(bn, fused_node("Conv", ONNX_DOMAIN, [conv.inputs[0]] + folded, bn.outputs[:1],
                                       dict(conv.attrs), [conv, bn]))
        rewrite.refresh()
