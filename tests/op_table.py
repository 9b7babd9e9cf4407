"""The op table: one row per op (per version where the op's meaning changes), read by
test_op_table.py, which runs every registered kernel against it (PyTorch's OpInfo, Chainer's
FunctionTestCase).

A row (OpRow) says how to call the op and what it should give:
- `cases`: the ways to call it, each made by `case(*inputs, **attributes)`.  An input is an
  array, None (an absent optional input), or a builder `rng -> array` (normal(2, 3),
  positive(3), ...); `derived(fn)` builds inputs that depend on each other (`rng -> list`).
  Inputs are float64; the harness casts those of the kernel's element type.
- `reference`: NumPy's forward, `(inputs, attrs) -> {output name: array}` in float64, or None
  for a case it does not cover; without one, the float64 CPU kernel is the reference of the
  other element types and providers.
- `differentiable`: the inputs whose gradient the op's gradient builder emits, checked by
  central differences in float64 (`differentiable_outputs`: the outputs it differentiates;
  `gradient_since`: the first opset whose gradient graph can be built; a case with
  `gradient=False`: one the gradient refuses by design).
- `outputs`: the op's output names; `in_place`: the inputs it updates (optimizers), compared
  after the call like outputs (a reference names them "input i"); `gradient_of`: for a
  gradient op, the forward op whose builder emits it (its gradient check exercises this kernel).

A row serves every kernel of its (domain, op) whose since_version is at or above the row's
`since`, up to the next row of the op; a case with `since` set is used only from that opset
on (attributes a version added).  Adding an op is one `OpRow(...)` in ROWS, for example

    OpRow("LeakyRelu", (case(normal(2, 5)), case(normal(7), alpha=0.2)),
          reference=activation("LeakyRelu"), differentiable=(0,)),
"""
import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from error_inputs import SAMPLES
from minitrain import run_node
from minitrain.ops.concat import PIECES

MS = "com.microsoft"
FUSED = "ai.minitrain.fused"
MINITRAIN = "ai.minitrain"


# ---- input builders -------------------------------------------------------------------------

def normal(*shape, scale=1.0):
    """Standard normal values (times `scale`)."""
    return lambda rng: np.asarray(rng.standard_normal(shape) * scale)


def positive(*shape, low=0.5, high=2.0):
    """Values in [low, high): logarithms, divisors, variances."""
    return lambda rng: np.asarray(rng.uniform(low, high, shape))


def nonzero(*shape):
    """Magnitudes in [0.5, 2) of either sign: divisors whose quotients stay small."""
    return lambda rng: np.asarray(rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape))


def labels(*shape, classes=3):
    """Class indices in [0, classes), int64."""
    return lambda rng: rng.integers(0, classes, shape)


def booleans(*shape):
    """Random bools: conditions and masks."""
    return lambda rng: rng.random(shape) < 0.5


def small_integers(*shape):
    """Integers in [-2, 2] as float64, so comparisons meet ties."""
    return lambda rng: rng.integers(-2, 3, shape).astype(np.float64)


def int64(*values):
    """A constant int64 vector: shapes, axes."""
    return np.array(values, dtype=np.int64)


@dataclass(frozen=True)
class derived:
    """Inputs built together (`fn(rng) -> list`), for ops whose inputs must agree."""
    fn: Callable


@dataclass(frozen=True)
class Case:
    inputs: tuple
    attrs: dict
    since: int = 1                       # the first opset whose schema takes these attributes
    outputs: Optional[tuple] = None      # outputs to ask for (None: the row's)
    output_shapes: Optional[dict] = None
    random: bool = False                 # values drawn at random: shapes and dtypes compared, not values
    gradient: bool = True                # False where the op's gradient refuses the case by design

    def build(self, rng):
        """The inputs as a list of float64 (and integer, bool) arrays or None."""
        if len(self.inputs) == 1 and isinstance(self.inputs[0], derived):
            return list(self.inputs[0].fn(rng))
        return [x(rng) if callable(x) else x for x in self.inputs]


def f32(value):
    """An ONNX float attribute's default as the kernels see it: the float32 value."""
    return float(np.float32(value))


def case(*inputs, since=1, outputs=None, output_shapes=None, random=False, gradient=True, **attrs):
    """A Case of these inputs; keyword arguments other than Case's fields are the attributes."""
    return Case(tuple(inputs), attrs, since, None if outputs is None else tuple(outputs), output_shapes, random,
                gradient)


def sample(domain, op, since=1):
    """The op's sample in error_inputs.SAMPLES as a case."""
    inputs, attrs, shapes = SAMPLES[(domain, op)]
    return Case(tuple(inputs), dict(attrs), since, None, shapes)


@dataclass(frozen=True)
class OpRow:
    op: str
    cases: tuple
    domain: str = ""
    since: int = 1
    reference: Optional[Callable] = None
    differentiable: tuple = ()
    differentiable_outputs: Optional[tuple] = None
    outputs: tuple = ("Y",)
    in_place: tuple = ()
    gradient_of: Optional[tuple] = None
    gradient_since: int = 1              # the first opset whose gradient graph can be built
    output_dtype: Optional[Callable] = None  # attrs -> the float outputs' dtype, where not the kernel's (Cast)


# ---- NumPy references -----------------------------------------------------------------------

def _spatial(x, attrs, name, fill):
    """The attribute `name` (strides, pads, dilations) or its default for x's spatial rank."""
    k = x.ndim - 2
    value = attrs.get(name)
    return list(value) if value else [fill] * (2 * k if name == "pads" else k)


def _windows(x, kernel, strides, pads, dilations, fill):
    """(N, C, *out, *kernel) windows of x padded with `fill` (explicit pads, floor rounding)."""
    k = len(kernel)
    padded = np.pad(x, [(0, 0), (0, 0)] + list(zip(pads[:k], pads[k:])), constant_values=fill)
    extent = [(kk - 1) * d + 1 for kk, d in zip(kernel, dilations)]
    win = sliding_window_view(padded, extent, axis=tuple(range(2, 2 + k)))
    pick = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) + \
        tuple(slice(None, None, d) for d in dilations)
    return win[pick]


def _explicit(attrs):
    return attrs.get("auto_pad", "NOTSET") == "NOTSET" and not attrs.get("ceil_mode")


def conv(inputs, attrs):
    """Conv as a contraction of each group's windows with its filters (explicit pads only)."""
    if not _explicit(attrs):
        return None
    x, w, b = (list(inputs) + [None])[:3]
    k, group = x.ndim - 2, attrs.get("group", 1)
    win = _windows(x, w.shape[2:], _spatial(x, attrs, "strides", 1), _spatial(x, attrs, "pads", 0),
                   _spatial(x, attrs, "dilations", 1), 0.0)
    cg, mg = x.shape[1] // group, w.shape[0] // group
    parts = [np.tensordot(win[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg],
                          axes=([1] + list(range(2 + k, 2 + 2 * k)), [1] + list(range(2, 2 + k))))
             for g in range(group)]
    y = np.moveaxis(np.concatenate(parts, axis=-1), -1, 1)
    return {"Y": y if b is None else y + b.reshape((1, -1) + (1,) * k)}


def pool(kind):
    """MaxPool ("max") or AveragePool ("avg") over the windows (explicit pads, floor rounding);
    without count_include_pad the average counts only the input's own elements."""
    def reference(inputs, attrs):
        (x,) = inputs
        if not _explicit(attrs):
            return None
        kernel = attrs["kernel_shape"]
        geometry = (_spatial(x, attrs, "strides", 1), _spatial(x, attrs, "pads", 0), _spatial(x, attrs, "dilations", 1))
        axes = tuple(range(-len(kernel), 0))
        if kind == "max":
            return {"Y": _windows(x, kernel, *geometry, -np.inf).max(axis=axes)}
        total = _windows(x, kernel, *geometry, 0.0).sum(axis=axes)
        if attrs.get("count_include_pad"):
            return {"Y": total / np.prod(kernel)}
        return {"Y": total / _windows(np.ones_like(x), kernel, *geometry, 0.0).sum(axis=axes)}
    return reference


def global_pool(reduce):
    return lambda inputs, attrs: {"Y": reduce(inputs[0], axis=tuple(range(2, inputs[0].ndim)), keepdims=True)}


def _softmax(x, axis, log, flatten):
    shape = x.shape
    if flatten:
        x, axis = x.reshape(int(np.prod(shape[:axis % x.ndim])), -1), 1
    z = x - x.max(axis=axis, keepdims=True)
    s = np.exp(z).sum(axis=axis, keepdims=True)
    return (z - np.log(s) if log else np.exp(z) / s).reshape(shape)


def softmax(log, flatten, name="output"):
    default_axis = 1 if flatten else -1
    return lambda inputs, attrs: {name: _softmax(inputs[0], attrs.get("axis", default_axis), log, flatten)}


def softmax_grad(log, flatten):
    def reference(inputs, attrs):
        dy, y = inputs
        shape, axis = dy.shape, attrs.get("axis", 1 if flatten else -1)
        if flatten:
            rows = int(np.prod(shape[:axis % dy.ndim]))
            dy, y, axis = dy.reshape(rows, -1), y.reshape(rows, -1), 1
        if log:
            dx = dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
        else:
            dx = y * (dy - (dy * y).sum(axis=axis, keepdims=True))
        return {"dX": dx.reshape(shape)}
    return reference


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {  # op: (forward, gradient from (dY, what the gradient op reads), default alpha)
    "Relu": (lambda x, a: np.maximum(x, 0), lambda dy, x, a: dy * (x > 0), None),
    "Sigmoid": (lambda x, a: _sigmoid(x), lambda dy, y, a: dy * y * (1 - y), None),
    "Tanh": (lambda x, a: np.tanh(x), lambda dy, y, a: dy * (1 - y * y), None),
    "LeakyRelu": (lambda x, a: np.where(x > 0, x, a * x), lambda dy, y, a: dy * np.where(y > 0, 1, a), f32(0.01)),
    "QuickGelu": (lambda x, a: x * _sigmoid(a * x),
                  lambda dy, x, a: dy * (_sigmoid(a * x) * (1 + a * x * (1 - _sigmoid(a * x)))), f32(1.702)),
    # the fused ops' other activations: Clip's "alpha" is its bounds [min, max]
    "Clip": (lambda x, a: np.minimum(np.maximum(x, a[0]), a[1]), None, None),
    "HardSwish": (lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
                  lambda dy, x, a: dy * np.select([x < -3, x <= 3], [0.0, x / 3 + 0.5], 1.0), None),
}


def activation(op, name="Y"):
    forward, _, alpha = ACTIVATIONS[op]
    return lambda inputs, attrs: {name: forward(inputs[0], attrs.get("alpha", alpha))}


def activation_grad(op):
    _, backward, alpha = ACTIVATIONS[op]
    return lambda inputs, attrs: {"dX": backward(inputs[0], inputs[1], attrs.get("alpha", alpha))}


# -- pointwise activations of exported models (ops/pointwise_activation.py), unary math, PRelu, Max/Min
_erf = np.vectorize(math.erf)
_GELU_K = math.sqrt(2 / math.pi)
_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875   # ONNX's float32 defaults


def _gelu_tanh_parts(x):
    """(tanh of the tanh form's argument, that argument's derivative)."""
    return np.tanh(_GELU_K * (x + 0.044715 * x ** 3)), _GELU_K * (1 + 3 * 0.044715 * x ** 2)


def _attr(attrs, name, default):
    return attrs.get(name, f32(default))


POINTWISE = {  # op: (forward(x, attrs), gradient(dy, x, attrs)), in float64 by the definitions
    "HardSigmoid": (lambda x, a: np.clip(_attr(a, "alpha", 0.2) * x + _attr(a, "beta", 0.5), 0, 1),
                    lambda dy, x, a: dy * _attr(a, "alpha", 0.2) *
                    (np.abs(_attr(a, "alpha", 0.2) * x + _attr(a, "beta", 0.5) - 0.5) < 0.5)),
    "HardSwish": (lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
                  lambda dy, x, a: dy * np.select([x < -3, x <= 3], [0.0, x / 3 + 0.5], 1.0)),
    "Softplus": (lambda x, a: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0), lambda dy, x, a: dy * _sigmoid(x)),
    "Elu": (lambda x, a: np.where(x > 0, x, _attr(a, "alpha", 1.0) * (np.exp(np.minimum(x, 0)) - 1)),
            lambda dy, x, a: dy * np.where(x > 0, 1.0, _attr(a, "alpha", 1.0) * np.exp(np.minimum(x, 0)))),
    "Selu": (lambda x, a: _attr(a, "gamma", _SELU_GAMMA) *
             np.where(x > 0, x, _attr(a, "alpha", _SELU_ALPHA) * (np.exp(np.minimum(x, 0)) - 1)),
             lambda dy, x, a: dy * _attr(a, "gamma", _SELU_GAMMA) *
             np.where(x > 0, 1.0, _attr(a, "alpha", _SELU_ALPHA) * np.exp(np.minimum(x, 0)))),
    "Gelu": (lambda x, a: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
             lambda dy, x, a: dy * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))),
    "FastGelu": (lambda x, a: 0.5 * x * (1 + _gelu_tanh_parts(x)[0]),
                 lambda dy, x, a: dy * (0.5 * (1 + _gelu_tanh_parts(x)[0]) +
                                        0.5 * x * (1 - _gelu_tanh_parts(x)[0] ** 2) * _gelu_tanh_parts(x)[1])),
}


def pointwise(op, name="Y"):
    """The forward of a POINTWISE op; Gelu's approximate=tanh is FastGelu's form, a bias is
    added to X first (FastGelu's)."""
    def reference(inputs, attrs):
        form = "FastGelu" if op == "Gelu" and attrs.get("approximate") == "tanh" else op
        x = inputs[0] if len(inputs) < 2 or inputs[1] is None else inputs[0] + inputs[1]
        return {name: POINTWISE[form][0](x, attrs)}
    return reference


def pointwise_grad(op):
    return lambda inputs, attrs: {"dX": POINTWISE[op][1](inputs[0], inputs[1], attrs)}


def prelu(inputs, attrs):
    x, slope = inputs
    return {"Y": np.where(x > 0, x, x * slope)}


def variadic(fn, name):
    """Max or Min of the inputs broadcast together."""
    return lambda inputs, attrs: {name: functools.reduce(fn, inputs)}


def activation_grad_bias(inputs, attrs):
    dx = ACTIVATIONS[attrs["activation"]][1](inputs[0], inputs[1], attrs.get("activation_alpha", f32(0.01)))
    return {"dX": dx, "dB": dx.sum(axis=tuple(a for a in range(dx.ndim) if a != 1))}


def batch_norm_fold(inputs, attrs):
    w, scale, bias, mean, var = inputs[:5]
    b = inputs[5] if len(inputs) > 5 and inputs[5] is not None else 0.0
    factor = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    return {"W_folded": w * factor.reshape((-1,) + (1,) * (w.ndim - 1)), "B_folded": (b - mean) * factor + bias}


def linear(inputs, attrs):
    """Linear: (X W^T + B) S over X's last axis."""
    x, w, bias, scale = list(inputs) + [None] * (4 - len(inputs))
    return {"Y": (x @ w.T + (0.0 if bias is None else bias)) * (1.0 if scale is None else scale)}


def linear_grad(inputs, attrs):
    """LinearGrad: with dZ = dY S, dX = dZ W, dW = dZ^T X and dB = dZ over all rows, and dS = dY
    (X W^T + B) summed over the rows."""
    dy, x, w, bias, scale = list(inputs) + [None] * (5 - len(inputs))
    dz = dy * (1.0 if scale is None else scale)
    dz_rows, x_rows = dz.reshape(-1, dz.shape[-1]), x.reshape(-1, x.shape[-1])
    z = x @ w.T + (0.0 if bias is None else bias)
    return {"dX": dz @ w, "dW": dz_rows.T @ x_rows, "dB": dz_rows.sum(axis=0),
            "dS": (dy * z).reshape(-1, dy.shape[-1]).sum(axis=0)}


def batch_norm_activation_grad(inputs, attrs):
    """BatchNormalizationGrad of the activation's gradient ACTIVATIONS gives for (dY, A)."""
    dz, a, x, scale, mean, inv_std = inputs
    if attrs["activation"] == "Clip":
        low, high = attrs["activation_params"]
        dy = dz * ((a >= low) & (a <= high))
    else:
        dy = ACTIVATIONS[attrs["activation"]][1](dz, a, None)
    axes = (0,) + tuple(range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    centered = x - mean.reshape(channel)
    dbias, sum_centered = dy.sum(axis=axes), (dy * centered).sum(axis=axes)
    dx = dy * (scale * inv_std).reshape(channel)
    if attrs.get("training_mode"):
        count = x.size // x.shape[1]
        dx = dx - (scale * inv_std).reshape(channel) * (
            centered * (inv_std ** 2 * sum_centered).reshape(channel) + dbias.reshape(channel)) / count
    return {"dX": dx, "dscale": sum_centered * inv_std, "dbias": dbias}


def mul_grad(inputs, attrs):
    """dA = dY B summed to A's shape, dB = dY A summed to B's shape (Mul's gradient)."""
    dy, a, b = inputs

    def summed(x, shape):
        lead = x.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
        return x.sum(axis=axes).reshape(shape)
    return {"dA": summed(dy * b, a.shape), "dB": summed(dy * a, b.shape)}


def clip_grad(inputs, attrs):
    """dY, but 0 where X < min or X > max (an absent bound clips nothing, a NaN X passes dY)."""
    dy, x, low, high = (list(inputs) + [None, None])[:4]
    outside = np.zeros(x.shape, bool)
    if low is not None:
        outside |= x < low
    if high is not None:
        outside |= x > high
    return {"dX": np.where(outside, 0.0, dy)}


def _fused(forward, alpha_of):
    def reference(inputs, attrs):
        y = forward(inputs, attrs)
        if y is None:
            return None
        act, alpha = attrs.get("activation"), alpha_of(attrs)
        return {"Y": ACTIVATIONS[act][0](y["Y"], alpha) if act else y["Y"]}
    return reference


def gemm(inputs, attrs):
    a, b, c = (list(inputs) + [None])[:3]
    a = a.T if attrs.get("transA") else a
    b = b.T if attrs.get("transB") else b
    y = attrs.get("alpha", 1.0) * (a @ b)
    return {"Y": y if c is None else y + attrs.get("beta", 1.0) * c}


def _sum_to(x, shape):
    """x summed over the leading axes `shape` lacks and the axes where `shape` has 1."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    return x.sum(axis=tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1), keepdims=True)


def reduction(reduce, axes_from_input, elementwise=None):
    """ReduceSum, ReduceMean or ReduceMax (`reduce`: np.sum, np.mean, np.max) over the axes of
    the attribute, or of the input from the opset where they moved; absent or empty axes
    reduce every axis, unless noop_with_empty_axes makes them the identity (or `elementwise`,
    the part of ReduceSumSquare and ReduceL2 that still applies then)."""
    def reference(inputs, attrs):
        x = inputs[0]
        axes = inputs[1] if axes_from_input and len(inputs) > 1 else attrs.get("axes")
        if axes is None or len(axes) == 0:
            if attrs.get("noop_with_empty_axes"):
                return {"reduced": x if elementwise is None else elementwise(x)}
            axes = range(x.ndim)
        return {"reduced": reduce(x, axis=tuple(int(a) for a in axes), keepdims=bool(attrs.get("keepdims", 1)))}
    return reference


def reshape(inputs, attrs):
    """A 0 in the target keeps the input's dim (unless allowzero), -1 is inferred."""
    x, target = inputs
    shape = [x.shape[i] if d == 0 and not attrs.get("allowzero") else int(d) for i, d in enumerate(target)]
    return {"reshaped": x.reshape(shape)}


def flatten(inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return {"output": x.reshape(int(np.prod(x.shape[:axis])), -1)}


def shape_of(inputs, attrs):
    dims = np.array(inputs[0].shape, dtype=np.int64)
    return {"shape": dims[attrs.get("start", 0):attrs.get("end")]}


def _class_weights(labels, weights, ignore_index):
    """(labels with the ignored ones made 0, each sample's weight: 0 where ignored)."""
    safe = np.where(labels == ignore_index, 0, labels) if ignore_index is not None else labels
    w = np.ones(labels.shape) if weights is None else weights[safe]
    return safe, (w if ignore_index is None else np.where(labels == ignore_index, 0.0, w))


def _reduce_loss(losses, reduction, count):
    if reduction == "none":
        return losses
    return np.array(losses.sum() / (count if reduction == "mean" else 1.0))


def nll(inputs, attrs):
    """-input[n, target[n, d...], d...] times the target's class weight (0 where ignored),
    summed, averaged over the weights of the targets not ignored (mean) or left per target."""
    x, lab, weights = (list(inputs) + [None])[:3]
    safe, w = _class_weights(lab, weights, attrs.get("ignore_index"))
    picked = -np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    return {"loss": _reduce_loss(w * picked, attrs.get("reduction", "mean"), w.sum())}


def sce(inputs, attrs):
    scores, lab, weights = (list(inputs) + [None])[:3]
    log_prob = _softmax(scores, 1, True, False)
    return {"output": nll([log_prob, lab, weights], attrs)["loss"], "log_prob": log_prob}


def _target_coefficients(dy, lab, weights, attrs):
    """(labels with the ignored ones made 0, d loss / d picked input per target: dY times the
    target's weight, over the weight total for mean)."""
    safe, w = _class_weights(lab, weights, attrs.get("ignore_index"))
    reduction = attrs.get("reduction", "mean")
    return safe, w * dy if reduction == "none" else w * dy / (w.sum() if reduction == "mean" else 1.0)


def _at_targets(values, safe, like):
    """Zeros shaped like `like` holding each target's value at its class (axis 1)."""
    out = np.zeros_like(like)
    np.put_along_axis(out, safe[:, None], np.expand_dims(values, 1), axis=1)
    return out


def _sce_grad(dy, log_prob, lab, weights, attrs):
    safe, coef = _target_coefficients(dy, lab, weights, attrs)
    return np.exp(log_prob) * np.expand_dims(coef, 1) - _at_targets(coef, safe, log_prob)


def sce_grad(inputs, attrs):
    dy, log_prob, lab, weights = (list(inputs) + [None])[:4]
    return {"d_logits": _sce_grad(dy, log_prob, lab, weights, attrs)}


def sce_with_grad(inputs, attrs):
    scores, lab, dy, weights = (list(inputs) + [None])[:4]
    forward = sce([scores, lab, weights], attrs)
    return {"output": forward["output"], "d_logits": _sce_grad(dy, forward["log_prob"], lab, weights, attrs)}


def nll_grad(inputs, attrs):
    dy, x, lab, weights = (list(inputs) + [None])[:4]
    safe, coef = _target_coefficients(dy, lab, weights, attrs)
    return {"dX": -_at_targets(coef, safe, x)}


def mse(inputs, attrs):
    p, t = inputs
    return {"loss": _reduce_loss((p - t) ** 2, attrs.get("reduction", "mean"), p.size)}


def mse_grad(inputs, attrs):
    dy, p, t = inputs
    scale = {"none": 1.0, "sum": 1.0, "mean": 1.0 / p.size}[attrs.get("reduction", "mean")]
    return {"d_prediction": 2 * (p - t) * dy * scale}


def batchnorm(inputs, attrs):
    x, scale, bias, mean_in, var_in = inputs
    eps, m, training = attrs.get("epsilon", f32(1e-5)), attrs.get("momentum", f32(0.9)), attrs.get("training_mode", 0)
    axes = (0,) + tuple(range(2, x.ndim))
    mean, var = (x.mean(axis=axes), x.var(axis=axes)) if training else (mean_in, var_in)
    inv_std = 1 / np.sqrt(var + eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) * (inv_std * scale).reshape(shape) + bias.reshape(shape)
    out = {"Y": y, "saved_mean": mean, "saved_inv_std": inv_std}
    if training:
        out.update(running_mean=m * mean_in + (1 - m) * mean, running_var=m * var_in + (1 - m) * var)
    return out


# ---- per-sample normalisations (LayerNormalization, InstanceNormalization, GroupNormalization)
def _row_stats(rows, epsilon):
    mean = rows.mean(axis=-1, keepdims=True)
    return mean, 1 / np.sqrt(((rows - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)


def layer_norm(inputs, attrs):
    x, scale, bias = (list(inputs) + [None])[:3]
    axis = attrs.get("axis", -1) % x.ndim
    rows = x.reshape(x.shape[:axis] + (-1,))
    mean, inv_std = _row_stats(rows, attrs.get("epsilon", f32(1e-5)))
    y = ((rows - mean) * inv_std).reshape(x.shape) * scale + (0 if bias is None else bias)
    stats = x.shape[:axis] + (1,) * (x.ndim - axis)
    return {"Y": y, "Mean": mean.reshape(stats), "InvStdDev": inv_std.reshape(stats)}


def group_norm(per_channel):
    """GroupNormalization's reference; InstanceNormalization is its case of one channel a group."""
    def reference(inputs, attrs):
        x, scale, bias = inputs
        n, c = x.shape[:2]
        groups = attrs.get("num_groups", c)
        rows = x.reshape(n, groups, -1)
        mean, inv_std = _row_stats(rows, attrs.get("epsilon", f32(1e-5)))
        if not per_channel:
            scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
        channel = (1, c) + (1,) * (x.ndim - 2)
        y = ((rows - mean) * inv_std).reshape(x.shape) * scale.reshape(channel) + bias.reshape(channel)
        names = ("output", "mean", "inv_std_dev") if "num_groups" not in attrs else ("Y", "mean", "inv_std_dev")
        return dict(zip(names, (y, mean.reshape(n, groups), inv_std.reshape(n, groups))))
    return reference


def _sample_norm_grad_inputs(reference, x_shape, scale_shape, attrs):
    """dY, X, scale and the statistics the forward op makes of X."""
    def build(rng):
        x, scale = rng.standard_normal(x_shape) * 2 + 0.5, rng.standard_normal(scale_shape)
        out = list(reference([x, scale, np.zeros(scale_shape)], attrs).values())
        return [rng.standard_normal(x_shape), x, scale, out[1], out[2]]
    return derived(build)


def dropout_identity(inputs, attrs):
    return {"output": inputs[0], "mask": np.ones(inputs[0].shape, bool)}


def dropout_grad(inputs, attrs):
    dy, mask, ratio, training = (list(inputs) + [None, None])[:4]
    r = 0.5 if ratio is None else float(ratio)
    if training is None or not bool(training) or r == 0:
        return {"dX": dy}
    return {"dX": dy * mask / (1 - r)}


def accumulate(inputs, attrs):
    total = inputs[0] + (1.0 if len(inputs) < 3 else float(inputs[2])) * inputs[1]
    return {"accumulated": total, "input 0": total}


def accumulate_v2(inputs, attrs):
    total = inputs[1] if len(inputs) > 2 and inputs[2][0] else inputs[0] + inputs[1]
    return {"updated_flag": np.ones(1, bool), "accumulated": total, "input 0": total}


# ONNX Runtime's training optimizers (AdamWOptimizer, SGDOptimizerV2), after its CPU kernels
def adamw(inputs, attrs):
    """AdamWOptimizer: PyTorch's AdamW (adam_mode 0) or Hugging Face's (1), on every parameter."""
    lr, step, tensors = float(inputs[0]), int(inputs[1]), inputs[2:]
    alpha, beta = attrs.get("alpha", f32(0.9)), attrs.get("beta", f32(0.999))
    eps, decay = attrs.get("epsilon", f32(1e-8)), attrs.get("weight_decay", f32(1e-2))
    correct = attrs.get("correct_bias", 1)
    c1, c2 = (1 - alpha ** step, 1 - beta ** step) if correct else (1.0, 1.0)
    count = len(tensors) // 4
    out = {"updated_flag": np.ones(np.shape(inputs[1]), bool)}
    for k in range(count):
        w, g, m, v = (tensors[k + j * count] for j in range(4))
        m, v = alpha * m + (1 - alpha) * g, beta * v + (1 - beta) * g * g
        if attrs.get("adam_mode", 0) == 0:
            w = w * (1 - lr * decay) - lr * m / (c1 * (np.sqrt(v / c2) + eps))
        else:
            w = w - lr * np.sqrt(c2) / c1 * m / (np.sqrt(v) + eps)
            w = w * (1 - lr * decay)
        out.update({f"input {2 + k}": w, f"input {2 + 2 * count + k}": m, f"input {2 + 3 * count + k}": v})
    return out


def sgd_v2(inputs, attrs):
    """SGDOptimizerV2: w -= lr * g on every parameter."""
    lr, tensors = float(inputs[0]), inputs[1:]
    count = len(tensors) // 2
    return {"update_completed": np.ones(np.shape(inputs[0]), bool),
            **{f"input {1 + k}": tensors[k] - lr * tensors[count + k] for k in range(count)}}


def binary(fn, name="C"):
    return lambda inputs, attrs: {name: fn(*inputs)}


def quotient(inputs, attrs):
    """Div's reference: true division on floats, truncated toward zero on integers (C's)."""
    a, b = inputs
    if np.asarray(a).dtype.kind == "f":
        return {"C": np.divide(a, b)}
    return {"C": np.trunc(np.divide(a, b)).astype(np.result_type(a, b))}


def divisors(*shape):
    """Magnitudes in [1, 3) of either sign: divisors that stay nonzero cast to integers."""
    return lambda rng: np.asarray(rng.uniform(1.0, 3.0, shape) * rng.choice([-1.0, 1.0], shape))


def unary(fn, name="output"):
    return lambda inputs, attrs: {name: fn(inputs[0])}


FLOAT32_MAX = float(np.finfo(np.float32).max)


def clip(bounds_from_input):
    """X limited to [min, max]: attributes defaulting to the float32 extremes (opset 6), or
    optional scalar inputs, an absent one clipping nothing (11+).  With min > max every
    element becomes max."""
    def reference(inputs, attrs):
        x = inputs[0]
        if bounds_from_input:
            low, high = (list(inputs[1:]) + [None, None])[:2]
        else:
            low, high = attrs.get("min", -FLOAT32_MAX), attrs.get("max", FLOAT32_MAX)
        y = x if low is None else np.maximum(x, low)
        return {"output": y if high is None else np.minimum(y, high)}
    return reference


def _slice_indices(dim, start, end, step):
    """The indices ONNX's Slice keeps along a dim: negative start and end count from the end,
    then clamp to [0, dim] (step > 0) or to [0, dim - 1] and [-1, dim - 1] (step < 0)."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return np.arange(start, end, step)


def _slice_index(shape, starts, ends, axes=None, steps=None):
    """An np.ix_ index of the elements Slice keeps (every element of the axes not named)."""
    axes = range(len(starts)) if axes is None else [int(a) % len(shape) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    kept = [np.arange(d) for d in shape]
    for axis, start, end, step in zip(axes, starts, ends, steps):
        kept[axis] = _slice_indices(shape[axis], int(start), int(end), int(step))
    return np.ix_(*kept)


def slice_(index_from_input):
    def reference(inputs, attrs):
        x = inputs[0]
        index = (list(inputs[1:]) + [None, None])[:4] if index_from_input else \
            [attrs["starts"], attrs["ends"], attrs.get("axes")]
        return {"output": x[_slice_index(x.shape, *index)]}
    return reference


def slice_grad(inputs, attrs):
    """dY written into zeros of the input's shape at the positions Slice kept."""
    dy, shape = inputs[0], tuple(int(d) for d in inputs[1])
    dx = np.zeros(shape)
    dx[_slice_index(shape, *(list(inputs[2:]) + [None, None])[:4])] = dy
    return {"dX": dx}


def one_hot(negative_from_end):
    """values[1] where a new axis of `depth` entries (at `axis`, default -1) equals the index,
    values[0] elsewhere; an index outside [0, depth) (opset 9) or [-depth, depth) (11+, a
    negative one counting from the end) matches nothing."""
    def reference(inputs, attrs):
        indices, depth, values = inputs
        depth = int(np.asarray(depth).reshape(()))
        index = np.where(indices < 0, indices + depth, indices) if negative_from_end else indices
        rank = indices.ndim + 1
        axis = attrs.get("axis", -1) % rank
        classes = np.arange(depth).reshape((depth,) + (1,) * (rank - 1 - axis))
        return {"output": np.where(np.expand_dims(index, axis) == classes, values[1], values[0])}
    return reference


def unsqueeze(axes_from_input):
    """Dims of 1 at the axes, each counted in the output's rank."""
    def reference(inputs, attrs):
        axes = inputs[1] if axes_from_input else attrs["axes"]
        return {"expanded": np.expand_dims(inputs[0], tuple(int(a) for a in axes))}
    return reference


def squeeze(axes_from_input):
    """Without the dims at the axes; every dim of 1 when they are absent."""
    def reference(inputs, attrs):
        axes = (inputs[1] if len(inputs) > 1 else None) if axes_from_input else attrs.get("axes")
        return {"squeezed": np.squeeze(inputs[0], None if axes is None else tuple(int(a) for a in axes))}
    return reference


CAST_TO = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}  # TensorProto


# structural ops: Constant, ConstantOfShape, Concat, Split, Gather, Tile, Pad, Resize --------------

def constant_dtype(attrs):
    """The dtype of the tensor a Constant node's attributes hold."""
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if attrs.get(name) is not None:
            return np.dtype(dtype)
    return np.asarray(attrs["value"]).dtype


def constant(inputs, attrs):
    name = next(k for k, v in attrs.items() if v is not None)
    return {"output": np.asarray(attrs[name], dtype=constant_dtype(attrs))}


def constant_of_shape(inputs, attrs):
    value = attrs.get("value", np.zeros(1, np.float32))
    return {"output": np.full(tuple(inputs[0]), value.reshape(()), dtype=value.dtype)}


def split(split_from_input):
    """The pieces: the split sizes, else num_outputs or two equal pieces (the last the rest)."""
    def reference(inputs, attrs):
        x, axis = inputs[0], attrs.get("axis", 0)
        sizes = (inputs[1] if len(inputs) > 1 and inputs[1] is not None else None) if split_from_input \
            else attrs.get("split")
        if sizes is None:
            pieces = attrs.get("num_outputs", 2)
            size = -(-x.shape[axis] // pieces)
            sizes = [min(size, x.shape[axis] - i * size) for i in range(pieces)]
        cuts = np.cumsum(sizes)[:-1]
        return {f"outputs_{i}": part for i, part in enumerate(np.split(x, cuts, axis=axis))}
    return reference


def gather_grad(inputs, attrs):
    shape, indices, dy = inputs
    axis = attrs.get("axis", 0) % len(shape)
    dx = np.zeros(tuple(shape))
    index = np.where(indices < 0, indices + shape[axis], indices).reshape(-1)
    np.add.at(np.moveaxis(dx, axis, 0), index,
              np.moveaxis(dy.reshape(tuple(shape[:axis]) + (index.size,) + tuple(shape[axis + 1:])), axis, 0))
    return {"dX": dx}


def pad(pads_from_input):
    """np.pad of the positive pads, then the crop of the negative ones."""
    def reference(inputs, attrs):
        x = inputs[0]
        if pads_from_input:
            pads = [int(p) for p in inputs[1]]
            value = inputs[2].reshape(()) if len(inputs) > 2 and inputs[2] is not None else 0.0
            axes = [int(a) % x.ndim for a in inputs[3]] if len(inputs) > 3 and inputs[3] is not None \
                else list(range(x.ndim))
        else:
            pads, value, axes = list(attrs["pads"]), attrs.get("value", 0.0), list(range(x.ndim))
        pairs = [(0, 0)] * x.ndim
        for k, a in enumerate(axes):
            pairs[a] = (pads[k], pads[k + len(axes)])
        mode = attrs.get("mode", "constant")
        grown = np.pad(x, [(max(b, 0), max(e, 0)) for b, e in pairs], mode=mode,
                       **({"constant_values": value} if mode == "constant" else {}))
        crop = tuple(slice(max(-b, 0), grown.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(pairs))
        return {"output": grown[crop]}
    return reference


def _gather_grad_inputs(shape, indices, axis):
    def build(rng):
        index = np.array(indices, dtype=np.int64)
        gathered = shape[:axis] + index.shape + shape[axis + 1:]
        return [np.array(shape, dtype=np.int64), index, rng.standard_normal(gathered)]
    return derived(build)


def _resize_grad_inputs(x_shape, y_shape, scales=None):
    def build(rng):
        return [rng.standard_normal(y_shape), rng.standard_normal(x_shape), None,
                None if scales is None else np.array(scales)]
    return derived(build)


EMPTY = np.zeros(0)


# ---- inputs that must agree ------------------------------------------------------------------

def _max_pool_grad_inputs(x_shape, attrs):
    def build(rng):
        x = rng.standard_normal(x_shape)
        y, indices = run_node("MaxPool", [x], attrs=attrs)
        return [rng.standard_normal(y.shape), indices]
    return derived(build)


def _conv_grad_inputs(op, x_shape, w_shape, attrs):
    """dY of the forward's output shape, X and W."""
    def build(rng):
        x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
        (y,) = run_node(op, [x, w], attrs=attrs)
        return [rng.standard_normal(y.shape), x, w]
    return derived(build)


def _softmax_pair(shape, axis, log, flatten):
    return derived(lambda rng: [rng.standard_normal(shape), _softmax(rng.standard_normal(shape), axis, log, flatten)])


def _batchnorm_grad_inputs(shape, training):
    def build(rng):
        x = rng.standard_normal(shape)
        axes = (0,) + tuple(range(2, len(shape)))
        mean, var = (x.mean(axis=axes), x.var(axis=axes)) if training else \
            (rng.standard_normal(shape[1]), rng.uniform(0.5, 2.0, shape[1]))
        return [rng.standard_normal(shape), x, rng.standard_normal(shape[1]), mean, 1 / np.sqrt(var + 1e-5)]
    return derived(build)


def _sce_grad_inputs(n, classes, reduction, weighted):
    def build(rng):
        log_prob = _softmax(rng.standard_normal((n, classes)), 1, True, False)
        dy = rng.standard_normal(n) if reduction == "none" else np.array(rng.standard_normal())
        weights = rng.uniform(0.5, 2.0, classes) if weighted else None
        return [dy, log_prob, rng.integers(0, classes, n), weights]
    return derived(build)


def _nll_grad_inputs(shape, reduction, weighted):
    """dY of the loss's shape, the input, targets and (optionally) class weights."""
    def build(rng):
        targets = (shape[0],) + shape[2:]
        dy = rng.standard_normal(targets) if reduction == "none" else np.array(rng.standard_normal())
        weights = rng.uniform(0.5, 2.0, shape[1]) if weighted else None
        return [dy, rng.standard_normal(shape), rng.integers(0, shape[1], targets), weights]
    return derived(build)


def _slice_grad_inputs(shape, *index):
    """dY of the slice's shape, the input's shape and the index inputs (starts, ends, axes?,
    steps?)."""
    def build(rng):
        kept = np.zeros(shape)[_slice_index(shape, *index)]
        return [rng.standard_normal(kept.shape), int64(*shape)] + [int64(*v) for v in index]
    return derived(build)


def _optimizer_inputs(head, groups, shapes=((3, 2), (4,)), overflow=False):
    """learning rate (and step), then `groups` tensors per parameter shape: parameters,
    gradients, then state (moments kept positive: Adam's v is a mean of squares).  overflow:
    one gradient element is inf (an update that skip_non_finite skips)."""
    def build(rng):
        tensors = [rng.standard_normal(s) * (0.1 if g == 1 else 1.0) for g in range(groups) for s in shapes]
        if groups == 4:
            tensors[3 * len(shapes):] = [np.abs(t) for t in tensors[3 * len(shapes):]]
        if overflow:
            tensors[len(shapes) + 1].reshape(-1)[1] = np.inf
        return list(head) + tensors
    return derived(build)


def _scaler_state(scale, growth_tracker, skipped=3):
    """LossScaleUpdate's in-place inputs: the float32 scale and the int64 counters."""
    return np.array(scale, np.float32), np.array(growth_tracker, np.int64), np.array(skipped, np.int64)


def loss_scale_update(inputs, attrs):
    """PyTorch's _amp_update_scale_ on (grad_norm, scale, growth_tracker, skipped)."""
    norm, scale, tracker, skipped = (float(np.asarray(x).reshape(-1)[0]) for x in inputs)
    found_inf = not np.isfinite(norm)
    if found_inf:
        scale, tracker, skipped = scale * attrs.get("backoff_factor", 0.5), 0, skipped + 1
    elif tracker + 1 >= attrs.get("growth_interval", 2000):
        with np.errstate(over="ignore"):
            grown = np.float32(scale) * np.float32(attrs.get("growth_factor", 2.0))
        scale, tracker = (float(grown) if np.isfinite(grown) else scale), 0
    else:
        tracker += 1
    return {"found_inf": np.array(found_inf), "input 1": np.array(scale, np.float32),
            "input 2": np.array(tracker, np.int64), "input 3": np.array(skipped, np.int64)}


def broadcasting(divisor=normal):
    """Every broadcast pattern: equal shapes, a trailing vector (short and long), inner and outer
    ones, both operands stretched, a scalar, a squeeze-excitation gate (N, C, 1, 1) and a
    per-channel vector (1, C, 1, 1) first."""
    shapes = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)),
              ((2, 1, 4), (1, 3, 1)), ((), (2, 3)), ((3,), ()), ((3, 17), (17,)), ((2, 3, 1, 1), (2, 3, 4, 5)),
              ((1, 3, 1, 1), (2, 3, 2, 2))]
    return tuple(case(normal(*a), divisor(*b)) for a, b in shapes)


def softmax_cases(since):
    """The default axis on 2-D and 3-D inputs; every axis of a 3-D input (from `since`, where
    negative axes start); 1-D and 4-D inputs."""
    return (case(normal(3, 4)), case(normal(2, 3, 4)),
            *(case(normal(3, 4, 5, scale=3), axis=axis, since=since) for axis in (0, 1, 2, -1)),
            case(normal(4), axis=0), case(normal(3, 5), axis=0), case(normal(2, 3, 2, 3), axis=-1, since=since))


def sce_cases():
    """Each reduction on (N, C), (N, C, d) and (N, C, d1, d2) scores, with and without class
    weights and an ignored class."""
    return tuple(c for reduction in ("mean", "sum", "none") for c in (
        case(normal(5, 4), labels(5, classes=4), reduction=reduction),
        case(normal(5, 4, 3), labels(5, 3, classes=4), positive(4), reduction=reduction),
        case(normal(5, 4, 2, 3), labels(5, 2, 3, classes=4), reduction=reduction, ignore_index=1),
        case(normal(5, 4), labels(5, classes=4), positive(4), reduction=reduction, ignore_index=0),
        case(normal(6, 5, 3), labels(6, 3, classes=5), positive(5), reduction=reduction, ignore_index=0)))


def batchnorm_cases():
    """Training and inference mode on 0-D to 3-D spatial inputs, data off zero."""
    def inputs(*shape):
        return (lambda rng: rng.standard_normal(shape) * 2 + 0.5, normal(shape[1]), normal(shape[1]),
                normal(shape[1]), positive(shape[1]))
    shapes = [(5, 3), (3, 2, 7), (2, 3, 2, 2), (2, 2, 3, 2, 3)]
    return (*(case(*inputs(*shape), training_mode=1, momentum=0.8, epsilon=1e-3) for shape in shapes),
            *(case(*inputs(*shape), epsilon=1e-3, outputs=["Y", "saved_mean", "saved_inv_std"]) for shape in shapes))


GRAD_OUTPUTS = ("dX", "dscale", "dbias")


def batchnorm9_cases():
    """Version 9's training form, which asks for the running statistics (the inference form
    is version 14's with training_mode=0)."""
    return tuple(case(*c.inputs, momentum=0.8, epsilon=1e-3) for c in batchnorm_cases()[:4])


def comparison_cases():
    """Small integers (ties included) in every broadcast pattern."""
    shapes = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3))]
    return tuple(case(small_integers(*a), small_integers(*b)) for a, b in shapes)


def reduce_attribute_cases():
    """Some axes, keepdims=0, every axis (axes absent), negative and unsorted axes (from 11)."""
    return (case(normal(2, 3, 4), axes=[0, 2]), case(normal(2, 3, 4), axes=[1], keepdims=0), case(normal(2, 3)),
            case(normal(2, 3), keepdims=0), case(normal(2, 3, 4), axes=[-1, 0], keepdims=0, since=11),
            case(normal(4), axes=[-1], since=11))


def reduce_input_cases():
    """Axes as an input: some, negative, absent (every axis), empty with and without
    noop_with_empty_axes."""
    return (case(normal(2, 3, 4), int64(0, -1), keepdims=0), case(normal(2, 3, 4), int64(1)),
            case(normal(2, 3)), case(normal(2, 3), keepdims=0), case(normal(2, 3), int64(), noop_with_empty_axes=1),
            case(normal(2, 3), int64(), keepdims=0), case(normal(2, 3, 4), int64(-2)))


def nll_cases():
    """Each reduction on (N, C), (N, C, d) and (N, C, d1, d2) inputs, with and without class
    weights, ignoring a class and a target outside the classes."""
    outside = np.array([0, -1, 4, 2, -1, 3])
    return tuple(c for reduction in ("mean", "sum", "none") for c in (
        case(normal(5, 4), labels(5, classes=4), reduction=reduction),
        case(normal(5, 4, 3), labels(5, 3, classes=4), positive(4), reduction=reduction),
        case(normal(4, 3, 2, 2), labels(4, 2, 2), reduction=reduction, ignore_index=1),
        case(normal(6, 5), outside, positive(5), reduction=reduction, ignore_index=-1)))


_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


_CONV_2D = dict(pads=[1, 0, 1, 0], strides=[2, 1], dilations=[1, 2], group=2, kernel_shape=[3, 2])
_POOL_2D = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])


# ---- the table ------------------------------------------------------------------------------

ROWS = [
    OpRow("Add", broadcasting(), reference=binary(np.add), differentiable=(0, 1), outputs=("C",)),
    OpRow("Sub", broadcasting(), reference=binary(np.subtract), differentiable=(0, 1), outputs=("C",)),
    OpRow("Mul", broadcasting(), reference=binary(np.multiply), differentiable=(0, 1), outputs=("C",)),
    OpRow("Div", broadcasting(divisors), reference=quotient, differentiable=(0, 1), outputs=("C",)),
    OpRow("Neg", (case(normal(2, 3)), case(normal())), reference=lambda i, a: {"Y": -i[0]}, differentiable=(0,)),
    OpRow("Sum", (case(normal(2, 3)), case(normal(2, 3), normal(3), normal(2, 1))),
          reference=lambda i, a: {"sum": sum(np.broadcast_arrays(*i))}, differentiable=(0, 1, 2), outputs=("sum",)),
    OpRow("Identity", (case(normal(2, 3)),), reference=lambda i, a: {"output": i[0]}, differentiable=(0,),
          outputs=("output",)),
    OpRow("Relu", (case(normal(2, 5)),), reference=activation("Relu"), differentiable=(0,)),
    OpRow("Sigmoid", (case(normal(2, 5, scale=3)),), reference=activation("Sigmoid"), differentiable=(0,)),
    OpRow("Tanh", (case(normal(2, 5)),), reference=activation("Tanh", "output"), differentiable=(0,),
          outputs=("output",)),
    OpRow("LeakyRelu", (case(normal(2, 5)), case(normal(2, 5), alpha=0.2), case(normal(7), alpha=-0.5),
                        case(normal(7), alpha=0.0)),
          reference=activation("LeakyRelu"), differentiable=(0,)),
    OpRow("QuickGelu", (case(normal(2, 5, scale=2)), case(normal(7), alpha=-0.3)), domain=MS,
          reference=activation("QuickGelu"), differentiable=(0,)),
    # pointwise activations, unary math, PRelu, Max/Min, ReduceSumSquare and ReduceL2 of exported models
    OpRow("HardSigmoid", (case(normal(3, 5, scale=4)), case(normal(7, scale=4), alpha=0.3, beta=0.4),
                          case(normal(7, scale=4), alpha=-0.5, beta=0.2)),
          since=6, reference=pointwise("HardSigmoid"), differentiable=(0,)),
    OpRow("HardSwish", (case(normal(3, 5, scale=4)), case(np.array([-4.0, -3.0, -1.5, 0.0, 2.0, 3.0, 5.0]),
                                                          gradient=False)),
          since=14, reference=pointwise("HardSwish"), differentiable=(0,)),
    OpRow("Softplus", (case(normal(3, 5, scale=4)), case(np.array([-800.0, -30.0, 0.0, 30.0, 800.0]))),
          reference=pointwise("Softplus"), differentiable=(0,)),
    OpRow("Elu", (case(normal(3, 5, scale=2)), case(normal(7, scale=2), alpha=0.3)),
          since=6, reference=pointwise("Elu"), differentiable=(0,)),
    OpRow("Selu", (case(normal(3, 5, scale=2)), case(normal(7, scale=2), alpha=1.5, gamma=0.8)),
          since=6, reference=pointwise("Selu"), differentiable=(0,)),
    OpRow("Gelu", (case(normal(3, 5, scale=2)), case(normal(7, scale=2), approximate="tanh")),
          since=20, reference=pointwise("Gelu"), differentiable=(0,)),
    OpRow("Gelu", (case(normal(3, 5, scale=2)),), domain=MS, reference=pointwise("Gelu"), differentiable=(0,)),
    OpRow("FastGelu", (case(normal(3, 5, scale=2)), case(normal(2, 3, 4), normal(4)), case(normal(2, 3), normal())),
          domain=MS, reference=pointwise("FastGelu"), differentiable=(0, 1)),
    OpRow("BiasGelu", (case(normal(3, 5, scale=2), normal(5)), case(normal(2, 3, 4, scale=2), normal(4)),
                       case(normal(6, scale=2), normal(6))),
          domain=MS, reference=pointwise("Gelu", "C"), differentiable=(0, 1), outputs=("C",)),
    OpRow("Erf", (case(normal(3, 5, scale=2)), case(normal())), since=9, reference=unary(_erf), differentiable=(0,),
          outputs=("output",)),
    OpRow("Reciprocal", (case(nonzero(3, 5)), case(nonzero())), since=6, reference=unary(np.reciprocal),
          differentiable=(0,), outputs=("output",), gradient_since=7),                     # a Mul
    OpRow("PRelu", (case(normal(2, 3, 4, 4), normal(3, 1, 1)), case(normal(3, 4), normal(4)),
                    case(normal(2, 3, 4), normal(1)), case(normal(3, 4), normal(3, 4))),
          since=7, reference=prelu, differentiable=(0, 1), gradient_since=9),              # a Where
    OpRow("Max", (case(normal(2, 3)), case(normal(2, 3, 4), normal(4), normal(3, 1)),
                  case(np.array([[1.0, 3.0, -2.0]]), np.array([[1.0, 0.0, -2.0], [0.5, 3.0, -1.0]]))),
          since=8, reference=variadic(np.maximum, "max"), differentiable=(0, 1, 2), outputs=("max",)),
    OpRow("Min", (case(normal(2, 3)), case(normal(2, 3, 4), normal(4), normal(3, 1)),
                  case(np.array([[1.0, 3.0, -2.0]]), np.array([[1.0, 0.0, -2.0], [0.5, 3.0, -1.0]]))),
          since=8, reference=variadic(np.minimum, "min"), differentiable=(0, 1, 2), outputs=("min",)),
    OpRow("ReduceSumSquare", reduce_attribute_cases(), reference=reduction(lambda x, **k: np.sum(x * x, **k), False),
          differentiable=(0,), outputs=("reduced",), gradient_since=7),                    # a broadcast Mul
    OpRow("ReduceSumSquare", reduce_input_cases(), since=18,
          reference=reduction(lambda x, **k: np.sum(x * x, **k), True, np.square), differentiable=(0,),
          outputs=("reduced",)),
    OpRow("ReduceL2", reduce_attribute_cases(), reference=reduction(lambda x, **k: np.sqrt(np.sum(x * x, **k)), False),
          differentiable=(0,), outputs=("reduced",), gradient_since=9),                    # a Where
    OpRow("ReduceL2", reduce_input_cases(), since=18,
          reference=reduction(lambda x, **k: np.sqrt(np.sum(x * x, **k)), True, np.abs), differentiable=(0,),
          outputs=("reduced",)),
    OpRow("Softmax", softmax_cases(11), reference=softmax(False, True), differentiable=(0,), outputs=("output",)),
    OpRow("Softmax", softmax_cases(13), since=13, reference=softmax(False, False), differentiable=(0,),
          outputs=("output",)),
    OpRow("LogSoftmax", softmax_cases(11), reference=softmax(True, True), differentiable=(0,), outputs=("output",)),
    OpRow("LogSoftmax", softmax_cases(13), since=13, reference=softmax(True, False), differentiable=(0,),
          outputs=("output",)),
    OpRow("Flatten", (case(normal(2, 3, 4)), *(case(normal(2, 3, 4), axis=axis) for axis in (0, 1, 2, 3, -1, -2, -3))),
          reference=flatten, differentiable=(0,), outputs=("output",), gradient_since=5),  # its gradient is a Reshape
    OpRow("Reshape", tuple(case(normal(2, 3, 4), int64(*target))
                           for target in ([4, -1], [0, -1], [2, 3, 4], [-1], [0, -1, 2])),
          reference=reshape, differentiable=(0,), outputs=("reshaped",)),
    OpRow("Shape", (case(normal(2, 3, 4)), case(normal()),
                    *(case(normal(2, 3, 4, 5), **bounds, since=15) for bounds in (
                        dict(start=1), dict(start=-2), dict(end=-1), dict(start=1, end=3), dict(start=-9, end=9),
                        dict(start=3, end=1)))),
          reference=shape_of, outputs=("shape",)),
    # structural ops: Constant, ConstantOfShape, Concat, Split, Gather, Tile, Pad, Resize, Upsample, Transpose
    OpRow("Transpose", (case(normal(2, 3, 4), perm=[2, 0, 1]), case(normal(2, 3)), case(normal(2, 1, 3, 2, 2)),
                        case(normal(2, 3, 2, 1, 2), perm=[4, 0, 3, 2, 1]),
                        case(normal(*[2] * 9), perm=[8, 6, 4, 2, 0, 7, 5, 3, 1])),
          reference=lambda i, a: {"transposed": i[0].transpose(a.get("perm"))}, differentiable=(0,),
          outputs=("transposed",)),
    OpRow("Constant", (case(value=np.arange(6.0).reshape(2, 3)), case(value=np.array([3, -1])),
                       case(value_float=1.5, since=12), case(value_floats=[1.0, -2.5], since=12),
                       case(value_int=7, since=12), case(value_ints=[2, 3], since=12)),
          reference=constant, outputs=("output",), output_dtype=constant_dtype),
    OpRow("ConstantOfShape", (case(int64(2, 3)), case(int64(4), value=np.array([1.5])),
                              case(int64(2, 0, 3), value=np.array([2], np.int64)), case(int64())),
          since=9, reference=constant_of_shape, outputs=("output",),
          output_dtype=lambda a: np.asarray(a.get("value", np.zeros(1, np.float32))).dtype),
    OpRow("Concat", (case(normal(2, 3), normal(2, 4), axis=1), case(normal(2, 3), normal(1, 3), normal(3, 3), axis=0),
                     case(normal(2, 3, 4), normal(2, 1, 4), normal(2, 2, 4), axis=-2), case(normal(5), axis=0)),
          reference=lambda i, a: {"concat_result": np.concatenate(i, axis=a.get("axis", 1))},
          differentiable=(0, 1, 2), outputs=("concat_result",), gradient_since=4),
    OpRow("Split", (case(normal(4, 6), outputs=PIECES[:2], axis=1), case(normal(6, 3), outputs=PIECES[:2]),
                    case(normal(2, 7), outputs=PIECES[:3], axis=-1, split=[2, 0, 5]),
                    case(normal(2, 7), outputs=PIECES[:2], axis=1, split=[3, 2, 2])),
          since=2, reference=split(False), differentiable=(0,), outputs=PIECES,
          differentiable_outputs=PIECES[:2]),
    OpRow("Split", (case(normal(4, 6), outputs=PIECES[:2], axis=1), case(normal(6, 3), outputs=PIECES[:2]),
                    case(normal(2, 7), int64(2, 0, 5), outputs=PIECES[:3], axis=-1),
                    case(normal(2, 7), int64(3, 2, 2), outputs=PIECES[:2], axis=1),
                    case(normal(2, 7), outputs=PIECES[:2], axis=1, num_outputs=3, since=18),
                    case(normal(3, 4), outputs=PIECES[:2], num_outputs=2, since=18)),
          since=13, reference=split(True), differentiable=(0,), outputs=PIECES, differentiable_outputs=PIECES[:2]),
    OpRow("Gather", (case(normal(5, 3), int64(0, 4, -1, 4)), case(normal(2, 3, 4), np.array([[2, 0], [1, 1]]), axis=1),
                     case(normal(2, 3, 4), np.array(-2), axis=-1), case(normal(3, 2), np.array([1, 0], np.int32))),
          reference=lambda i, a: {"output": np.take(i[0], i[1], axis=a.get("axis", 0))}, differentiable=(0,),
          outputs=("output",)),
    OpRow("Tile", (case(normal(2, 3), int64(2, 3)), case(normal(2, 1, 3), int64(1, 4, 1)), case(normal(3), int64(1)),
                   case(normal(2, 3), int64(0, 2))),
          since=6, reference=lambda i, a: {"output": np.tile(i[0], tuple(i[1]))}, differentiable=(0,),
          outputs=("output",)),
    OpRow("Pad", tuple(case(normal(2, 3, 4), pads=pads, mode=mode, **extra) for pads, mode, extra in (
              ([0, 1, 2, 0, 2, 1], "constant", {"value": 0.5}), ([0, 0, 2, 1, 1, 1], "reflect", {}),
              ([1, 2, 0, 0, 1, 3], "edge", {}), ([0, -1, 1, 0, 2, -2], "constant", {}))),
          since=2, reference=pad(False), differentiable=(0,), outputs=("output",)),
    OpRow("Pad", (case(normal(2, 3, 4), int64(0, 1, 2, 0, 2, 1), np.array(0.5)),
                  case(normal(2, 3, 4), int64(0, 0, 2, 1, 1, 1), mode="reflect"),
                  case(normal(2, 3, 4), int64(1, 2, 0, 0, 1, 3), mode="edge"),
                  case(normal(2, 3, 4), int64(0, -1, 1, 0, 2, -2)),
                  case(normal(2, 3, 5), int64(0, 0, 6, 0, 0, 7), mode="reflect"),
                  case(normal(2, 3, 4), int64(1, -1, 2, 1), None, int64(2, -2), mode="edge", since=18),
                  case(normal(2, 3, 4), int64(3, 1, 2, 5), None, int64(-1, 1), mode="wrap", since=19)),
          since=11, reference=pad(True), differentiable=(0,), outputs=("output",)),
    OpRow("Upsample", (case(normal(1, 2, 3, 4), scales=[1.0, 1.0, 2.0, 3.0]),
                       case(normal(1, 2, 3, 4), scales=[1.0, 1.0, 1.5, 0.5], mode="linear")),
          since=7, differentiable=(0,)),
    OpRow("Upsample", (case(normal(1, 2, 3, 4), np.array([1.0, 1.0, 2.0, 3.0])),
                       case(normal(1, 2, 3, 4), np.array([1.0, 1.0, 1.5, 0.5]), mode="linear")),
          since=9, differentiable=(0,)),
    OpRow("Resize", (case(normal(1, 2, 3, 4), np.array([1.0, 1.0, 2.0, 3.0])),
                     case(normal(1, 2, 5, 4), np.array([1.0, 1.0, 0.6, 1.5])),
                     case(normal(1, 2, 3, 4), np.array([1.0, 1.0, 1.5, 0.5]), mode="linear")),
          since=10, differentiable=(0,)),
    OpRow("Resize", (*(case(normal(1, 2, 3, 4), EMPTY, np.array([1.0, 1.0, 2.0, 1.5]), mode=mode,
                            coordinate_transformation_mode=coordinates, nearest_mode=nearest)
                       for mode, coordinates, nearest in (
                           ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
                           ("nearest", "align_corners", "round_prefer_ceil"), ("nearest", "half_pixel", "ceil"),
                           ("linear", "half_pixel", "floor"), ("linear", "pytorch_half_pixel", "floor"),
                           ("linear", "align_corners", "floor"), ("linear", "asymmetric", "floor"))),
                     case(normal(1, 2, 5, 4), None, np.array([1.0, 1.0, 0.6, 0.7]), mode="linear"),
                     case(normal(2, 3, 4), None, None, int64(2, 1, 7), mode="linear",
                          coordinate_transformation_mode="pytorch_half_pixel"),
                     case(normal(1, 2, 3, 4), None, None, int64(5, 2), mode="nearest", axes=[2, 3], since=18),
                     case(normal(1, 2, 3, 4), None, np.array([1.7, 0.6]), mode="linear", axes=[-1, 2], since=18),
                     case(normal(1, 2, 3, 4), None, np.array([1.7, 0.6]), mode="linear", axes=[-1, 2],
                          coordinate_transformation_mode="half_pixel_symmetric", since=19)),
          since=11, differentiable=(0,)),
    OpRow("ReduceSum", (case(normal(2, 3, 4), axes=[0, 2]), case(normal(2, 3, 4), axes=[1], keepdims=0),
                        case(normal(2, 3))), reference=reduction(np.sum, False), differentiable=(0,),
          outputs=("reduced",), gradient_since=8),                                           # an Expand
    OpRow("ReduceSum", (case(normal(2, 3, 4), int64(0, -1), keepdims=0), case(normal(2, 3, 4), int64(1)),
                        case(normal(2, 3)), case(normal(2, 3), int64(), noop_with_empty_axes=1)),
          since=13, reference=reduction(np.sum, True), differentiable=(0,), outputs=("reduced",)),
    OpRow("SumToShape", (case(normal(2, 3, 4), int64(3, 1)), case(normal(2, 3), int64(3)),
                         case(normal(2, 3), int64())),
          domain=MS, reference=lambda i, a: {"Y": _sum_to(i[0], tuple(i[1]))}),
    OpRow("Gemm", (case(normal(3, 4), normal(4, 5), normal(5), alpha=0.7, beta=1.5),
                   case(normal(4, 3), normal(4, 5), normal(5), transA=1, alpha=0.7, beta=1.5),
                   case(normal(3, 4), normal(5, 4), normal(5), transB=1, alpha=0.7, beta=1.5),
                   case(normal(4, 3), normal(5, 4), normal(5), transA=1, transB=1, alpha=0.7, beta=1.5),
                   case(normal(3, 4), normal(4, 5), since=11),        # C is optional from opset 11
                   *(case(normal(3, 4), normal(4, 5), c) for c in (normal(1), normal(3, 1), normal(3, 5))),
                   case(normal(3, 4), normal(4, 5), normal(3, 1), beta=-1.0)),
          reference=gemm, differentiable=(0, 1, 2)),
    OpRow("MatMul", (case(normal(3, 4), normal(4, 5)), case(normal(2, 3, 4), normal(4, 5)),
                     case(normal(2, 3, 4), normal(2, 4, 5)), case(normal(1, 3, 4), normal(2, 4, 5)),
                     case(normal(2, 1, 2, 3), normal(3, 3, 2)), case(normal(3), normal(3, 2), gradient=False)),
          reference=lambda i, a: {"Y": np.matmul(*i)}, differentiable=(0, 1)),
    OpRow("FusedGemm", (sample(MS, "FusedGemm"), case(normal(2, 3), normal(3, 4), normal(4), activation="Relu"),
                        case(normal(2, 3), normal(3, 4), activation="Tanh")), domain=MS,
          reference=_fused(gemm, lambda a: a.get("activation_alpha", f32(0.01)))),
    OpRow("Conv", (case(normal(1, 2, 5), normal(3, 2, 3), normal(3)),
                   case(normal(1, 4, 5, 5), normal(4, 2, 3, 2), normal(4), **_CONV_2D),
                   case(normal(1, 2, 3, 4, 3), normal(2, 2, 2, 2, 2), strides=[1, 2, 1]),
                   case(normal(1, 2, 5, 4), normal(2, 1, 3, 3), auto_pad="SAME_UPPER", group=2)),
          reference=conv, differentiable=(0, 1, 2)),
    OpRow("ConvTranspose", (case(normal(1, 2, 4), normal(2, 3, 3), normal(3)),
                            case(normal(1, 4, 3, 3), normal(4, 1, 3, 2), normal(2), strides=[2, 1], pads=[1, 0, 0, 1],
                                 output_padding=[1, 0], group=2),
                            case(normal(1, 2, 2, 3, 2), normal(2, 1, 2, 2, 2), strides=[1, 2, 1])),
          differentiable=(0, 1, 2)),
    OpRow("FusedConv", (sample(MS, "FusedConv"),
                        case(normal(1, 2, 5), normal(3, 2, 3), normal(3), activation="Relu"),
                        case(normal(1, 2, 4, 4), normal(2, 2, 3, 3), activation="Sigmoid", pads=[1, 1, 1, 1]),
                        case(normal(1, 2, 4, 4), normal(3, 2, 3, 3), normal(3), activation="Clip",
                             activation_params=[-0.5, 0.5])),
          domain=MS, reference=_fused(conv, lambda a: a["activation_params"] if a.get("activation") == "Clip"
                                      else (a.get("activation_params") or [f32(0.01)])[0])),
    OpRow("MaxPool", (case(normal(1, 2, 5, 4), kernel_shape=[2, 2]),
                      case(normal(1, 2, 7), kernel_shape=[3], strides=[2]), case(normal(1, 2, 5, 5), **_POOL_2D),
                      case(normal(1, 2, 5, 5), kernel_shape=[2, 2], dilations=[2, 1], ceil_mode=1, since=10),
                      case(normal(1, 1, 3, 4, 3), kernel_shape=[2, 2, 2], storage_order=1, since=8)),
          reference=pool("max"), differentiable=(0,), differentiable_outputs=("Y",), outputs=("Y", "Indices")),
    OpRow("AveragePool", (case(normal(1, 2, 5, 4), kernel_shape=[2, 2]),
                          case(normal(1, 2, 7), kernel_shape=[3], strides=[2]), case(normal(1, 2, 5, 5), **_POOL_2D),
                          case(normal(1, 2, 5, 5), **_POOL_2D, count_include_pad=1, since=7),
                          case(normal(1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, since=10),
                          case(normal(1, 2, 6, 5), kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 0], since=19)),
          reference=pool("avg"), differentiable=(0,)),
    OpRow("GlobalAveragePool", (case(normal(2, 3, 4, 5)), case(normal(1, 2, 5)), case(normal(1, 2, 2, 3, 4))),
          reference=global_pool(np.mean), differentiable=(0,)),
    OpRow("GlobalMaxPool", (case(normal(2, 3, 4, 5)), case(normal(1, 2, 5)), case(normal(1, 2, 2, 3, 4))),
          reference=global_pool(np.max), differentiable=(0,)),
    OpRow("BatchNormalization", batchnorm9_cases(), since=9,
          reference=lambda inputs, attrs: batchnorm(inputs, {**attrs, "training_mode": 1}),
          differentiable=(0, 1, 2), differentiable_outputs=("Y",), outputs=("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")),
    OpRow("BatchNormalization", batchnorm_cases(),
          reference=batchnorm, differentiable=(0, 1, 2), differentiable_outputs=("Y",), since=14,
          outputs=("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")),
    # onnxruntime-training's gradient graphs
    OpRow("BatchNormInternal", tuple(c for c in batchnorm_cases() if c.attrs.get("training_mode")), domain=MS,
          reference=batchnorm, outputs=("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")),
    # per-sample normalisations
    OpRow("LayerNormalization", (sample("", "LayerNormalization"), case(normal(3, 5), normal(5), normal(5)),
                                 case(normal(2, 3, 4), normal(3, 4), None, axis=1, epsilon=1e-3),
                                 case(normal(2, 1, 3), normal(3), normal(3), axis=1, outputs=["Y"])),
          since=17, reference=layer_norm, differentiable=(0, 1, 2), differentiable_outputs=("Y",),
          outputs=("Y", "Mean", "InvStdDev")),
    OpRow("LayerNormalization", (sample(MS, "LayerNormalization"), case(normal(3, 5), normal(5), normal(5))),
          domain=MS, reference=layer_norm, differentiable=(0, 1, 2), differentiable_outputs=("Y",),
          outputs=("Y", "Mean", "InvStdDev")),
    OpRow("InstanceNormalization", (sample("", "InstanceNormalization"),
                                    case(normal(2, 3, 5), normal(3), normal(3), epsilon=1e-3),
                                    case(normal(1, 2, 2, 3, 2), normal(2), normal(2))),
          since=6, reference=group_norm(True), differentiable=(0, 1, 2), differentiable_outputs=("output",),
          outputs=("output", "mean", "inv_std_dev")),
    OpRow("GroupNormalization", (sample("", "GroupNormalization", since=21),
                                 case(normal(2, 6, 3), normal(3), normal(3), num_groups=3),
                                 case(normal(2, 4, 3, 2), normal(4), normal(4), num_groups=4),
                                 case(normal(2, 6, 3), normal(6), normal(6), num_groups=3, since=21),
                                 case(normal(2, 4, 2, 3), normal(4), normal(4), num_groups=2, since=21)),
          since=18, reference=lambda i, a: group_norm(i[1].size == i[0].shape[1])(i, a), differentiable=(0, 1, 2),
          differentiable_outputs=("Y",), outputs=("Y", "mean", "inv_std_dev")),
    OpRow("Dropout", (case(normal(3, 4), np.array(0.3), np.array(True), seed=1, random=True),
                      case(normal(3, 4), np.array(0.3), np.array(False)),
                      case(normal(3, 4), np.array(0.0), np.array(True)), case(normal(3, 4))),
          reference=dropout_identity, differentiable=(0,), differentiable_outputs=("output",),
          outputs=("output", "mask")),
    OpRow("SoftmaxCrossEntropyLoss", sce_cases(),
          reference=sce, differentiable=(0,), differentiable_outputs=("output",), outputs=("output", "log_prob")),
    OpRow("MSELoss", (case(normal(3, 4), normal(3, 4)), case(normal(3, 4), normal(3, 4), reduction="sum"),
                      case(normal(5), normal(5), reduction="none")),
          domain=MS, reference=mse, differentiable=(0,), outputs=("loss",)),

    OpRow("Log", (case(positive(2, 3)), case(positive(5, low=0.1, high=10.0))), since=6, reference=unary(np.log),
          differentiable=(0,), outputs=("output",), gradient_since=7),                       # a Div
    OpRow("Exp", (case(normal(2, 3)), case(normal())), since=6, reference=unary(np.exp), differentiable=(0,),
          outputs=("output",), gradient_since=7),                                            # a Mul
    OpRow("Sqrt", (case(positive(2, 3)), case(positive(5, low=0.1, high=10.0))), since=6, reference=unary(np.sqrt),
          differentiable=(0,), outputs=("output",), gradient_since=7),                       # a Div
    OpRow("Abs", (case(nonzero(2, 3)), case(nonzero())), since=6, reference=unary(np.abs), differentiable=(0,),
          outputs=("output",), gradient_since=9),                                            # a Sign
    OpRow("Sign", (case(normal(2, 3)), case(np.array([-2.0, 0.0, 3.0, -0.0]))), since=9, reference=unary(np.sign),
          outputs=("output",)),
    OpRow("Pow", (case(positive(2, 3), normal(2, 3)), case(positive(2, 3, 4), normal(4)),
                  case(positive(2, 3), np.array(2.0)), case(positive(3, 1), normal(1, 4)),
                  case(positive(), normal(2, 3))),
          since=7, reference=binary(np.power, "Z"), differentiable=(0, 1), outputs=("Z",)),
    OpRow("ReduceMean", reduce_attribute_cases(), reference=reduction(np.mean, False), differentiable=(0,),
          outputs=("reduced",), gradient_since=8),                                           # an Expand
    OpRow("ReduceMean", reduce_input_cases(), since=18, reference=reduction(np.mean, True), differentiable=(0,),
          outputs=("reduced",)),
    OpRow("ReduceMax", reduce_attribute_cases() + (case(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]), axes=[1]),),
          reference=reduction(np.max, False), differentiable=(0,), outputs=("reduced",),
          gradient_since=7),                                         # an Equal; the last case's tie shares dY
    OpRow("ReduceMax", reduce_input_cases(), since=18, reference=reduction(np.max, True), differentiable=(0,),
          outputs=("reduced",)),
    OpRow("Clip", (case(normal(3, 4), min=-0.5, max=0.5), case(normal(3, 4), min=-0.5), case(normal(3, 4), max=0.2),
                   case(normal(3, 4)), case(normal(5), min=0.5, max=-0.5)),
          since=6, reference=clip(False), differentiable=(0,), outputs=("output",), gradient_since=9),  # a Where
    OpRow("Clip", (case(normal(3, 4), np.array(-0.5), np.array(0.5)), case(normal(3, 4), np.array(-0.5)),
                   case(normal(3, 4), None, np.array(0.2)), case(normal(3, 4)),
                   case(normal(5), np.array(0.5), np.array(-0.5)),
                   case(normal(2, 3), np.array([-0.3]), np.array([0.3]))),
          since=11, reference=clip(True), differentiable=(0,), outputs=("output",)),
    OpRow("Where", (case(booleans(2, 3), normal(2, 3), normal(2, 3)), case(booleans(2, 3), normal(3), normal()),
                    case(booleans(3, 1), normal(1, 4), normal(3, 4)), case(booleans(4), normal(2, 3, 1), normal(3, 4)),
                    case(booleans(), normal(2, 3), normal(3))),
          since=9, reference=lambda i, a: {"Y": np.where(*i)}, differentiable=(1, 2)),
    OpRow("Slice", (case(normal(4, 5, 6), starts=[1, 0], ends=[3, 4], axes=[0, 2]),
                    case(normal(4, 5), starts=[-3], ends=[_INT64_MAX]),
                    case(normal(4, 5), starts=[1], ends=[-1], axes=[1]),
                    case(normal(4, 5), starts=[-9, 2], ends=[9, 99]), case(normal(4, 5), starts=[0, 3], ends=[1, 3])),
          reference=slice_(False), differentiable=(0,), outputs=("output",)),
    OpRow("Slice", (case(normal(4, 5, 6), int64(1, 0), int64(3, 4), int64(0, 2)),
                    case(normal(4, 5, 6), int64(1, -1), int64(3, 0), int64(0, 2), int64(1, -2)),
                    case(normal(4, 5), int64(-1), int64(_INT64_MIN), int64(1), int64(-1)),
                    case(normal(4, 5), int64(-3), int64(_INT64_MAX)),
                    case(normal(4, 5), int64(-9, 9), int64(9, -9), int64(0, 1), int64(2, -3)),
                    case(normal(4, 5, 3), int64(1), int64(-1), int64(-2), since=11),
                    case(normal(4, 5), int64(0, 3), int64(1, 3)),
                    case(normal(4, 5), *(np.array(v, np.int32) for v in ([1], [4])), None,
                         np.array([2], np.int32))),
          since=10, reference=slice_(True), differentiable=(0,), outputs=("output",)),
    OpRow("OneHot", (case(labels(2, 3, classes=4), int64(4), np.array([0.0, 1.0])),
                     *(case(np.array([[0, 3, -1], [5, -4, 2]]), np.array(4), np.array([-1.0, 3.0]), axis=axis)
                       for axis in (0, 1, 2, -1, -3)),
                     case(np.array([2, 0], np.int32), np.array([3], np.int32), np.array([0.5, 2.0]))),
          since=9, reference=one_hot(False), outputs=("output",)),
    OpRow("OneHot", (case(labels(2, 3, classes=4), int64(4), np.array([0.0, 1.0])),
                     *(case(np.array([[0, 3, -1], [5, -4, 2]]), np.array(4), np.array([-1.0, 3.0]), axis=axis)
                       for axis in (0, 1, 2, -1, -3)),
                     case(np.array([2, -3], np.int32), np.array([3], np.int32), np.array([0.5, 2.0]))),
          since=11, reference=one_hot(True), outputs=("output",)),
    OpRow("NegativeLogLikelihoodLoss", nll_cases(), since=12, reference=nll, differentiable=(0,), outputs=("loss",)),
    OpRow("Unsqueeze", (case(normal(2, 3), axes=[0]), case(normal(2, 3), axes=[1, 3]), case(normal(), axes=[0, 1]),
                        case(normal(2, 3), axes=[-1], since=11), case(normal(2, 3), axes=[3, 0, -3], since=11)),
          reference=unsqueeze(False), differentiable=(0,), outputs=("expanded",), gradient_since=5),  # a Reshape
    OpRow("Unsqueeze", (case(normal(2, 3), int64(0)), case(normal(2, 3), int64(1, 3)), case(normal(), int64(0, -1)),
                        case(normal(2, 3), int64(3, 0, -3))),
          since=13, reference=unsqueeze(True), differentiable=(0,), outputs=("expanded",)),
    OpRow("Squeeze", (case(normal(2, 1, 3, 1), axes=[1]), case(normal(2, 1, 3, 1), axes=[1, 3]), case(normal(1, 3, 1)),
                      case(normal(1, 1)), case(normal(2, 1, 3, 1), axes=[-1, 1], since=11)),
          reference=squeeze(False), differentiable=(0,), outputs=("squeezed",), gradient_since=5),  # a Reshape
    OpRow("Squeeze", (case(normal(2, 1, 3, 1), int64(1)), case(normal(2, 1, 3, 1), int64(-1, 1)),
                      case(normal(1, 3, 1)), case(normal(1, 3, 1), None), case(normal(1, 1))),
          since=13, reference=squeeze(True), differentiable=(0,), outputs=("squeezed",)),
    OpRow("Expand", (case(normal(3, 1), int64(2, 3, 4)), case(normal(3), int64(2, 1)),
                     case(normal(2, 1, 4), int64(3, 1)), case(normal(), int64(2, 3)), case(normal(2, 3), int64(1)),
                     case(normal(2, 3), int64())),
          since=8, reference=lambda i, a: {"Y": np.broadcast_to(i[0], np.broadcast_shapes(i[0].shape, tuple(i[1])))},
          differentiable=(0,)),
    OpRow("Size", (case(normal(2, 3, 4)), case(normal()), case(np.zeros((3, 0)))),
          reference=lambda i, a: {"size": np.array(i[0].size, dtype=np.int64)}, outputs=("size",)),
    OpRow("Equal", comparison_cases(), since=7, reference=binary(np.equal), outputs=("C",)),
    OpRow("Greater", comparison_cases(), since=7, reference=binary(np.greater), outputs=("C",)),
    OpRow("Less", comparison_cases(), since=7, reference=binary(np.less), outputs=("C",)),
    OpRow("GreaterOrEqual", comparison_cases(), since=12, reference=binary(np.greater_equal), outputs=("C",)),
    OpRow("LessOrEqual", comparison_cases(), since=12, reference=binary(np.less_equal), outputs=("C",)),
    OpRow("And", (case(booleans(2, 3), booleans(2, 3)), case(booleans(2, 3), booleans(3)),
                  case(booleans(3, 1), booleans(1, 4)), case(booleans(), booleans(2))),
          since=7, reference=binary(np.logical_and), outputs=("C",)),
    OpRow("Cast", (*(case(normal(2, 3, scale=3), to=to, gradient=to == 11) for to in CAST_TO),
                   case(normal(4), to=10, saturate=1, since=19, gradient=False)),  # saturate: float8 targets only
          since=6, reference=lambda i, a: {"output": i[0].astype(CAST_TO[a["to"]])},
          output_dtype=lambda a: CAST_TO[a["to"]], outputs=("output",), differentiable=(0,)),

    # gradient ops: checked through their forward op's gradient, and against a reference where one is short
    OpRow("ReluGrad", (case(normal(2, 5), normal(2, 5)),), domain=MS, reference=activation_grad("Relu"),
          outputs=("dX",), gradient_of=("", "Relu")),
    OpRow("SigmoidGrad", (case(normal(2, 5), positive(2, 5, low=0.0, high=1.0)),), domain=MS,
          reference=activation_grad("Sigmoid"), outputs=("dX",), gradient_of=("", "Sigmoid")),
    OpRow("TanhGrad", (case(normal(2, 5), positive(2, 5, low=-1.0, high=1.0)),), domain=MS,
          reference=activation_grad("Tanh"), outputs=("dX",), gradient_of=("", "Tanh")),
    OpRow("LeakyReluGrad", (case(normal(2, 5), normal(2, 5)), case(normal(7), normal(7), alpha=0.2)), domain=MS,
          reference=activation_grad("LeakyRelu"), outputs=("dX",), gradient_of=("", "LeakyRelu")),
    OpRow("QuickGeluGrad", (case(normal(2, 5), normal(2, 5)), case(normal(7), normal(7), alpha=-0.3)), domain=MS,
          reference=activation_grad("QuickGelu"), outputs=("dX",), gradient_of=(MS, "QuickGelu")),
    # gradient ops of the pointwise activations of exported models
    *(OpRow(f"{op}Grad", (case(normal(3, 5), normal(3, 5, scale=4)), *extra), domain=MS, reference=pointwise_grad(op),
            outputs=("dX",), gradient_of=("", op) if op != "FastGelu" else (MS, op))
      for op, extra in (("HardSigmoid", (case(normal(7), normal(7, scale=4), alpha=0.3, beta=0.4),)),
                        ("HardSwish", (case(normal(7), np.array([-4.0, -3.0, -1.5, 0.0, 2.0, 3.0, 5.0])),)),
                        ("Softplus", ()), ("Elu", (case(normal(7), normal(7), alpha=0.3),)),
                        ("Selu", (case(normal(7), normal(7), alpha=1.5, gamma=0.8),)), ("Gelu", ()), ("FastGelu", ()))),
    OpRow("BiasGeluGrad_dX", (case(normal(3, 5), normal(3, 5, scale=4), normal(5)),
                              case(normal(2, 3, 4), normal(2, 3, 4, scale=4), normal(4))), domain=MS,
          reference=lambda i, a: {"dX": POINTWISE["Gelu"][1](i[0], i[1] + i[2], a)}, outputs=("dX",),
          gradient_of=(MS, "BiasGelu")),
    OpRow("SoftmaxGrad", (case(_softmax_pair((3, 4), 1, False, True), axis=1),
                          case(_softmax_pair((2, 3, 4), 2, False, True), axis=2)), domain=MS,
          reference=softmax_grad(False, True), outputs=("dX",), gradient_of=("", "Softmax")),
    OpRow("SoftmaxGrad_13", (case(_softmax_pair((3, 4), -1, False, False), axis=-1),
                             case(_softmax_pair((2, 3, 4), 1, False, False), axis=1)), domain=MS,
          reference=softmax_grad(False, False), outputs=("dX",), gradient_of=("", "Softmax")),
    OpRow("LogSoftmaxGrad", (case(_softmax_pair((3, 4), 1, True, True), axis=1),
                             case(_softmax_pair((2, 3, 4), 2, True, True), axis=2)), domain=MS,
          reference=softmax_grad(True, True), outputs=("dX",), gradient_of=("", "LogSoftmax")),
    OpRow("LogSoftmaxGrad_13", (case(_softmax_pair((3, 4), -1, True, False), axis=-1),
                                case(_softmax_pair((2, 3, 4), 1, True, False), axis=1)), domain=MS,
          reference=softmax_grad(True, False), outputs=("dX",), gradient_of=("", "LogSoftmax")),
    OpRow("ConvGrad", (sample(MS, "ConvGrad"),
                       *(case(_conv_grad_inputs("Conv", (1, 4, 5, 5), (4, 2, 3, 2), _CONV_2D), **_CONV_2D,
                              outputs=outputs) for outputs in (None, ["dW"])),
                       case(_conv_grad_inputs("Conv", (1, 2, 5), (3, 2, 3), {}), outputs=["dX", "dB"])),
          domain=MS, outputs=("dX", "dW", "dB"), gradient_of=("", "Conv")),
    OpRow("ConvTransposeGrad", (sample(MS, "ConvTransposeGrad"),
                                case(_conv_grad_inputs("ConvTranspose", (1, 2, 4), (2, 3, 3), {}), outputs=["dW"])),
          domain=MS, outputs=("dX", "dW", "dB"), gradient_of=("", "ConvTranspose")),
    OpRow("MaxPoolGrad", (sample("", "MaxPoolGrad", since=9),
                          case(_max_pool_grad_inputs((1, 2, 5, 5), _POOL_2D), **_POOL_2D,
                               output_shapes={"dX": (1, 2, 5, 5)})),
          since=9, outputs=("dX",), gradient_of=("", "MaxPool")),
    OpRow("AveragePoolGrad", (sample("", "AveragePoolGrad", since=9),
                              case(normal(1, 2, 3, 5), **_POOL_2D, count_include_pad=1,
                                   output_shapes={"dX": (1, 2, 5, 5)})),
          since=9, outputs=("dX",), gradient_of=("", "AveragePool")),
    OpRow("GlobalAveragePoolGrad", (case(normal(2, 3, 1, 1), int64(2, 3, 4, 5)),
                                    case(normal(1, 2, 1), int64(1, 2, 5))),
          domain=MS, outputs=("dX",), gradient_of=("", "GlobalAveragePool"),
          reference=lambda i, a: {"dX": np.broadcast_to(i[0] / np.prod(i[1][2:]), tuple(i[1]))}),
    OpRow("GlobalMaxPoolGrad", (case(normal(2, 3, 1, 1), normal(2, 3, 4, 5)), case(normal(1, 2, 1), normal(1, 2, 5))),
          domain=MS, outputs=("dX",), gradient_of=("", "GlobalMaxPool"),
          reference=lambda i, a: {"dX": i[0] * (i[1] == global_pool(np.max)([i[1]], a)["Y"])}),
    OpRow("BatchNormalizationGrad", (case(_batchnorm_grad_inputs((2, 3, 4), True), training_mode=1),
                                     case(_batchnorm_grad_inputs((2, 3, 2, 2), False))),
          domain=MS, outputs=("dX", "dscale", "dbias"), gradient_of=("", "BatchNormalization")),
    # per-sample normalisations
    OpRow("LayerNormalizationGrad",
          (sample(MS, "LayerNormalizationGrad"),
           case(_sample_norm_grad_inputs(layer_norm, (2, 3, 4), (3, 4), {"axis": 1}), axis=1),
           case(_sample_norm_grad_inputs(layer_norm, (3, 5), (5,), {}), outputs=["dX"])),
          domain=MS, outputs=GRAD_OUTPUTS, gradient_of=("", "LayerNormalization")),
    OpRow("InstanceNormalizationGrad",
          (sample(MS, "InstanceNormalizationGrad"),
           case(_sample_norm_grad_inputs(group_norm(True), (2, 3, 5), (3,), {}), outputs=["dscale", "dbias"])),
          domain=MS, outputs=GRAD_OUTPUTS, gradient_of=("", "InstanceNormalization")),
    OpRow("GroupNormalizationGrad",
          (sample(MS, "GroupNormalizationGrad"),
           case(_sample_norm_grad_inputs(group_norm(True), (2, 6, 3), (6,), {"num_groups": 3}), num_groups=3),
           case(_sample_norm_grad_inputs(group_norm(False), (2, 4, 2, 2), (2,), {"num_groups": 2}), num_groups=2)),
          domain=MS, outputs=GRAD_OUTPUTS, gradient_of=("", "GroupNormalization")),
    OpRow("DropoutGrad", (sample(MS, "DropoutGrad"),
                          case(normal(3, 4), lambda rng: rng.random((3, 4)) > 0.3, np.array(0.3), np.array(True)),
                          case(normal(3, 4), np.ones((3, 4), bool), np.array(0.3), np.array(False))),
          domain=MS, reference=dropout_grad, outputs=("dX",), gradient_of=("", "Dropout")),
    OpRow("SoftmaxCrossEntropyLossGrad", (case(_sce_grad_inputs(5, 3, "mean", True)),
                                          case(_sce_grad_inputs(4, 3, "sum", False), ignore_index=1, reduction="sum"),
                                          case(_sce_grad_inputs(4, 3, "none", True), reduction="none")),
          domain=MS, reference=sce_grad, outputs=("d_logits",), gradient_of=("", "SoftmaxCrossEntropyLoss")),
    OpRow("MSELossGrad", (case(normal(), normal(3, 4), normal(3, 4)),
                          case(normal(5), normal(5), normal(5), reduction="none"),
                          case(normal(), normal(3, 4), normal(3, 4), reduction="sum")),
          domain=MS, reference=mse_grad, outputs=("d_prediction",), gradient_of=(MS, "MSELoss")),
    OpRow("SliceGrad", (sample(MS, "SliceGrad"), case(_slice_grad_inputs((4, 5), [-1], [_INT64_MIN], [1], [-1])),
                        case(_slice_grad_inputs((4, 5, 6), [1, 0], [3, 4], [0, 2])),
                        case(_slice_grad_inputs((4, 5), [-9, 2], [9, 99])),
                        case(_slice_grad_inputs((2, 8, 3, 3), [2], [5], [1])),
                        case(_slice_grad_inputs((2, 8, 3), [-3], [100], [-2]))),
          domain=MS, reference=slice_grad, outputs=("dX",), gradient_of=("", "Slice")),
    # structural ops' gradients: GatherGrad, PadGrad, ResizeGrad
    OpRow("GatherGrad", (sample(MS, "GatherGrad"), case(_gather_grad_inputs((5, 3), [0, 4, -1, 4], 0)),
                         case(_gather_grad_inputs((2, 3, 4), [[2, 0], [1, 1]], 1), axis=1),
                         case(_gather_grad_inputs((2, 3, 4), -2, 2), axis=-1)),
          domain=MS, reference=gather_grad, outputs=("dX",), gradient_of=("", "Gather")),
    OpRow("PadGrad", (sample(MS, "PadGrad"), case(normal(2, 6, 8), int64(0, 0, 2, 0, 1, 3), mode="reflect"),
                      case(normal(3, 6, 5), int64(1, 2, 0, 0, 1, 3), mode="edge"),
                      case(normal(2, 6, 9), int64(1, 3, 2, 1), int64(2, -2), mode="wrap"),
                      case(normal(2, 2, 3), int64(0, -1, 1, 0, 2, -2))),
          domain=MS, outputs=("dX",), gradient_of=("", "Pad")),
    OpRow("ResizeGrad", (sample(MS, "ResizeGrad"),
                         case(_resize_grad_inputs((1, 2, 3, 4), (1, 2, 6, 6), [1.0, 1.0, 2.0, 1.5]),
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                         case(_resize_grad_inputs((1, 2, 5, 4), (1, 2, 3, 2)), mode="linear",
                              coordinate_transformation_mode="align_corners"),
                         case(_resize_grad_inputs((1, 2, 3, 4), (1, 2, 5, 2), [1.7, 0.6]), mode="linear",
                              axes=[2, 3]),
                         case(_resize_grad_inputs((1, 2, 3, 4), (1, 2, 6, 2), [1.0, 1.0, 2.0, 0.6]),
                              nearest_mode="simple")),
          domain=MS, outputs=("dX",), gradient_of=("", "Resize")),
    OpRow("NegativeLogLikelihoodLossGrad", (sample(MS, "NegativeLogLikelihoodLossGrad"),
                                            case(_nll_grad_inputs((5, 3), "mean", True)),
                                            case(_nll_grad_inputs((4, 3, 2), "sum", False), reduction="sum",
                                                 ignore_index=1),
                                            case(_nll_grad_inputs((4, 3, 2, 2), "none", True), reduction="none"),
                                            case(_nll_grad_inputs((4, 3), "mean", False), ignore_index=2)),
          domain=MS, reference=nll_grad, outputs=("dX",), gradient_of=("", "NegativeLogLikelihoodLoss")),
    OpRow("Scale", (case(normal(2, 3), np.array(4.0)), case(normal(2, 3), np.array(4.0), scale_down=1),
                    case(normal(), np.array([-0.5]))),
          domain=MS, reference=lambda i, a: {"output": i[0] / i[1].reshape(()) if a.get("scale_down") else
                                             i[0] * i[1].reshape(())},
          outputs=("output",), gradient_of=("", "ReduceMean")),

    # ops of the fusion pass, against the unfused arithmetic
    OpRow("ActivationGradBias", tuple(case(normal(3, 4), normal(3, 4), activation=act) for act in
                                      ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish")) +
          (case(normal(2, 3, 2, 2), normal(2, 3, 2, 2, scale=4.0), activation="HardSwish"),) +
          (case(normal(2, 3, 2, 2), normal(2, 3, 2, 2), activation="LeakyRelu", activation_alpha=0.2),),
          domain=FUSED, reference=activation_grad_bias, outputs=("dX", "dB")),
    OpRow("MaxPoolActivationGrad", (case(normal(2, 3, 2, 2), normal(2, 3, 4, 4), activation="Relu",
                                         kernel_shape=[2, 2]),
                                    case(normal(1, 2, 3), normal(1, 2, 6), activation="Tanh", kernel_shape=[2])),
          domain=FUSED, outputs=("dX", "dB")),
    OpRow("GlobalAveragePoolActivationGrad", (case(normal(2, 3, 1), normal(2, 3, 4), activation="Relu"),
                                              case(normal(1, 2, 1, 1), normal(1, 2, 3, 2), activation="Sigmoid"),
                                              case(normal(2, 2, 1), normal(2, 2, 5), activation="HardSwish")),
          domain=FUSED, outputs=("dX", "dB")),
    OpRow("GlobalAveragePoolGradAdd", (sample(FUSED, "GlobalAveragePoolGradAdd"),
                                       case(normal(2, 3, 1), normal(2, 3, 5)),
                                       case(normal(1, 2, 1, 1, 1), normal(1, 2, 2, 3, 2))),
          domain=FUSED, outputs=("dX",),
          reference=lambda i, a: {"dX": i[1] + i[0] / np.prod(i[1].shape[2:])}),
    OpRow("ClipGrad", (sample(FUSED, "ClipGrad"),
                       case(normal(3, 4), small_integers(3, 4), np.array(-1.0), np.array(1.0)),
                       case(normal(2, 3, 2, 2), small_integers(2, 3, 2, 2), np.array([0.0])),
                       case(normal(5), small_integers(5), None, np.array(1.0)), case(normal(2, 3), normal(2, 3)),
                       case(normal(4), small_integers(4), np.array(1.0), np.array(-1.0))),
          domain=FUSED, reference=clip_grad, outputs=("dX",)),
    OpRow("Linear", (sample(FUSED, "Linear"), case(normal(2, 3, 5, 4), normal(6, 4), normal(6)),
                     case(normal(7, 16), normal(8, 16)), case(normal(300, 8), normal(16, 8), normal(16), normal(16)),
                     case(normal(3, 5, 4), normal(6, 4), None, normal(6))),
          domain=FUSED, reference=linear, differentiable=(0, 1, 2, 3)),
    OpRow("LinearGrad", (sample(FUSED, "LinearGrad"), case(normal(2, 3, 5, 6), normal(2, 3, 5, 4), normal(6, 4)),
                         case(normal(300, 16), normal(300, 8), normal(16, 8), normal(16), normal(16)),
                         case(normal(3, 5, 6), normal(3, 5, 4), normal(6, 4), None, normal(6))),
          domain=FUSED, reference=linear_grad, outputs=("dX", "dW", "dB", "dS"), gradient_of=(FUSED, "Linear")),
    OpRow("MulGrad", (sample(FUSED, "MulGrad"), case(normal(2, 3, 4), normal(2, 3, 4), normal(3, 1)),
                      case(normal(3, 17), normal(3, 17), normal(17)),
                      case(normal(2, 3), normal(2, 3), normal(2, 3)),
                      case(normal(2, 3), normal(3), normal(2, 1)), case(normal(4, 2), normal(4, 2), normal())),
          domain=FUSED, reference=mul_grad, outputs=("dA", "dB")),
    OpRow("BatchNormActivationGrad", (sample(FUSED, "BatchNormActivationGrad"),
                                      case(normal(2, 3, 4), normal(2, 3, 4), normal(2, 3, 4), normal(3), normal(3),
                                           positive(3), activation="Relu"),
                                      case(normal(3, 2, 5, 5), normal(3, 2, 5, 5, scale=4.0), normal(3, 2, 5, 5),
                                           normal(2), normal(2), positive(2), activation="HardSwish", training_mode=1),
                                      case(normal(4, 5), normal(4, 5), normal(4, 5), normal(5), normal(5), positive(5),
                                           activation="Relu", training_mode=1),
                                      case(normal(2, 3, 3), small_integers(2, 3, 3), normal(2, 3, 3), normal(3),
                                           normal(3), positive(3), activation="Clip", activation_params=[-1.0, 1.0],
                                           training_mode=1)),
          domain=FUSED, reference=batch_norm_activation_grad, outputs=("dX", "dscale", "dbias")),
    OpRow("BatchNormFold", (case(normal(4, 2, 3, 3), normal(4), normal(4), normal(4), positive(4)),
                            case(normal(3, 1, 2), normal(3), normal(3), normal(3), positive(3), normal(3), epsilon=0.1)),
          domain=FUSED, reference=batch_norm_fold, outputs=("W_folded", "B_folded")),
    OpRow("SoftmaxCrossEntropyLossWithGrad", (case(normal(5, 3), labels(5), normal(), positive(3)),
                                              case(normal(4, 3), labels(4), normal(4), reduction="none"),
                                              case(normal(4, 3), labels(4), normal(), reduction="sum", ignore_index=2)),
          domain=FUSED, reference=sce_with_grad, outputs=("output", "d_logits")),

    # data parallelism: the fused gradient buffer and its all-reduce (outside an MPI world: a world of one)
    OpRow("ConcatFlat", (case(normal(2, 3), normal(4)), case(normal(3), normal(2, 2), normal(1), scale=0.5)),
          domain=MINITRAIN, outputs=("flat",),
          reference=lambda i, a: {"flat": np.concatenate([x.ravel() for x in i]) * a.get("scale", 1.0)}),
    OpRow("SliceFlat", (case(normal(10), offset=2, shape=[2, 3]), case(normal(5), offset=0, shape=[5]),
                        case(normal(4), offset=4, shape=[0, 2])),
          domain=MINITRAIN, outputs=("output",),
          reference=lambda i, a: {"output": i[0][a["offset"]:a["offset"] + int(np.prod(a["shape"]))]
                                  .reshape(a["shape"])}),
    OpRow("NcclAllReduce", (case(normal(2, 3)), case(normal(7), group_type=1)), domain=MS, outputs=("output",),
          reference=lambda i, a: {"output": i[0]}),
    OpRow("StartAllReduce", (case(normal(2, 3), normal(4)), case(normal(3), normal(2, 2), normal(1), scale=0.5)),
          domain=MINITRAIN, outputs=("pending",),
          reference=lambda i, a: {"pending": np.concatenate([x.ravel() for x in i]) * a.get("scale", 1.0)}),
    OpRow("WaitAllReduce", (case(normal(6)), case(normal(7))), domain=MINITRAIN, outputs=("output",),
          reference=lambda i, a: {"output": i[0]}),

    # in-place updates
    OpRow("InPlaceAccumulator", (case(normal(3, 2), normal(3, 2)), case(normal(3, 2), normal(3, 2), np.array(0.5))),
          domain=MS, outputs=("accumulated",), in_place=(0,), reference=accumulate),
    OpRow("InPlaceAccumulatorV2", (case(normal(3, 2), normal(3, 2)),
                                   *(case(normal(3, 2), normal(3, 2), np.array([flag])) for flag in (True, False))),
          domain=MS, outputs=("updated_flag", "accumulated"), in_place=(0,), reference=accumulate_v2),
    OpRow("SGDOptimizer", (case(_optimizer_inputs([np.array(0.1)], 2)),
                           case(_optimizer_inputs([np.array(0.1)], 3), momentum=0.9, nesterov=1, weight_decay=0.01,
                                max_norm=0.5),
                           case(_optimizer_inputs([np.array(0.1)], 3), momentum=0.9, skip_non_finite=1),
                           case(_optimizer_inputs([np.array(0.1)], 3, overflow=True), momentum=0.9, skip_non_finite=1,
                                weight_decay=0.01)),
          domain=MS, outputs=("grad_norm",), in_place=tuple(range(1, 7))),
    OpRow("AdamOptimizer", (case(_optimizer_inputs([np.array(0.1), np.array(3)], 4)),
                            case(_optimizer_inputs([np.array(0.1), np.array(1)], 4), decoupled_weight_decay=1,
                                 weight_decay=0.01, max_norm=0.5, beta1=0.8),
                            case(_optimizer_inputs([np.array(0.1), np.array(4)], 4), decoupled_weight_decay=1,
                                 weight_decay=0.01, max_norm=0.5, adam_mode=1),
                            case(_optimizer_inputs([np.array(0.1), np.array(2)], 4, overflow=True), skip_non_finite=1,
                                 decoupled_weight_decay=1, weight_decay=0.01)),
          domain=MS, outputs=("grad_norm",), in_place=tuple(range(2, 10))),
    # onnxruntime-training's optimizers
    OpRow("AdamWOptimizer", (case(_optimizer_inputs([np.array(0.1), np.array(3)], 4)),
                             case(_optimizer_inputs([np.array(0.01), np.array(1)], 4), adam_mode=1, epsilon=1e-6,
                                  weight_decay=0.0),
                             case(_optimizer_inputs([np.array(0.1), np.array(5)], 4), adam_mode=1, correct_bias=0,
                                  alpha=0.8),
                             case(_optimizer_inputs([np.array(0.1), np.array(2)], 4), correct_bias=0, beta=0.99)),
          domain=MS, outputs=("updated_flag",), in_place=tuple(range(2, 10)), reference=adamw),
    OpRow("SGDOptimizerV2", (case(_optimizer_inputs([np.array(0.1)], 2)),),
          domain=MS, outputs=("update_completed",), in_place=tuple(range(1, 5)), reference=sgd_v2),

    # mixed precision: float16 loss scaling
    OpRow("MixedPrecisionScale", (case(np.array(0.25, np.float32), normal(3, 4), to=1),
                                  case(np.array([2.0 ** -10], np.float32), normal(5, scale=1000.0), to=1),
                                  case(np.array(0.5, np.float32), normal(2, 3), to=10)),
          domain=MS, reference=lambda i, a: {"Y": float(i[0].reshape(-1)[0]) * i[1]},
          output_dtype=lambda a: CAST_TO[a["to"]]),
    OpRow("LossScaleUpdate", (case(np.array(1.5), *_scaler_state(1024.0, 0)),
                              case(np.array(1.5), *_scaler_state(1024.0, 2), growth_interval=3),
                              case(np.array(np.inf), *_scaler_state(1024.0, 2)),
                              case(np.array(np.nan), *_scaler_state(1.0, 7), backoff_factor=0.25),
                              case(np.array(2.0), *_scaler_state(3e38, 1999))),
          domain=MS, reference=loss_scale_update, outputs=("found_inf",), in_place=(1, 2, 3),
          output_dtype=lambda a: np.float32),

    # copies between memories (registered by device providers)
    OpRow("MemcpyFromHost", (case(normal(2, 3)),), reference=lambda i, a: {"Y": i[0]}),
    OpRow("MemcpyToHost", (case(normal(2, 3)),), reference=lambda i, a: {"Y": i[0]}),
]


def row_for(domain, op, version):
    """The row serving the kernel of (domain, op) whose range starts at `version`, or None."""
    rows = [r for r in ROWS if r.domain == domain and r.op == op and r.since <= version]
    return max(rows, key=lambda r: r.since, default=None)
