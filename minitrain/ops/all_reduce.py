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

    StartAllReduce(input_0, input_1, ...) -> pending        WaitAllReduce(pending) -> output

A bucket of gradients summed over the ranks in two steps (minitrain's domain), so that the sum
overlaps the compute between them, as PyTorch DDP's gradient buckets do: StartAllReduce starts
the sum over the ranks of scale * concatenate(ravel(input_i)) (`scale`, default 1, as
ConcatFlat's: 1 / world size gives the mean), and WaitAllReduce makes what runs after it wait
for it; `output` is the 1-D sum, which SliceFlat views read (ops/flat_buffer.py).  `pending` may
be read by nothing but WaitAllReduce.  On CUDA the inputs are copied into one flat buffer and
summed there in place by NCCL, both on a second stream (providers/cuda/collective_stream.py),
the inputs held until the wait; on the CPU StartAllReduce sums at once and WaitAllReduce passes
the sum on.  The scheduler places StartAllReduce as soon as its inputs exist and WaitAllReduce
as late as its readers allow (their schemas' `placement`).  Data parallelism
(training/data_parallel.py) runs one pair per bucket of gradients.  None of these ops has a
gradient.
"""
from .flat_buffer import infer_concat_flat
from .schema import MINITRAIN_DOMAIN, MS_DOMAIN, Attr, Input, schema

WORLD_GROUPS = (0, 1)


@schema("NcclAllReduce", domain=MS_DOMAIN, inputs=["input"], outputs=["output"],
        attrs={"group_type": Attr("int", 0)})
def infer_all_reduce(ctx):
    """output: the input's shape and type."""
    if ctx.attrs["group_type"] not in WORLD_GROUPS:
        ctx.attr_fail("group_type", f"must be one of {list(WORLD_GROUPS)} (the whole world, minitrain's only group)")
    return [ctx.out(ctx.shape(0))]


@schema("StartAllReduce", domain=MINITRAIN_DOMAIN, inputs=[Input("input", variadic=True)], outputs=["pending"],
        attrs={"scale": Attr("float", 1.0)}, placement="early")
def infer_start_all_reduce(ctx):
    """pending: 1-D, as long as the inputs' elements together (unknown when an input's shape is)."""
    return infer_concat_flat(ctx)


@schema("WaitAllReduce", domain=MINITRAIN_DOMAIN, inputs=["pending"], outputs=["output"], placement="late")
def infer_wait_all_reduce(ctx):
    """output: the pending sum's shape and type."""
    ctx.require_rank(0, 1)
    return [ctx.out(ctx.shape(0))]
