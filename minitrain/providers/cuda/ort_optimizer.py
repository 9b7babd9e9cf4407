"""CUDA kernels of AdamWOptimizer and SGDOptimizerV2 (cuda/ort_optimizer.cu): every parameter
updated in place by one multi-tensor launch over the table of providers/cuda/optimizer.py.

The learning rate and step are host inputs, as ONNX Runtime's Optimizer feeds them; the bias
corrections are worked out on the host in the accumulation type, as the CPU kernel does."""
import numpy as np

from ...ops.optimizer import tensor_groups
from ...ops.ort_optimizer import bias_corrections
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .launch import BLOCK
from .optimizer import tensor_table

ADAMW = Kernel("ort_optimizer", "ort_adamw", "PqqTTTTTTTTi")
SGD = Kernel("ort_optimizer", "ort_sgd", "PqqT")


def _accumulation(dtype):
    """The kernels' scalar type: float32 for float16 and float32, float64 for float64."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


@register_kernel("AdamWOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(0, 1),
                 host_outputs=("updated_flag",))
def adamw(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    step = int(np.asarray(ctx.inputs[1]).reshape(-1)[0])
    if step < 1:
        ctx.fail(f"input 'step' is {step}; it counts updates from 1")
    acc = _accumulation(ctx.dtype)
    lr = acc.type(np.asarray(ctx.inputs[0]).reshape(-1)[0])
    alpha_correction, beta_correction = bias_corrections(a["alpha"], a["beta"], step, a["correct_bias"], acc)
    lr_corrected = lr * (np.sqrt(beta_correction) / alpha_correction)
    table, blocks, chunk = tensor_table(ctx.provider, [tensors[k * count:(k + 1) * count] for k in range(4)])
    if blocks:
        ADAMW.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk, lr, lr_corrected,
                     a["alpha"], a["beta"], a["epsilon"], a["weight_decay"], alpha_correction, beta_correction,
                     int(a["adam_mode"]))
    return {"updated_flag": np.ones(np.shape(ctx.inputs[1]), np.bool_)}


@register_kernel("SGDOptimizerV2", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES, host_inputs=(0,),
                 host_outputs=("update_completed",))
def sgd_v2(ctx):
    tensors = ctx.inputs[1:]
    count = tensor_groups(len(tensors), 2)
    table, blocks, chunk = tensor_table(ctx.provider, [tensors[:count], tensors[count:], [None] * count,
                                                       [None] * count])
    if blocks:
        SGD.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk,
                   np.asarray(ctx.inputs[0]).reshape(-1)[0])
    return {"update_completed": np.ones(np.shape(ctx.inputs[0]), np.bool_)}
