"""Gemm or Conv followed by an activation -> FusedGemm or FusedConv (com.microsoft).

The pre-activation value Z disappears, so its only readers may be the activation and, for
Relu, ReluGrad nodes reading it as their X: those read the activation's output instead
(relu(z) > 0 exactly where z > 0, NaN included, so ReluGrad gives the same bits).  The other
activations' gradients read the output already.  Clip (ReLU6) fuses into a Conv where its
bounds are finite numbers known when the plan is made (attributes, initializers, Constant
nodes); its gradient reads Z, so a training graph keeps the pair apart."""
import numpy as np

from ..ops.clip import FLOAT32_MAX
from ..ops.fused import CONV_ACTIVATIONS, GEMM_ACTIVATIONS, LEAKY_DEFAULT
from ..ops.schema import MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED = {"Gemm": ("FusedGemm", GEMM_ACTIVATIONS), "Conv": ("FusedConv", CONV_ACTIVATIONS)}


def clip_bounds(rewrite, clip):
    """[min, max] of a Clip node, or None where a bound is not a finite number known at plan
    time (an attribute is finite; an absent bound of version 11 is infinite, which no other
    bound stands for exactly)."""
    if rewrite.graph.opset(ONNX_DOMAIN) < 11:
        return [float(clip.attrs.get("min", -FLOAT32_MAX)), float(clip.attrs.get("max", FLOAT32_MAX))]
    values = [rewrite.constant(name) if name else None for name in (list(clip.inputs) + ["", ""])[1:3]]
    if any(v is None or v.size != 1 or not np.isfinite(v).all() for v in values):
        return None
    return [float(v.reshape(())) for v in values]


def _activation_attrs(rewrite, producer, act):
    """The fused node's attributes, or None where the activation cannot be fused."""
    attrs = dict(producer.attrs, activation=act.op_type)
    if act.op_type == "LeakyRelu":
        alpha = float(act.attrs.get("alpha", LEAKY_DEFAULT))
        if producer.op_type == "Conv":
            attrs["activation_params"] = [alpha]
        else:
            attrs["activation_alpha"] = alpha
    if act.op_type == "Clip":
        bounds = clip_bounds(rewrite, act)
        if bounds is None:
            return None
        attrs["activation_params"] = bounds
    return attrs


def _rewirable(reader, act, z):
    """Whether `reader` of z may read the activation's output instead."""
    return (act.op_type == "Relu" and (reader.op_type, reader.domain) == ("ReluGrad", MS_DOMAIN)
            and reader.inputs[1] == z and reader.inputs[0] != z)


def apply(rewrite):
    for act in [n for n in rewrite.graph.nodes if n.op_type in CONV_ACTIVATIONS and n.domain == ONNX_DOMAIN]:
        z = act.inputs[0]
        producer = rewrite.producers.get(z)
        if producer is None or producer.domain != ONNX_DOMAIN or producer.op_type not in FUSED or z in rewrite.kept:
            continue
        op, activations = FUSED[producer.op_type]
        if act.op_type not in activations:
            continue
        others = [r for r in rewrite.readers_of(z) if r is not act]
        if not all(_rewirable(r, act, z) for r in others):
            continue
        attrs = _activation_attrs(rewrite, producer, act)
        if attrs is None or not rewrite.can_fuse([producer, act], op, MS_DOMAIN):
            continue
        fused = fused_node(op, MS_DOMAIN, producer.inputs, act.outputs, attrs, [producer, act])
        rewrite.replace(producer, fused)
        rewrite.replace(act, None)
        for reader in others:
            reader.inputs[1] = act.outputs[0]
        rewrite.refresh()
