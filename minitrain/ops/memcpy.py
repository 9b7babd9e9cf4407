"""MemcpyFromHost and MemcpyToHost: the copies the scheduler inserts where a value crosses
from one provider's memory to another's, as ONNX Runtime inserts them (same names, ONNX
domain, version 1).  They are never written by users and have no gradient."""
import numpy as np

from .schema import GRAPH_FLOAT_TYPES, INDEX_TYPES, Input, schema

ANY_TYPES = GRAPH_FLOAT_TYPES + INDEX_TYPES + (np.dtype(np.bool_),)


def _same(ctx):
    """Y: X's type and shape, in the other memory."""
    t = ctx.input_types[0]
    return [ctx.out(t.shape, dtype=t.dtype, value=t.value)]


schema("MemcpyFromHost", inputs=[Input("X", types=ANY_TYPES)], outputs=["Y"])(_same)
schema("MemcpyToHost", inputs=[Input("X", types=ANY_TYPES)], outputs=["Y"])(_same)
