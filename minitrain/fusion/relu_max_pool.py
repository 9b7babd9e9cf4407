"""Relu then MaxPool -> MaxPool then Relu, and the gradient pair the same way round: the
activation and its gradient run on the pooled tensor, a quarter of the size for 2x2 windows.

    R = Relu(Z); P, I = MaxPool(R)          ->  Q, I' = MaxPool(Z); P = Relu(Q)
    dR = MaxPoolGrad(dP, I); dZ = ReluGrad(dR, Z or R)
                                            ->  dQ = ReluGrad(dP, P); dZ = MaxPoolGrad(dQ, I')

Relu is monotonic, so max(relu(z)) = relu(max(z)) and P keeps its bits.  The gradients agree
too: where a window's maximum is positive both pools pick the same first maximum, whose Z is
positive; where it is not, P is 0, the new pair masks dP there, and the old pair routed it to
an element with Z <= 0, which ReluGrad zeroes.  No element with Z > 0 ever receives a masked
window, so every sum adds the same terms in the same order.  Only the indices of the
non-positive windows change, so I may have no reader but the MaxPoolGrad that is rewritten.

The rule applies where one provider runs all four nodes and would not run a fused
MaxPoolActivationGrad (max_pool_activation_grad.py, the later rule): where it would (CUDA), the
gradient pair is that rule's, and the step keeps its measured plan.
"""
from ..graph import Node
from ..ops.schema import FUSED_DOMAIN, MS_DOMAIN, ONNX_DOMAIN
from .max_pool_activation_grad import FUSED as MAX_POOL_GRADIENT_FUSED


def _only_reader(rewrite, name, op_type, domain):
    """The one node reading `name`, when it is an (op_type, domain) node; else None."""
    readers = rewrite.readers_of(name)
    if len(readers) != 1 or (readers[0].op_type, readers[0].domain) != (op_type, domain):
        return None
    return readers[0]


def _gradient_pair(rewrite, pool, relu):
    """(MaxPoolGrad, ReluGrad) of this Relu and MaxPool, None when the graph has no backward
    through them, or False when their gradients do not have the rewritable form."""
    indices = pool.outputs[1] if len(pool.outputs) > 1 else ""
    if not indices or not rewrite.readers_of(indices):
        return None if indices not in rewrite.kept else False
    if indices in rewrite.kept:
        return False
    pool_grad = _only_reader(rewrite, indices, "MaxPoolGrad", ONNX_DOMAIN)
    if pool_grad is None or pool_grad.inputs[1] != indices or pool_grad.outputs[0] in rewrite.kept:
        return False
    relu_grad = _only_reader(rewrite, pool_grad.outputs[0], "ReluGrad", MS_DOMAIN)
    if (relu_grad is None or relu_grad.inputs[0] != pool_grad.outputs[0]
            or relu_grad.inputs[1] not in (relu.inputs[0], relu.outputs[0])):
        return False
    return pool_grad, relu_grad


def _applies(rewrite, nodes):
    """Whether one provider runs every node and would not fuse their MaxPool gradient."""
    dtype = rewrite.dtype_of(nodes[0])
    providers = {rewrite.provider_for(n.op_type, n.domain, rewrite.dtype_of(n)) for n in nodes}
    return (len(providers) == 1 and None not in providers
            and rewrite.fuses_on(MAX_POOL_GRADIENT_FUSED, FUSED_DOMAIN, dtype) not in providers)


def apply(rewrite):
    for relu in [n for n in rewrite.graph.nodes if (n.op_type, n.domain) == ("Relu", ONNX_DOMAIN)]:
        z, r = relu.inputs[0], relu.outputs[0]
        if r in rewrite.kept:
            continue
        grad_readers = [n for n in rewrite.readers_of(r) if (n.op_type, n.domain) == ("ReluGrad", MS_DOMAIN)]
        pools = [n for n in rewrite.readers_of(r) if n not in grad_readers]
        if len(pools) != 1 or (pools[0].op_type, pools[0].domain) != ("MaxPool", ONNX_DOMAIN):
            continue
        pool = pools[0]
        if pool.inputs[0] != r or not pool.outputs[0]:
            continue
        pair = _gradient_pair(rewrite, pool, relu)
        if pair is False or (pair is None and grad_readers) or (pair and grad_readers not in ([], [pair[1]])):
            continue
        if not _applies(rewrite, [relu, pool] + list(pair or ())):
            continue
        p = pool.outputs[0]
        q = rewrite.graph.unique_name(f"{p}.unactivated")
        rewrite.replace(relu, Node("MaxPool", [z], [q] + list(pool.outputs[1:]), dict(pool.attrs), ONNX_DOMAIN,
                                   pool.name))
        rewrite.replace(pool, Node("Relu", [q], [p], dict(relu.attrs), ONNX_DOMAIN, relu.name))
        rewrite.types[q] = rewrite.types[p]
        if pair:
            pool_grad, relu_grad = pair
            dq = rewrite.graph.unique_name(f"{pool_grad.inputs[0]}.masked")
            rewrite.replace(pool_grad, Node("ReluGrad", [pool_grad.inputs[0], p], [dq], dict(relu_grad.attrs),
                                            MS_DOMAIN, relu_grad.name))
            rewrite.replace(relu_grad, Node("MaxPoolGrad", [dq, pool_grad.inputs[1]], list(relu_grad.outputs),
                                            dict(pool_grad.attrs), ONNX_DOMAIN, pool_grad.name))
            rewrite.types[dq] = rewrite.types[pool_grad.inputs[0]]
            rewrite.graph.value_info.setdefault(relu_grad.outputs[0], rewrite.types[z])
        rewrite.refresh()
