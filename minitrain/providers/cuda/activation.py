"""CUDA kernels of the elementwise activations and their com.microsoft gradients
(cuda/activation.cu), registered as the CPU's are (providers/cpu/activation.py)."""
from ...ops.schema import MS_DOMAIN
from ...registry import register_kernel
from .compiler import CUDA_FLOAT_TYPES, Kernel
from .elementwise import packs


def unary_kernel(name, output="Y"):
    """A kernel computing output = f(X) elementwise; f takes the op's `alpha` when it has one."""
    fn = Kernel("activation", name, "PPqT")

    def kernel(ctx):
        x = ctx.inputs[0]
        y = ctx.provider.empty(x.shape, x.dtype)
        fn.launch_elements(ctx.provider, x.dtype, packs(x), x, y, x.size, ctx.attrs.get("alpha", 0.0))
        return {output: y}
    return kernel


def binary_grad_kernel(name):
    """A kernel computing dX = f'(dY, X_or_Y) elementwise."""
    fn = Kernel("activation", f"{name}_grad", "PPPqT")

    def kernel(ctx):
        dy, xy = ctx.inputs[0], ctx.inputs[1]
        dx = ctx.provider.empty(dy.shape, dy.dtype)
        fn.launch_elements(ctx.provider, dy.dtype, packs(dy), dy, xy, dx, dy.size, ctx.attrs.get("alpha", 0.0))
        return {"dX": dx}
    return kernel


def register(op, since, domain, name, output="Y"):
    register_kernel(op, domain=domain, since=since, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(unary_kernel(name, output))
    register_kernel(f"{op}Grad", domain=MS_DOMAIN, provider="cuda", dtypes=CUDA_FLOAT_TYPES)(binary_grad_kernel(name))


register("Relu", 6, "", "relu")
register("Sigmoid", 6, "", "sigmoid")
register("Tanh", 6, "", "tanh", "output")
register("LeakyRelu", 6, "", "leaky_relu")
register("QuickGelu", 1, MS_DOMAIN, "quick_gelu")
