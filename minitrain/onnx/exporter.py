"""minitrain Graph -> ONNX ModelProto, for a Graph, an nn Module or a TrainingSession.

What is written is a Graph with its initializers.  A Graph is written as it is; an nn Module
is traced in eval mode; any other source (a TrainingSession) hands over its graph through its
`export_graph(what)` method, so this layer knows nothing of training.

`what="inference"` asks for the model's eval graph (BatchNorm on running statistics, no
Dropout) with the current parameters, and the model is checked with onnx.checker (full shape
inference), so the file is a plain ONNX model any runtime takes; its IR version is the oldest
that its opsets allow, so that older runtimes load it too.  `what="training"` asks for the
forward, loss and gradient graph with its com.microsoft gradient ops and their opset imports;
ONNX's checker does not know those ops, so that file is meant for minitrain (or ONNX Runtime
training) and re-imports with `minitrain.onnx.load`.
"""
from __future__ import annotations

import os

import numpy as np

from ..graph import Graph
from ..inference import infer_types
from ..nn.module import Module, trace
from ..ops.schema import ONNX_DOMAIN
from ._backend import require_onnx

WHAT = ("inference", "training")
MODULE_INPUT = "input"      # the input of a traced nn Module


def save(source, path, what="inference", **module_options):
    """Write `source` (a Graph, an nn Module, or an object with an `export_graph(what)` method
    such as a TrainingSession) to `path` as an ONNX model; returns the ModelProto written.  See
    to_model for the Module's options."""
    onnx = require_onnx()
    model = to_model(source, what, **module_options)
    onnx.save(model, os.fspath(path))
    return model


def to_model(source, what="inference", *, input_shape=None, input_dtype=np.float32):
    """The ModelProto of `source` (see the module docstring for `what`).  A Graph is written
    as it is; an nn Module is traced in eval mode on one input "input" of shape
    (N, *input_shape) and dtype input_dtype (inference only); another source gives the graph
    of its `export_graph(what)`.  The inference export is checked with onnx.checker."""
    onnx = require_onnx()
    if what not in WHAT:
        raise ValueError(f"minitrain.onnx.save: what must be one of {WHAT}, got {what!r}")
    if isinstance(source, Graph):
        graph = source
    elif isinstance(source, Module):
        if what != "inference" or input_shape is None:
            raise ValueError("minitrain.onnx.save: an nn Module exports for inference only, and needs its "
                             f"input_shape (per sample); got what={what!r}, input_shape={input_shape!r}")
        builder, _ = trace(source, {MODULE_INPUT: (np.dtype(input_dtype), ("N",) + tuple(input_shape))},
                           training=False, name="inference")
        graph = builder.graph
    elif hasattr(source, "export_graph"):
        graph = source.export_graph(what)
    else:
        raise TypeError(f"minitrain.onnx.save: cannot export a {type(source).__name__}; give a Graph, an nn "
                        "Module or an object with an export_graph(what) method (a TrainingSession)")
    model = _model(graph)
    if what == "inference":
        onnx.checker.check_model(model, full_check=True)
    return model


def _model(graph):
    onnx = require_onnx()
    from onnx import helper, numpy_helper
    types = infer_types(graph)
    used = {ONNX_DOMAIN} | {n.domain for n in graph.nodes}
    nodes = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, domain=n.domain,
                              **{k: _attribute(v) for k, v in n.attrs.items() if v is not None})
             for n in graph.nodes]
    proto = helper.make_graph(
        nodes, graph.name,
        inputs=[_value_info(v.name, v.type) for v in graph.inputs],
        outputs=[_value_info(name, types[name]) for name in graph.outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), name) for name, a in graph.initializers.items()],
        value_info=[_value_info(name, t) for name, t in graph.value_info.items()
                    if name not in graph.outputs and t.shape is not None])
    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opset_imports.items()
              if domain in used]
    model = helper.make_model(proto, opset_imports=opsets, producer_name="minitrain",
                              ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    if any(types[name].shape is None for name in graph.outputs):
        # an output shape minitrain's inference leaves open (a Resize by constant scales): ONNX's
        # inference completes it, as the checker wants every output shaped
        model = onnx.shape_inference.infer_shapes(model)
    return model


def _attribute(value):
    """A minitrain attribute value as onnx.helper.make_attribute takes it."""
    from onnx import numpy_helper
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _value_info(name, tensor_type):
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(tensor_type.dtype))
    return helper.make_tensor_value_info(name, elem, tensor_type.shape)
