"""CUDA kernel of LossScaleUpdate (cuda/loss_scale.cu): one thread updates the loss scale, the
growth tracker and the count of skipped updates in place from the gradient norm on the device,
for every element type the schema admits (a bfloat16 gradient norm too, which the CPU has no kernel for)."""
import numpy as np

from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel

UPDATE = Kernel("loss_scale", "loss_scale_update", "PPPPPffq")


@register_kernel("LossScaleUpdate", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def loss_scale_update(ctx):
    a = ctx.attrs
    grad_norm, scale, tracker, skipped = ctx.inputs
    found_inf = ctx.provider.empty((), np.bool_)
    UPDATE.launch(ctx.provider, ctx.dtype, (1, 1, 1), (1, 1, 1), grad_norm, scale, tracker, skipped, found_inf,
                  a["growth_factor"], a["backoff_factor"], a["growth_interval"])
    return {"found_inf": found_inf}
