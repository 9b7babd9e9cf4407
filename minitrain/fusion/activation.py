"""Gemm or Conv followed by an activation -> FusedGemm or FusedConv (com.microsoft).

The pre-activation value Z disappears, so its only readers may be the activation and, for
Relu, ReluGrad nodes reading it as their X: those read the activation's output instead
(relu(z) > 0 exactly where z > 0, NaN included, so ReluGrad gives the same bits).  The other
activations' gradients read the output already."""
from ..ops.fused import ACTIVATIONS, LEAKY_DEFAULT
from ..ops.schema import MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = {"Gemm": "FusedGemm", "Conv": "FusedConv"}


def _activation_attrs(producer, act):
    attrs = dict(producer.attrs, activation=act.op_type)
    if act.op_type == "LeakyRelu":
        alpha = float(act.attrs.get("alpha", LEAKY_DEFAULT))
        if producer.op_type == "Conv":
            attrs["activation_params"] = [alpha]
        else:
            attrs["activation_alpha"] = alpha
    return attrs


def _rewirable(reader, act, z):
    """Whether `reader` of z may read the activation's output instead."""
    return (act.op_type == "Relu" and (reader.op_type, reader.domain) == ("ReluGrad", MS_DOMAIN)
            and reader.inputs[1] == z and reader.inputs[0] != z)


def apply(rewrite):
    for act in [n for n in rewrite.graph.nodes if n.op_type in ACTIVATIONS and n.domain == ONNX_DOMAIN]:
        z = act.inputs[0]
        producer = rewrite.producers.get(z)
        if producer is None or producer.domain != ONNX_DOMAIN or producer.op_type not in FUSED or z in rewrite.kept:
            continue
        others = [r for r in rewrite.readers_of(z) if r is not act]
        if not all(_rewirable(r, act, z) for r in others):
            continue
        op = FUSED[producer.op_type]
        if not rewrite.can_fuse([producer, act], op, MS_DOMAIN):
            continue
        fused = fused_node(op, MS_DOMAIN, producer.inputs, act.outputs, _activation_attrs(producer, act),
                           [producer, act])
        rewrite.replace(producer, fused)
        rewrite.replace(act, None)
        for reader in others:
            reader.inputs[1] = act.outputs[0]
        rewrite.refresh()
