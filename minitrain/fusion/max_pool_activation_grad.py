"""MaxPoolGrad whose dX feeds an activation's gradient -> MaxPoolActivationGrad (dX, and dB
where a bias gradient reduces the result, in one pass; see minitrain/ops/fused.py).

Only for a MaxPool whose windows tile its input (kernel_shape = strides, no padding or
dilation, floor rounding), and only where the gradient reads the MaxPool's input X, or, for
ReluGrad, the input of the Relu that gave X (the same mask).  The fused op finds each window's
maximum in X again, with the forward kernel's rule, so it gives the unfused bits.  Once nothing
else reads the MaxPool's Indices, the MaxPool stops writing them.

The rule applies where the provider running the nodes has a MaxPoolActivationGrad kernel that
is not a reference kernel (CUDA's): the CPU's runs the unfused kernels in turn, the MaxPool
again for its Indices, and would cost about what it saves."""
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .activation_grad_bias import GRADIENTS, bias_reader, gradient_attrs, take_over_bias
from .rewrite import fused_node

FUSED = "MaxPoolActivationGrad"


def tiled_kernel(pool):
    """The MaxPool node's kernel_shape when its windows tile the input, else None."""
    attrs = pool.attrs
    kernel = list(attrs.get("kernel_shape") or [])
    tiles = (kernel and list(attrs.get("strides") or []) == kernel
             and all(p == 0 for p in attrs.get("pads") or [])
             and all(d == 1 for d in attrs.get("dilations") or [])
             and (attrs.get("auto_pad") or "NOTSET") in ("NOTSET", "VALID")
             and not attrs.get("ceil_mode"))
    return kernel if tiles else None


def _reads_pool_input(rewrite, grad, x):
    """Whether the gradient node's second input is x, or the input of the Relu giving x."""
    v = grad.inputs[1]
    if v == x:
        return True
    relu = rewrite.producers.get(x)
    return (grad.op_type == "ReluGrad" and relu is not None and (relu.op_type, relu.domain) == ("Relu", ONNX_DOMAIN)
            and relu.inputs[0] == v)


def _pattern(rewrite, grad):
    """(MaxPoolGrad, MaxPool, kernel_shape) that `grad` can absorb, or None."""
    pooled_grad = grad.inputs[0]
    back = rewrite.producers.get(pooled_grad)
    if (back is None or (back.op_type, back.domain) != ("MaxPoolGrad", ONNX_DOMAIN)
            or not rewrite.only_read_by(pooled_grad, grad)):
        return None
    pool = rewrite.producers.get(back.inputs[1])
    if pool is None or (pool.op_type, pool.domain) != ("MaxPool", ONNX_DOMAIN) or pool.outputs[1:2] != back.inputs[1:2]:
        return None
    kernel = tiled_kernel(pool)
    if kernel is None or tiled_kernel(back) != kernel or not _reads_pool_input(rewrite, grad, pool.inputs[0]):
        return None
    return back, pool, kernel


def apply(rewrite):
    for grad in [n for n in rewrite.graph.nodes if n.op_type in GRADIENTS and n.domain == MS_DOMAIN]:
        found = _pattern(rewrite, grad)
        if found is None:
            continue
        back, pool, kernel = found
        bias = bias_reader(rewrite, grad.outputs[0])
        parts = [back, grad] + ([bias[0]] if bias else [])
        if not rewrite.can_fuse(parts, FUSED, FUSED_DOMAIN):
            continue
        outputs = [grad.outputs[0]] + ([bias[1]] if bias else [])
        fused = fused_node(FUSED, FUSED_DOMAIN, [back.inputs[0], pool.inputs[0]], outputs,
                           {"kernel_shape": kernel, **gradient_attrs(grad)}, parts)
        rewrite.replace(grad, fused)
        rewrite.replace(back, None)
        if bias:
            take_over_bias(rewrite, fused, bias[0])
        rewrite.refresh()
        indices = pool.outputs[1]
        if indices not in rewrite.kept and not rewrite.readers_of(indices):
            pool.outputs[1] = ""
            rewrite.refresh()
