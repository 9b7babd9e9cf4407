"""ONNX Runtime's training optimizers (com.microsoft): AdamWOptimizer and SGDOptimizerV2, the
ops of the optimizer_model.onnx that onnxruntime.training.artifacts writes.

**These ops update their inputs in place** (parameters and moments), as ONNX Runtime's kernels
do through their input/output aliases.  ONNX Runtime takes each group of tensors as one
sequence input; minitrain flattens the sequences into one variadic input `tensors`, as its own
multi-tensor optimizers do (ops/optimizer.py):

    AdamWOptimizer(lr, step, weights..., gradients..., momentums_1..., momentums_2...)
    SGDOptimizerV2(lr, weights..., gradients...)

The optional `update_signal` input of ONNX Runtime's ops (skip the update when false) has no
place after a variadic input and is not taken.  The one output is ONNX Runtime's flag: true
once the update is done (AdamW: shaped like `step`; SGD: like `lr`).

AdamW follows ONNX Runtime's CPU kernel (training_ops/cpu/optimizer/adamw/adamw.cc), in the
parameters' precision, with `alpha` and `beta` the moment coefficients:
- adam_mode 0 (PyTorch's AdamW): w -= lr * weight_decay * w, then the moments, then
  w -= lr * m / ((1 - alpha^step) * (sqrt(v / (1 - beta^step)) + epsilon));
- adam_mode 1 (Hugging Face's AdamW): the moments, then
  w -= lr * sqrt(1 - beta^step) / (1 - alpha^step) * m / (sqrt(v) + epsilon), then
  w -= lr * weight_decay * w;
with correct_bias 0 the two corrections are 1.  SGDOptimizerV2 is w -= lr * g.
"""
import numpy as np

from .optimizer import tensor_groups
from .schema import MS_DOMAIN, Attr, Input, schema

ADAM_MODES = {"torch": 0, "huggingface": 1}     # adam_mode by the AdamW it follows
ADAMW_ATTRS = {"alpha": Attr("float", 0.9), "beta": Attr("float", 0.999), "epsilon": Attr("float", 1e-8),
               "weight_decay": Attr("float", 1e-2), "correct_bias": Attr("int", 1), "adam_mode": Attr("int", 0)}
# the element types both optimizers admit, as ONNX Runtime's kernels do; the providers register these
ORT_OPTIMIZER_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_tensors(ctx, first, groups, names):
    """The variadic tensors in `groups` equal parts of equal shapes per parameter."""
    shapes = [t.shape if t is not None else None for t in ctx.input_types[first:]]
    count = tensor_groups(len(shapes), groups)
    if count is None:
        ctx.fail(f"input 'tensors' holds {len(shapes)} tensors; expected {groups} groups of equal length "
                 f"({', '.join(names)})")
    for k in range(count):
        group = [shapes[k + j * count] for j in range(groups)]
        known = [s for s in group if s is not None]
        if any(tuple(s) != tuple(known[0]) for s in known):
            ctx.fail(f"parameter #{k}: the shapes of its {', '.join(names)} differ: {group}")


@schema("AdamWOptimizer", domain=MS_DOMAIN,
        inputs=["lr", Input("step", types=(np.int64,)), Input("tensors", variadic=True)],
        outputs=["updated_flag"], attrs=ADAMW_ATTRS, float_types=ORT_OPTIMIZER_TYPES)
def infer_adamw(ctx):
    """In place: AdamW update of weights and moments; output: true once updated."""
    a = ctx.attrs
    for name in ("alpha", "beta"):
        if not 0 <= a[name] < 1:
            ctx.attr_fail(name, "must be in [0, 1)")
    if not a["epsilon"] > 0:
        ctx.attr_fail("epsilon", "must be > 0")
    if not a["weight_decay"] >= 0:
        ctx.attr_fail("weight_decay", "must be >= 0")
    if a["adam_mode"] not in ADAM_MODES.values():
        ctx.attr_fail("adam_mode", f"must be one of {sorted(ADAM_MODES.values())} ({ADAM_MODES})")
    if a["correct_bias"] not in (0, 1):
        ctx.attr_fail("correct_bias", "must be 0 or 1")
    ctx.require_scalar(0, "one learning rate for every parameter")
    ctx.require_scalar(1, "the count of updates")
    _check_tensors(ctx, 2, 4, ("weight", "gradient", "momentum_1", "momentum_2"))
    return [ctx.out(ctx.shape(1), np.bool_)]


@schema("SGDOptimizerV2", domain=MS_DOMAIN, inputs=["lr", Input("tensors", variadic=True)],
        outputs=["update_completed"], float_types=ORT_OPTIMIZER_TYPES)
def infer_sgd_v2(ctx):
    """In place: w -= lr * g for every weight; output: true once updated."""
    ctx.require_scalar(0, "one learning rate for every parameter")
    _check_tensors(ctx, 1, 2, ("weight", "gradient"))
    return [ctx.out(ctx.shape(0), np.bool_)]


def bias_corrections(alpha, beta, step, correct_bias, dtype):
    """(1 - alpha^step, 1 - beta^step) in `dtype`, the powers taken in double as ONNX Runtime's
    std::pow(float, int64) does; (1, 1) without bias correction."""
    if not correct_bias:
        return dtype.type(1), dtype.type(1)
    return (dtype.type(1) - dtype.type(float(dtype.type(alpha)) ** step),
            dtype.type(1) - dtype.type(float(dtype.type(beta)) ** step))
