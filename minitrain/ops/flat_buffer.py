"""ConcatFlat and SliceFlat (minitrain's domain): one flat buffer holding many tensors, so that a
collective runs once on all of them (a fused gradient buffer).

    ConcatFlat(input_0, input_1, ...) -> flat

flat = concatenate(ravel(input_i)) * scale, one 1-D tensor (the inputs in order); `scale`
(float, default 1) folds a factor into the copy, as ONNX Runtime's gradient scaling does while
it fuses the gradients before its all-reduce (1 / world size: the mean over ranks).

    SliceFlat(flat) -> output

output = flat[offset : offset + prod(shape)] seen with `shape`: a view sharing the buffer's
memory, nothing copied.  Neither op has a gradient.
"""
import math

from .schema import MINITRAIN_DOMAIN, REQUIRED, Attr, Input, schema


@schema("ConcatFlat", domain=MINITRAIN_DOMAIN, inputs=[Input("input", variadic=True)], outputs=["flat"],
        attrs={"scale": Attr("float", 1.0)})
def infer_concat_flat(ctx):
    """flat: 1-D, as long as the inputs' elements together (unknown when an input's shape is)."""
    shapes = [ctx.shape(i) for i in range(len(ctx.input_types))]
    if not shapes:
        ctx.fail("needs at least one input")
    if any(s is None or not all(isinstance(d, int) for d in s) for s in shapes):
        return [ctx.out(("flat",))]
    return [ctx.out((sum(math.prod(s) for s in shapes),))]


@schema("SliceFlat", domain=MINITRAIN_DOMAIN, inputs=["flat"], outputs=["output"],
        attrs={"offset": Attr("int", REQUIRED), "shape": Attr("ints", REQUIRED)})
def infer_slice_flat(ctx):
    """output: `shape`, read from the flat input at `offset`."""
    offset, shape = ctx.attrs["offset"], ctx.attrs["shape"]
    if offset < 0:
        ctx.attr_fail("offset", "must be >= 0")
    if any(d < 0 for d in shape):
        ctx.attr_fail("shape", "must hold dims >= 0")
    ctx.require_rank(0, 1)
    flat = ctx.shape(0)
    if flat is not None and isinstance(flat[0], int) and offset + math.prod(shape) > flat[0]:
        ctx.fail(f"elements [{offset}, {offset + math.prod(shape)}) of attributes offset={offset}, "
                 f"shape={list(shape)} lie beyond input 'flat' of shape {tuple(flat)}")
    return [ctx.out(shape)]


def slice_bounds(ctx, length):
    """(offset, end, shape) of a SliceFlat kernel's view of a flat input of `length` elements;
    fails (naming the attributes) when the view would run past its end."""
    offset, shape = ctx.attrs["offset"], tuple(ctx.attrs["shape"])
    end = offset + math.prod(shape)
    if end > length:
        ctx.fail(f"elements [{offset}, {end}) of attributes offset={offset}, shape={list(shape)} lie beyond "
                 f"input 'flat' of {length} elements")
    return offset, end, shape
