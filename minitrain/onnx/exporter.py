"""minitrain Graph, TrainingSession or nn Module -> ONNX ModelProto.

`what="inference"` writes the model's eval graph (BatchNorm on running statistics, no Dropout)
with the session's (or module's) current parameters and checks it with onnx.checker (full
shape inference), so the file is a plain ONNX model any runtime takes; its IR version is the
oldest that its opsets allow, so that older runtimes load it too.  `what="training"` writes the forward,
loss and gradient graph with its com.microsoft gradient ops and their opset imports; ONNX's
checker does not know those ops, so that file is meant for minitrain (or ONNX Runtime
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


def save(source, path, what="inference", **module_options):
    """Write `source` (a Graph, a TrainingSession or an nn Module) to `path` as an ONNX model;
    returns the ModelProto written.  See to_model for the Module's options."""
    onnx = require_onnx()
    model = to_model(source, what, **module_options)
    onnx.save(model, os.fspath(path))
    return model


def to_model(source, what="inference", *, input_shape=None, input_dtype=np.float32):
    """The ModelProto of `source` (see the module docstring for `what`).  A Graph is written
    as it is; an nn Module is traced in eval mode on one input "input" of shape
    (N, *input_shape) and dtype input_dtype (inference only).  The inference export is checked
    with onnx.checker."""
    onnx = require_onnx()
    if what not in WHAT:
        raise ValueError(f"minitrain.onnx.save: what must be one of {WHAT}, got {what!r}")
    if isinstance(source, Graph):
        graph = source
    elif isinstance(source, Module):
        if what != "inference" or input_shape is None:
            raise ValueError("minitrain.onnx.save: an nn Module exports for inference only, and needs its "
                             f"input_shape (per sample); got what={what!r}, input_shape={input_shape!r}")
        graph = _eval_graph(source, (np.dtype(input_dtype), ("N",) + tuple(input_shape)))
    else:
        graph = _session_graph(source, what)
    model = _model(graph)
    if what == "inference":
        onnx.checker.check_model(model, full_check=True)
    return model


def _session_graph(session, what):
    """The graph of a TrainingSession: its gradient graph for training, else its eval graph
    with the current parameters (pulled from the device first)."""
    if what == "training":
        return session.grad_graph
    session.pull()
    return _eval_graph(session.model, session.input_spec)


def _eval_graph(model, input_spec):
    """`model` traced in eval mode on the session input (dtype, shape)."""
    from ..training.session import INPUT
    builder, _ = trace(model, {INPUT: input_spec}, training=False, name="inference")
    return builder.graph


def _model(graph):
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
        value_info=[_value_info(name, t) for name, t in graph.value_info.items() if name not in graph.outputs])
    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opset_imports.items()
              if domain in used]
    return helper.make_model(proto, opset_imports=opsets, producer_name="minitrain",
                             ir_version=helper.find_min_ir_version_for(opsets, ignore_unknown=True))


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
