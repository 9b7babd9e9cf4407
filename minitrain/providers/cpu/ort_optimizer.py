"""CPU kernels of AdamWOptimizer and SGDOptimizerV2 (ops/ort_optimizer.py): NumPy updates in
the parameters' dtype, written into the parameters and moments in place, in the order of ONNX
Runtime's CPU kernels so that the results agree to rounding."""
import numpy as np

from ...ops.ort_optimizer import bias_corrections
from ...ops.optimizer import tensor_groups
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel


def adamw_update(w, g, m, v, lr, alpha, beta, epsilon, weight_decay, adam_mode, alpha_correction,
                 beta_correction):
    """One parameter's AdamW update in place, every number in w's dtype (adam_mode 0 or 1;
    see ops/ort_optimizer.py)."""
    t = w.dtype.type
    lr, alpha, beta, eps, decay = t(lr), t(alpha), t(beta), t(epsilon), t(weight_decay)
    if adam_mode == 0:
        w -= w * lr * decay
    m[...] = alpha * m + (t(1) - alpha) * g
    v[...] = beta * v + (t(1) - beta) * g * g
    if adam_mode == 0:
        w -= (lr * m) / (alpha_correction * (np.sqrt(v / beta_correction) + eps))
    else:
        lr_corrected = lr * (np.sqrt(beta_correction) / alpha_correction)
        w -= lr_corrected * m / (np.sqrt(v) + eps)
        w -= lr * decay * w


@register_kernel("AdamWOptimizer", domain=MS_DOMAIN, host_inputs=(0, 1))
def adamw(ctx):
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    step = int(np.asarray(ctx.inputs[1]).reshape(-1)[0])
    if step < 1:
        ctx.fail(f"input 'step' is {step}; it counts updates from 1")
    a, dtype = ctx.attrs, np.dtype(ctx.dtype)
    lr = dtype.type(np.asarray(ctx.inputs[0]).reshape(-1)[0])
    alpha_correction, beta_correction = bias_corrections(a["alpha"], a["beta"], step, a["correct_bias"], dtype)
    for k in range(count):
        w, g, m, v = (tensors[k + j * count] for j in range(4))
        adamw_update(w, g, m, v, lr, a["alpha"], a["beta"], a["epsilon"], a["weight_decay"], a["adam_mode"],
                     alpha_correction, beta_correction)
    return {"updated_flag": np.ones(np.shape(ctx.inputs[1]), np.bool_)}


@register_kernel("SGDOptimizerV2", domain=MS_DOMAIN, host_inputs=(0,))
def sgd_v2(ctx):
    tensors = ctx.inputs[1:]
    count = tensor_groups(len(tensors), 2)
    lr = np.dtype(ctx.dtype).type(np.asarray(ctx.inputs[0]).reshape(-1)[0])
    for w, g in zip(tensors[:count], tensors[count:]):
        w -= lr * g
    return {"update_completed": np.ones(np.shape(ctx.inputs[0]), np.bool_)}
