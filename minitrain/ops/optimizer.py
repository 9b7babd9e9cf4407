"""Optimizer update ops (com.microsoft): multi-tensor SGD and Adam/AdamW.

**These ops update their inputs in place**: the parameters and the optimizer state (momentum
buffers, Adam moments) are overwritten, unlike every other op's inputs, which are read-only.
Like ONNX Runtime's SGDOptimizerV2 and AdamWOptimizer they take all parameters of a model at
once; the sequences are flattened into one variadic input `tensors`:

    SGDOptimizer(learning_rate, params..., grads..., [momentum buffers...])
    AdamOptimizer(learning_rate, step, params..., grads..., m..., v...)

`learning_rate` is a scalar, or a 1-D tensor with one rate per parameter; the attribute
`weight_decays`, when given, holds one decay per parameter in place of `weight_decay`: so one
node updates parameter groups with their own settings (torch.optim's param_groups).

The update follows PyTorch's torch.optim (SGD, Adam, AdamW); AdamOptimizer's `adam_mode` 1
(with decoupled_weight_decay) is Hugging Face's AdamW instead, as ONNX Runtime's AdamWOptimizer
names it: the bias corrections fold into the step, lr * sqrt(1 - beta2^t) / (1 - beta1^t),
epsilon is added to sqrt(v) itself, and the decay w *= 1 - lr * weight_decay comes after the
update.  With max_norm > 0 the gradients
are first scaled by min(1, max_norm / (global L2 norm + 1e-6)), as clip_grad_norm_ does.  The
one output is that global norm (before clipping), so a training loop can log it.  `step` is
the 1-based count of updates including this one (Adam's bias correction).

With skip_non_finite = 1 (float16 loss scaling) an update whose global gradient norm is inf or
NaN, that is, whose gradients hold an inf or NaN, leaves parameters and state untouched (ONNX
Runtime's update_signal, decided here on the device); the norm output still reports it.

Parameters, state and the learning rate share one float type T.  The gradients are of type T
too, or, when T is float32, float16 or bfloat16 (each gradient its own): a mixed-precision
update reads the 16-bit gradients as they come out of the backward pass, widening each element
exactly to float32 as it is read, so that no Cast node and no float32 copy of a gradient
stands between the backward pass and float32 master weights (the graph's gradients of
autocast's Casts, minitrain/autocast.py).  The global norm reads them the same way.
"""
import numpy as np

from ..bfloat16 import BFLOAT16_TYPES
from ..errors import DTypeError
from .schema import GRAPH_FLOAT_TYPES, MS_DOMAIN, Attr, Input, schema

# The gradient types an update of float32 parameters reads besides float32 itself.
LOW_GRADIENT_TYPES = (np.dtype(np.float16),) + BFLOAT16_TYPES
TENSORS = Input("tensors", types=GRAPH_FLOAT_TYPES, variadic=True)

_COMMON = {"weight_decay": Attr("float", 0.0), "weight_decays": Attr("floats"), "max_norm": Attr("float", 0.0),
           "skip_non_finite": Attr("int", 0)}
SGD_ATTRS = {"momentum": Attr("float", 0.0), "nesterov": Attr("int", 0), **_COMMON}
ADAM_ATTRS = {"beta1": Attr("float", 0.9), "beta2": Attr("float", 0.999), "epsilon": Attr("float", 1e-8),
              "decoupled_weight_decay": Attr("int", 0), "adam_mode": Attr("int", 0), **_COMMON}


def tensor_groups(num_tensors, groups):
    """How many parameters a variadic list of `num_tensors` holds, in `groups` equal parts;
    None when it does not split evenly."""
    if num_tensors == 0 or num_tensors % groups:
        return None
    return num_tensors // groups


def per_parameter(learning_rate, attrs, count):
    """(learning rates, weight decays) as lists of `count` floats, one per parameter, from the
    `learning_rate` array (a scalar or one per parameter) and the attributes."""
    rates = [float(r) for r in np.asarray(learning_rate).reshape(-1)]
    decays = attrs.get("weight_decays") or [attrs["weight_decay"]] * count
    return (rates * count if len(rates) == 1 else rates), [float(d) for d in decays]


def _check_update(ctx, first_tensor, groups):
    """Shared checks: a scalar learning rate or one per parameter, one weight decay per
    parameter when weight_decays is given, tensors in equal groups of equal shapes."""
    for name in ("weight_decay", "max_norm"):
        if ctx.attrs[name] < 0:
            ctx.attr_fail(name, "must be >= 0")
    shapes = [t.shape if t is not None else None for t in ctx.input_types[first_tensor:]]
    count = tensor_groups(len(shapes), groups)
    if count is None:
        ctx.fail(f"input 'tensors' holds {len(shapes)} tensors; expected {groups} groups of equal "
                 f"length (params, grads{', state' * (groups - 2)})")
    _check_tensor_types(ctx, ctx.input_types[first_tensor:], count)
    lr = ctx.shape(0)
    if lr is not None and (len(lr) > 1 or (len(lr) == 1 and lr[0] not in (1, count))):
        ctx.fail(f"input 'learning_rate' must be a scalar or hold one rate per parameter ({count}), "
                 f"got shape {tuple(lr)}")
    decays = ctx.attrs["weight_decays"]
    if decays is not None and (len(decays) != count or any(not d >= 0 for d in decays)):
        ctx.attr_fail("weight_decays", f"must hold one decay >= 0 per parameter ({count})")
    for k in range(count):
        group = [shapes[k + j * count] for j in range(groups)]
        known = [s for s in group if s is not None]
        if any(tuple(s) != tuple(known[0]) for s in known):
            ctx.fail(f"parameter #{k}: param, gradient and state shapes differ: {group}")
    return [ctx.out(())]


def _check_tensor_types(ctx, types, count):
    """Parameters and state of the learning rate's type T; each gradient of type T or, when T is
    float32, of a LOW_GRADIENT_TYPES type (see the module docstring)."""
    low = LOW_GRADIENT_TYPES if ctx.dtype == np.float32 else ()
    for i, t in enumerate(types):
        gradient = count <= i < 2 * count
        if t is None or t.dtype == ctx.dtype or (gradient and t.dtype in low):
            continue
        what = f"gradient #{i - count}" if gradient else f"tensor #{i} (a parameter or its state)"
        also = f" or {' / '.join(str(d) for d in low)}" if gradient and low else ""
        ctx.fail(f"input 'tensors': {what} has dtype {t.dtype}; expected the learning rate's {ctx.dtype}{also}",
                 DTypeError)


@schema("SGDOptimizer", domain=MS_DOMAIN, inputs=["learning_rate", TENSORS],
        outputs=["grad_norm"], attrs=SGD_ATTRS)
def infer_sgd(ctx):
    """In place: params -= lr * update (see the module docstring); output: the gradient norm."""
    if ctx.attrs["momentum"] < 0:
        ctx.attr_fail("momentum", "must be >= 0")
    if ctx.attrs["nesterov"] and ctx.attrs["momentum"] == 0:
        ctx.attr_fail("nesterov", "needs a momentum > 0")
    return _check_update(ctx, 1, 3 if ctx.attrs["momentum"] else 2)


@schema("AdamOptimizer", domain=MS_DOMAIN,
        inputs=["learning_rate", Input("step", types=(np.int64,)), TENSORS],
        outputs=["grad_norm"], attrs=ADAM_ATTRS)
def infer_adam(ctx):
    """In place: Adam/AdamW update of params and moments; output: the gradient norm."""
    for name in ("beta1", "beta2"):
        if not 0 <= ctx.attrs[name] < 1:
            ctx.attr_fail(name, "must be in [0, 1)")
    if ctx.attrs["epsilon"] <= 0:
        ctx.attr_fail("epsilon", "must be > 0")
    if ctx.attrs["adam_mode"] not in (0, 1):
        ctx.attr_fail("adam_mode", "must be 0 (PyTorch's AdamW) or 1 (Hugging Face's)")
    if ctx.attrs["adam_mode"] == 1 and not ctx.attrs["decoupled_weight_decay"]:
        ctx.attr_fail("adam_mode", "1 (Hugging Face's AdamW) needs decoupled_weight_decay=1")
    ctx.require_scalar(1, "the count of updates")
    return _check_update(ctx, 2, 4)
