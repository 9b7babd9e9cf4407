"""The all-reduce of data parallelism: the sum over the ranks of a data-parallel world, as graph
nodes so that every provider, the memory plan and the CUDA Graph capture see the collective as
ordinary steps.

    NcclAllReduce(input) -> output

output = the element-wise sum of `input` over every rank (the world of one: a copy).  ONNX
Runtime declares input and output variadic; its data-parallel graph passes them one fused flat
buffer of every gradient, so the schema takes one tensor.  `group_type` is ONNX Runtime's
attribute: 0 (the global group) and 1 (the data-parallel group) both mean the whole world here,
the only group minitrain has.  The CPU kernel is MPI's Allreduce, the CUDA kernel NCCL's on the
provider's stream.

    StartAllReduce(input) -> pending        WaitAllReduce(pending) -> output

The same sum split in two (minitrain's domain), so that it overlaps the compute between them, as
PyTorch DDP's gradient buckets do: StartAllReduce queues the collective, WaitAllReduce makes
what runs after it wait for the collective, and `output` is the sum.  `pending` may be read by
nothing but WaitAllReduce.  On CUDA the collective runs on a second stream (providers/cuda/
collective_stream.py); on the CPU the sum is done by StartAllReduce and WaitAllReduce passes it
on.  The scheduler places StartAllReduce as soon as its input exists and WaitAllReduce as late as
its readers allow (their schemas' `placement`).  Data parallelism (training/data_parallel.py)
runs one pair per gradient bucket: ConcatFlat before, SliceFlat views after.  None of the three
ops has a gradient.
"""
from .schema import MINITRAIN_DOMAIN, MS_DOMAIN, Attr, schema

WORLD_GROUPS = (0, 1)


@schema("NcclAllReduce", domain=MS_DOMAIN, inputs=["input"], outputs=["output"],
        attrs={"group_type": Attr("int", 0)})
def infer_all_reduce(ctx):
    """output: the input's shape and type."""
    if ctx.attrs["group_type"] not in WORLD_GROUPS:
        ctx.attr_fail("group_type", f"must be one of {list(WORLD_GROUPS)} (the whole world, minitrain's only group)")
    return [ctx.out(ctx.shape(0))]


@schema("StartAllReduce", domain=MINITRAIN_DOMAIN, inputs=["input"], outputs=["pending"], placement="early")
def infer_start_all_reduce(ctx):
    """pending: the input's shape and type."""
    return [ctx.out(ctx.shape(0))]


@schema("WaitAllReduce", domain=MINITRAIN_DOMAIN, inputs=["pending"], outputs=["output"], placement="late")
def infer_wait_all_reduce(ctx):
    """output: the pending sum's shape and type."""
    return [ctx.out(ctx.shape(0))]
