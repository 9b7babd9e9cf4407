"""CUDA kernels of AdamWOptimizer and SGDOptimizerV2: every parameter updated in place by one
multi-tensor launch over the table of providers/cuda/optimizer.py.  AdamWOptimizer is
AdamOptimizer's kernel (cuda/optimizer.cu's mt_adam) with decoupled weight decay, its adam_mode
and correct_bias, no gradient scale and one learning rate; SGDOptimizerV2 has its own
(cuda/ort_optimizer.cu).

The learning rate and the step are read by the kernels from device memory, where AdamW's bias
corrections are worked out too (in double): a captured optimizer step (CUDA Graph) follows a
changing learning rate and the step count without being captured again.  The CPU kernel checks
the step's range."""
import numpy as np

from ...ops.optimizer import tensor_groups
from ...ops.ort_optimizer import ORT_OPTIMIZER_TYPES
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import Kernel
from .launch import BLOCK
from .optimizer import ADAM, tensor_table

SGD = Kernel("ort_optimizer", "ort_sgd", "PqqP")


@register_kernel("AdamWOptimizer", domain=MS_DOMAIN, provider="cuda", dtypes=ORT_OPTIMIZER_TYPES,
                 host_outputs=("updated_flag",))
def adamw(ctx):
    a = ctx.attrs
    tensors = ctx.inputs[2:]
    count = tensor_groups(len(tensors), 4)
    table, blocks, chunk = tensor_table(ctx.provider, [tensors[k * count:(k + 1) * count] for k in range(4)])
    if blocks:
        ADAM.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk, 0, a["alpha"],
                    a["beta"], a["epsilon"], a["weight_decay"], 1, ctx.inputs[0], ctx.inputs[1], 0, 0,
                    int(a["adam_mode"]), int(a["correct_bias"]))
    return {"updated_flag": np.ones(tuple(ctx.inputs[1].shape), np.bool_)}


@register_kernel("SGDOptimizerV2", domain=MS_DOMAIN, provider="cuda", dtypes=ORT_OPTIMIZER_TYPES,
                 host_outputs=("update_completed",))
def sgd_v2(ctx):
    tensors = ctx.inputs[1:]
    count = tensor_groups(len(tensors), 2)
    table, blocks, chunk = tensor_table(ctx.provider, [tensors[:count], tensors[count:], [None] * count,
                                                       [None] * count])
    if blocks:
        SGD.launch(ctx.provider, ctx.dtype, (blocks, 1, 1), (BLOCK, 1, 1), table, count, chunk, ctx.inputs[0])
    return {"update_completed": np.ones(tuple(ctx.inputs[0].shape), np.bool_)}
