"""Conv and ConvTranspose (ONNX, opsets 1 and 11) and their gradient ops ConvGrad and
ConvTransposeGrad (com.microsoft, 1).

The gradient ops take (dY, X, W) and yield dX, dW and dB, each optional: a node computes only
the outputs it names.  They accept every attribute of their forward op (ONNX Runtime's
builders copy the forward node's attributes onto them).  Attribute rules and error messages
live in conv_geometry.py, shared with the kernels.
"""
from .conv_geometry import conv_geometry, conv_transpose_geometry
from .gradients import gradient
from .schema import MS_DOMAIN, Attr, Input, schema
from .shape_utils import shapes_differ

CONV_ATTRS = {
    "auto_pad": Attr("string", "NOTSET"),
    "dilations": Attr("ints"),
    "group": Attr("int", 1),
    "kernel_shape": Attr("ints"),
    "pads": Attr("ints"),
    "strides": Attr("ints"),
}
CONV_TRANSPOSE_ATTRS = {**CONV_ATTRS, "output_padding": Attr("ints"), "output_shape": Attr("ints")}
GRAD_OUTPUTS = ("dX", "dW", "dB")


def _concrete(shape):
    return shape is not None and all(isinstance(d, int) for d in shape)


def _geometry(ctx, transposed, x_shape, w_shape):
    """The ConvGeometry when X's spatial dims and W are known, else None (after the checks
    that the known dims allow)."""
    if x_shape is None or w_shape is None:
        return None
    if not _concrete(tuple(x_shape[2:]) + tuple(w_shape)):
        return None
    fn = conv_transpose_geometry if transposed else conv_geometry
    return fn(ctx.who, tuple(x_shape), tuple(w_shape), ctx.attrs)


def _check_bias(ctx, index, channels):
    b = ctx.shape(index)
    if b is None or channels is None:
        return
    if len(b) != 1 or (isinstance(b[0], int) and b[0] != channels):
        ctx.fail(f"input 'B' has shape {tuple(b)}; expected ({channels},), one entry per output channel")


def _forward_inference(transposed):
    def infer(ctx):
        """Y: (N, C_out, *output spatial), from X, W and the attributes."""
        ctx.require_rank(0, (3, 4, 5))
        x, w = ctx.shape(0), ctx.shape(1)
        geom = _geometry(ctx, transposed, x, w)
        if geom is None:
            return [ctx.out(None)]
        out_channels = geom.img_channels if transposed else geom.col_channels
        _check_bias(ctx, 2, out_channels)
        spatial = geom.img_spatial if transposed else geom.col_spatial
        return [ctx.out((x[0], out_channels) + tuple(spatial))]
    return infer


def _grad_inference(transposed):
    def infer(ctx):
        """dX like X, dW like W, dB (C_out,); dY must be the forward output's shape."""
        ctx.require_rank(0, (3, 4, 5), "dY")
        ctx.require_rank(1, (3, 4, 5), "X")
        dy, x, w = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        geom = _geometry(ctx, transposed, x, w)
        out_channels = None
        if geom is not None:
            out_channels = geom.img_channels if transposed else geom.col_channels
            spatial = geom.img_spatial if transposed else geom.col_spatial
            expected = (x[0], out_channels) + tuple(spatial)
            if shapes_differ(dy, expected):
                ctx.fail(f"input 'dY' has shape {tuple(dy)}, but the forward output of input 'X' {tuple(x)} "
                         f"and input 'W' {tuple(w)} with these attributes has shape {expected}")
        elif w is not None and not transposed:
            out_channels = w[0]
        db = None if out_channels is None else (out_channels,)
        return [ctx.out(x), ctx.out(w), ctx.out(db)]
    return infer


for _v in (1, 11):
    schema("Conv", since=_v, inputs=["X", "W", Input("B", optional=True)], attrs=CONV_ATTRS)(
        _forward_inference(False))
    schema("ConvTranspose", since=_v, inputs=["X", "W", Input("B", optional=True)],
           attrs=CONV_TRANSPOSE_ATTRS)(_forward_inference(True))

schema("ConvGrad", domain=MS_DOMAIN, inputs=["dY", "X", "W"], outputs=GRAD_OUTPUTS, attrs=CONV_ATTRS,
       optional_outputs=GRAD_OUTPUTS)(_grad_inference(False))
schema("ConvTransposeGrad", domain=MS_DOMAIN, inputs=["dY", "X", "W"], outputs=GRAD_OUTPUTS,
       attrs=CONV_TRANSPOSE_ATTRS, optional_outputs=GRAD_OUTPUTS)(_grad_inference(True))


def _conv_family_gradient(op):
    def build(g):
        """One {op}Grad node carrying the forward attributes; it names only the gradients the
        graph needs (an empty output name is one nobody asked for)."""
        g.node(f"{op}Grad", [g.GO(0), g.I(0), g.I(1)], [g.GI(0), g.GI(1), g.GI(2)], dict(g.attrs),
               domain=MS_DOMAIN)
    for version in (1, 11):
        gradient(op, since=version, differentiable=(0, 1, 2), emits=(f"{op}Grad",))(build)


_conv_family_gradient("Conv")
_conv_family_gradient("ConvTranspose")
