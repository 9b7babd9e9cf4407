"""Functions over symbolic Tensors, one graph node each (the layers, the losses and a user's
own loss are built from these).

Spatial arguments (kernel_size, stride, padding, dilation) take an int or one value per
spatial dim; padding is symmetric (ONNX pads = begin..., end...).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ops.schema import MS_DOMAIN
from .tensor import Tensor


def spatial(value, n, what):
    """An int or a sequence of n ints, as a tuple of n ints."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ValueError(f"{what} needs 1 or {n} values, got {value}")
    return value


def _spatial_rank(x: Tensor, n, layer):
    if x.ndim is not None and x.ndim != n + 2:
        raise ShapeError(f"{layer} expects input of rank {n + 2} (N, C and {n} spatial dims), "
                         f"got shape {x.shape}")


# --------------------------------------------------------------------------- activations
def relu(x):
    return x.builder.op("Relu", [x])


def leaky_relu(x, negative_slope=0.01):
    return x.builder.op("LeakyRelu", [x], {"alpha": negative_slope})


def sigmoid(x):
    return x.builder.op("Sigmoid", [x])


def tanh(x):
    return x.builder.op("Tanh", [x])


def quick_gelu(x, alpha=1.702):
    """x * sigmoid(alpha * x) (com.microsoft QuickGelu)."""
    return x.builder.op("QuickGelu", [x], {"alpha": alpha}, domain=MS_DOMAIN)


def softmax(x, dim=-1):
    return x.builder.op("Softmax", [x], {"axis": dim})


def log_softmax(x, dim=-1):
    return x.builder.op("LogSoftmax", [x], {"axis": dim})


# --------------------------------------------------------------------------- maths for losses
def sum(x, dim=None, keepdim=False):
    return x.sum(dim, keepdim)


def mean(x, dim=None, keepdim=False):
    return x.mean(dim, keepdim)


def max(x, dim=None, keepdim=False):
    """The largest value over `dim`, as torch.amax (values only)."""
    return x.max(dim, keepdim)


def log(x):
    return x.log()


def exp(x):
    return x.exp()


def pow(x, exponent):
    return x ** exponent


def sqrt(x):
    return x.sqrt()


def abs(x):
    return x.abs()


def clamp(x, min=None, max=None):
    return x.clamp(min, max)


def reshape(x, *shape):
    return x.reshape(*shape)


def where(condition, x, y):
    """x where the bool `condition` holds, else y (ONNX Where; all three broadcast).  The
    condition is a bool Tensor or array (a mask fed as an input, say); x or y may be a number."""
    like = x if isinstance(x, Tensor) else y
    if not isinstance(like, Tensor):
        raise TypeError("where: x or y must be a Tensor")
    b = like.builder
    return b.op("Where", [b.as_input(condition), b.as_input(x, like=like), b.as_input(y, like=like)])


def one_hot(labels, num_classes, dtype=None):
    """Integer labels (N, ...) as (N, ..., num_classes) rows of 0 and 1 (ONNX OneHot); dtype
    defaults to float32.  Labels outside [-num_classes, num_classes) give rows of zeros."""
    b = labels.builder
    depth = b.constant(np.array([num_classes], dtype=np.int64), "depth")
    values = b.constant(np.array([0, 1], dtype=dtype or np.float32), "one_hot_values")
    return b.op("OneHot", [labels, depth, values], {"axis": -1})


# --------------------------------------------------------------------------- layers' maths
def linear(x, weight, bias=None):
    """x @ weight.T + bias (Gemm with transB); x is (N, in_features)."""
    if x.ndim is not None and x.ndim != 2:
        raise ShapeError(f"linear expects (N, in_features) input, got shape {x.shape}; add a Flatten first")
    return x.builder.op("Gemm", [x, weight, bias], {"transB": 1})


def conv(x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, transposed=False,
         output_padding=0):
    """N-d convolution (or its transpose) over the last weight.ndim - 2 dims of x.
    padding may also be "same" (auto_pad SAME_UPPER) or "valid"."""
    n = len(weight.shape) - 2
    op = "ConvTranspose" if transposed else "Conv"
    _spatial_rank(x, n, op)
    attrs = {"kernel_shape": list(weight.shape[2:]), "strides": list(spatial(stride, n, "stride")),
             "dilations": list(spatial(dilation, n, "dilation")), "group": groups}
    if padding in ("same", "valid"):
        attrs["auto_pad"] = "SAME_UPPER" if padding == "same" else "VALID"
    else:
        pads = spatial(padding, n, "padding")
        attrs["pads"] = list(pads) + list(pads)
    if transposed and any(spatial(output_padding, n, "output_padding")):
        attrs["output_padding"] = list(spatial(output_padding, n, "output_padding"))
    return x.builder.op(op, [x, weight, bias], attrs)


def _pool_attrs(n, kernel_size, stride, padding, ceil_mode):
    kernel = spatial(kernel_size, n, "kernel_size")
    pads = spatial(padding, n, "padding")
    return {"kernel_shape": list(kernel), "strides": list(spatial(kernel if stride is None else stride, n, "stride")),
            "pads": list(pads) + list(pads), "ceil_mode": int(ceil_mode)}


def max_pool(x, n, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """n-d max pooling (stride defaults to the kernel size, as in PyTorch)."""
    _spatial_rank(x, n, f"MaxPool{n}d")
    attrs = _pool_attrs(n, kernel_size, stride, padding, ceil_mode)
    if any(d != 1 for d in spatial(dilation, n, "dilation")):
        attrs["dilations"] = list(spatial(dilation, n, "dilation"))
    return x.builder.op("MaxPool", [x], attrs)


def avg_pool(x, n, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """n-d average pooling; count_include_pad defaults to True as in PyTorch (ONNX: 0)."""
    _spatial_rank(x, n, f"AvgPool{n}d")
    attrs = _pool_attrs(n, kernel_size, stride, padding, ceil_mode)
    attrs["count_include_pad"] = int(count_include_pad)
    return x.builder.op("AveragePool", [x], attrs)


def global_avg_pool(x):
    """Mean over all spatial dims: (N, C, ...) -> (N, C, 1, ...)."""
    return x.builder.op("GlobalAveragePool", [x])


def flatten(x, start_dim=1):
    return x.flatten(start_dim)


def add(a, b):
    return a + b


def dropout(x, p=0.5):
    """Dropout in a training graph, the identity in an inference graph."""
    if not x.builder.training or p == 0:
        return x
    ratio = x.builder.constant(np.array(p, dtype=x.dtype), "dropout_ratio")
    mode = x.builder.constant(np.array(True), "dropout_training")
    return x.builder.op("Dropout", [x, ratio, mode])


def batch_norm(x, module):
    """BatchNormalization with the module's weight, bias and running statistics: batch
    statistics and running-stat updates in a training graph, running statistics otherwise."""
    b = x.builder
    inputs = [x, module.weight, module.bias, module.running_mean, module.running_var]
    attrs = {"epsilon": module.eps, "momentum": 1.0 - module.momentum, "training_mode": int(b.training)}
    if not b.training:
        return b.op("BatchNormalization", inputs, attrs)
    y, mean, var = b.op("BatchNormalization", inputs, attrs, outputs=3)
    b.state_updates[mean.name] = b.parameter(module.running_mean)
    b.state_updates[var.name] = b.parameter(module.running_var)
    return y


# --------------------------------------------------------------------------- losses
def cross_entropy(logits, labels, reduction="mean", ignore_index=None):
    """Softmax cross-entropy of (N, C, ...) scores against int64 labels (N, ...)."""
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    loss, _ = logits.builder.op("SoftmaxCrossEntropyLoss", [logits, labels], attrs, outputs=[True, None])
    return loss


def nll_loss(log_probs, target, weight=None, reduction="mean", ignore_index=None):
    """Negative log-likelihood of log-probabilities (N, C, ...) at int64 class indices (N, ...),
    as torch.nn.functional.nll_loss (ONNX NegativeLogLikelihoodLoss); weight is (C,)."""
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    return log_probs.builder.op("NegativeLogLikelihoodLoss", [log_probs, target, weight], attrs)


def mse_loss(prediction, target, reduction="mean"):
    return prediction.builder.op("MSELoss", [prediction, target], {"reduction": reduction}, domain=MS_DOMAIN)
