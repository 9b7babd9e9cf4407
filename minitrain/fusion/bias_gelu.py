"""Add(X, B) -> Gelu, B a bias of X's last dim (a Linear layer's bias before its activation) ->
com.microsoft BiasGelu(X, B), as ONNX Runtime's BiasGeluFusion rewrites it: one pass over X
where the Add and the Gelu take one each, and its gradient BiasGeluGrad_dX where Gelu's gradient
read the sum.

The Gelu is com.microsoft Gelu (fusion/gelu.py writes it) or ONNX Gelu with approximate "none";
the Add takes X and B in either order, its sum has X's shape and one reader, the Gelu, and is
neither fetched nor a graph output.  It fires only where BiasGelu and BiasGeluGrad_dX run on the
provider that runs the Add and the Gelu."""
from ..ops.schema import MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

FUSED, GRADIENT = "BiasGelu", "BiasGeluGrad_dX"


def is_erf_gelu(node):
    if node.op_type != "Gelu":
        return False
    return node.domain == MS_DOMAIN or (node.domain == ONNX_DOMAIN and node.attrs.get("approximate", "none") == "none")


def input_and_bias(rewrite, add):
    """(X, B) of an Add whose B is one-dimensional of X's last dim and whose sum has X's shape, or None."""
    shapes = [rewrite.types[name].shape for name in add.inputs]
    sum_shape = rewrite.types[add.outputs[0]].shape
    for (x, bias), (x_shape, bias_shape) in ((add.inputs, shapes), (add.inputs[::-1], shapes[::-1])):
        if (x_shape is not None and bias_shape is not None and len(x_shape) >= 1 and len(bias_shape) == 1
                and isinstance(bias_shape[0], int) and x_shape[-1] == bias_shape[0] and x_shape == sum_shape):
            return x, bias
    return None


def apply(rewrite):
    for act in [n for n in rewrite.graph.nodes if is_erf_gelu(n)]:
        z = act.inputs[0]
        add = rewrite.producers.get(z)
        if (add is None or (add.op_type, add.domain) != ("Add", ONNX_DOMAIN) or len(add.inputs) != 2
                or not rewrite.only_read_by(z, act)):
            continue
        operands = input_and_bias(rewrite, add)
        dtype = rewrite.dtype_of(act)
        if operands is None or not rewrite.can_fuse([add, act], FUSED, MS_DOMAIN) or (
                rewrite.fuses_on(GRADIENT, MS_DOMAIN, dtype) != rewrite.fuses_on(FUSED, MS_DOMAIN, dtype)):
            continue
        rewrite.replace(act, fused_node(FUSED, MS_DOMAIN, list(operands), list(act.outputs), {}, [add, act]))
        rewrite.replace(add, None)
        rewrite.refresh()
