"""Fusion: a rewrite of a whole graph (forward, loss, gradient and optimizer nodes) into one
with fewer nodes, before it is scheduled.  `fuse(graph, fetch, providers)` returns a new graph
and never changes what the fetched values are, but for the rounding of an inference
BatchNormalization folded into its Conv (conv_batch_norm.py), of a Gelu written out in
elementwise nodes, whose fused kernel rounds differently (gelu.py, bias_gelu.py), and of a
Linear layer's bias and scale applied inside its GEMM (linear.py).

Each rule (one module each, applied in RULES order) replaces a pattern of nodes by one fused
node of minitrain/ops/fused.py (or an ONNX Runtime contrib op: gelu.py, bias_gelu.py; Linear of
ops/linear.py: linear.py), and only where

  * the provider that would run each replaced node (the first of `providers` with a kernel
    for it) is the one that runs the fused node, so nothing moves between devices, and its
    kernel of the fused op is not a reference kernel (registry.register_kernel);
  * no value that disappears is fetched, a graph output, or read by a node outside the pattern
    (a rule may rewire such a reader only where the result is the same, as ReluGrad reading
    Relu's output instead of its input).

`fuse_forward(graph, keep, providers)` applies the FORWARD_RULES to a forward graph before its
gradient graph is built (TrainingSession does): a pattern fused there is differentiated as its
fused op, one gradient node where the pattern's nodes would each emit their own.
"""
from __future__ import annotations

from ..inference import infer_types, topological_order
from . import (
    activation,
    activation_grad_bias,
    batch_norm_activation_grad,
    bias_gelu,
    clip_grad,
    conv_batch_norm,
    gelu,
    global_average_pool_activation_grad,
    global_average_pool_grad_add,
    linear,
    max_pool_activation_grad,
    mul_grad,
    relu_max_pool,
    softmax_cross_entropy,
)
from .rewrite import Rewrite

FORWARD_RULES = (gelu, bias_gelu, linear)
RULES = (softmax_cross_entropy, conv_batch_norm, relu_max_pool, gelu, bias_gelu, linear, activation,
         max_pool_activation_grad, activation_grad_bias, global_average_pool_activation_grad, clip_grad, mul_grad,
         batch_norm_activation_grad, global_average_pool_grad_add)


def fuse(graph, fetch=None, providers=("cpu",)):
    """A copy of `graph` with the fusion rules applied (see the module docstring): the same
    values for `fetch` (default: the graph outputs) on the ordered `providers`."""
    return _apply(RULES, graph, fetch, providers)


def fuse_forward(graph, keep=None, providers=("cpu",)):
    """A copy of the forward `graph` with the FORWARD_RULES applied, before its gradient graph
    is built; `keep` (default: the graph outputs) are the values that must stay."""
    return _apply(FORWARD_RULES, graph, keep, providers)


def _apply(rules, graph, fetch, providers):
    rewrite = Rewrite(graph, graph.outputs if fetch is None else fetch, providers)
    for rule in rules:
        rule.apply(rewrite)
        rewrite.refresh()
    topological_order(rewrite.graph)    # the rewrite made no cycle
    infer_types(rewrite.graph)          # and every fused node is valid
    return rewrite.graph
