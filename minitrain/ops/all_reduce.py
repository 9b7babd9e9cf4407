"""NcclAllReduce (com.microsoft, named after ONNX Runtime's): the sum over the ranks of a
data-parallel world, a graph node so that every provider, the memory plan and the CUDA Graph
capture see the collective as an ordinary step.

    NcclAllReduce(input) -> output

output = the element-wise sum of `input` over every rank (the world of one: a copy).  ONNX
Runtime declares input and output variadic; its data-parallel graph passes them one fused flat
buffer of every gradient, and so does minitrain's (training/data_parallel.py: ConcatFlat before,
SliceFlat views after), so the schema takes one tensor.  `group_type` is ONNX Runtime's
attribute: 0 (the global group) and 1 (the data-parallel group) both mean the whole world here,
the only group minitrain has.  The CPU kernel is MPI's Allreduce, the CUDA kernel NCCL's on the
provider's stream.  The op has no gradient.
"""
from .schema import MS_DOMAIN, Attr, schema

WORLD_GROUPS = (0, 1)


@schema("NcclAllReduce", domain=MS_DOMAIN, inputs=["input"], outputs=["output"],
        attrs={"group_type": Attr("int", 0)})
def infer_all_reduce(ctx):
    """output: the input's shape and type."""
    if ctx.attrs["group_type"] not in WORLD_GROUPS:
        ctx.attr_fail("group_type", f"must be one of {list(WORLD_GROUPS)} (the whole world, minitrain's only group)")
    return [ctx.out(ctx.shape(0))]
