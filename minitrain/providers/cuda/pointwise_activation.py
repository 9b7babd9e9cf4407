"""CUDA kernels of the pointwise activations of ops/pointwise_activation.py and their gradient
ops (cuda/pointwise_activation.cu), registered as the CPU's are; FastGelu's optional bias is
added first by the broadcasting Add (elementwise.py); BiasGelu adds its bias of the last dim in
the kernel's one pass."""
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .elementwise import binary, packs

# op: (kernel name, the attributes passed as the kernel's two parameters a and b)
PARAMETERS = {"HardSigmoid": ("hard_sigmoid", ("alpha", "beta")), "HardSwish": ("hard_swish", ()),
              "Softplus": ("softplus", ()), "Elu": ("elu", ("alpha",)), "Selu": ("selu", ("alpha", "gamma")),
              "Gelu": ("gelu", ()), "FastGelu": ("fast_gelu", ())}


_FORWARD = {name: Kernel("pointwise_activation", name, "PPqTT") for name, _ in PARAMETERS.values()}
_BIAS_GELU = Kernel("pointwise_activation", "bias_gelu", "PPPqq")
_BIAS_GELU_GRAD = Kernel("pointwise_activation", "bias_gelu_grad", "PPPPqq")


def _parameters(attrs, names):
    values = [float(attrs[name]) for name in names]
    return values + [0.0] * (2 - len(values))


def forward(provider, name, x, params):
    y = provider.empty(x.shape, x.dtype)
    _FORWARD[name].launch_elements(provider, x.dtype, packs(x), x, y, x.size, *params)
    return y


def forward_kernel(op):
    name, attr_names = PARAMETERS[op]

    def kernel(ctx):
        kernel_name = "fast_gelu" if op == "Gelu" and ctx.attrs.get("approximate") == "tanh" else name
        return {"Y": forward(ctx.provider, kernel_name, ctx.inputs[0], _parameters(ctx.attrs, attr_names))}
    return kernel


def gradient_kernel(op):
    name, attr_names = PARAMETERS[op]
    fn = Kernel("pointwise_activation", f"{name}_grad", "PPPqTT")

    def kernel(ctx):
        dy, x = ctx.inputs
        dx = ctx.provider.empty(dy.shape, dy.dtype)
        fn.launch_elements(ctx.provider, dy.dtype, packs(dy), dy, x, dx, dy.size, *_parameters(ctx.attrs, attr_names))
        return {"dX": dx}
    return kernel


@register_kernel("FastGelu", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def fast_gelu(ctx):
    x, bias = (ctx.inputs + [None])[:2]
    shifted = x if bias is None else binary(ctx.provider, "add", x, bias)
    return {"Y": forward(ctx.provider, "fast_gelu", shifted, [0.0, 0.0])}


for _op, _since in (("HardSigmoid", 6), ("HardSwish", 14), ("Softplus", 1), ("Elu", 6), ("Selu", 6)):
    register_kernel(_op, since=_since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(forward_kernel(_op))
    register_kernel(f"{_op}Grad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(gradient_kernel(_op))
register_kernel("Gelu", since=20, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(forward_kernel("Gelu"))
register_kernel("Gelu", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(forward_kernel("Gelu"))
register_kernel("GeluGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(gradient_kernel("Gelu"))
register_kernel("FastGeluGrad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(gradient_kernel("FastGelu"))



@register_kernel("BiasGelu", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def bias_gelu(ctx):
    x, bias = ctx.inputs
    y = ctx.provider.empty(x.shape, x.dtype)
    _BIAS_GELU.launch_elements(ctx.provider, x.dtype, x.size, x, bias, y, x.size, bias.size)
    return {"C": y}


@register_kernel("BiasGeluGrad_dX", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)
def bias_gelu_grad(ctx):
    dy, x, bias = ctx.inputs
    dx = ctx.provider.empty(dy.shape, dy.dtype)
    _BIAS_GELU_GRAD.launch_elements(ctx.provider, dy.dtype, dy.size, dy, x, bias, dx, dy.size, bias.size)
    return {"dX": dx}
