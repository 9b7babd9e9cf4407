"""ONNX ModelProto -> minitrain Graph.

The model is taken as ONNX describes it: opset imports per domain, initializers (external data
through onnx's own loader), node attributes as Python values, graph inputs and outputs with
their dtypes and shapes (symbolic dims as str) and value infos, completed by ONNX's shape
inference.  Every node is then checked against minitrain's schemas, and all the nodes that
fail are reported in one OnnxImportError rather than the first only.  Shape subgraphs (see
shape_folding.py) are evaluated instead, as tracing the graph later folds them; one whose value
holds a symbolic dim that its consumer cannot take as a constant (Expand to a batch-sized shape,
as onnxruntime-training's gradient graphs do) is checked as the int64 tensor that its Shape
nodes compute on the host at run time.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import MinitrainError, OnnxImportError
from ..graph import Graph, Node, Value
from ..inference import check_graph_node, initializer_type, topological_order
from ..ops.schema import ONNX_DOMAIN, TensorType, get_schema
from ..shape_folding import ShapeFolder
from ._backend import require_onnx


def load(model):
    """Import an ONNX model (a path or a ModelProto) as a Graph; see from_model."""
    onnx = require_onnx()
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))     # loads external data beside the file too
    return from_model(model)


def from_model(model):
    """A Graph holding `model` (an onnx.ModelProto), checked against minitrain's schemas."""
    onnx = require_onnx()
    from onnx import numpy_helper
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:
        pass    # a node ONNX cannot type (a domain without opset import); _check names it below
    g = model.graph
    # to_array may return a read-only view of the proto's bytes; training writes parameters in place.
    initializers = {t.name: np.array(numpy_helper.to_array(t)) for t in g.initializer}
    graph = Graph(
        nodes=[_node(n, i) for i, n in enumerate(g.node)],
        inputs=[Value(v.name, *_tensor_type(v)) for v in g.input if v.name not in initializers],
        outputs=[v.name for v in g.output],
        initializers=initializers,
        opset_imports={_domain(o.domain): o.version for o in model.opset_import},
        name=g.name or "onnx_model")
    for v in list(g.value_info) + list(g.output):
        dtype, shape = _tensor_type(v)
        if dtype is not None:
            graph.value_info[v.name] = TensorType(dtype, shape)
    _check(graph)
    return graph


def _domain(domain):
    return ONNX_DOMAIN if domain in ("", "ai.onnx") else domain


def _node(proto, index):
    attrs = {a.name: _attribute(a) for a in proto.attribute}
    return Node(proto.op_type, list(proto.input), list(proto.output), attrs, _domain(proto.domain),
                proto.name or f"{proto.op_type}_{index}")


def _attribute(proto):
    """An AttributeProto as minitrain holds attributes: ints, floats, str, lists, arrays."""
    from onnx import helper
    return _python_value(helper.get_attribute_value(proto))


def _python_value(value):
    from onnx import TensorProto, numpy_helper
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_python_value(v) for v in value]
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value


def _tensor_type(value_info):
    """(dtype, shape) of a ValueInfoProto; dtype None when it is not a tensor or has no type,
    shape None when the rank is unknown, a dim with neither value nor name becomes a name."""
    from onnx import helper
    t = value_info.type
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.elem_type:
        return None, None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type))
    if not t.tensor_type.HasField("shape"):
        return dtype, None
    dims = []
    for i, d in enumerate(t.tensor_type.shape.dim):
        kind = d.WhichOneof("value")
        dims.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param"
                    else f"{value_info.name}.dim{i}")
    return dtype, tuple(dims)


def _check(graph):
    """Validate every node against minitrain's schemas; raise one OnnxImportError naming every
    node that fails.  A node downstream of a failed one is still checked, on the types ONNX's
    shape inference declared for its inputs (its dtypes and shapes only where they are known)."""
    types = {v.name: v.type for v in graph.inputs}
    types.update({name: initializer_type(a) for name, a in graph.initializers.items()})
    shapes = ShapeFolder(graph.initializers)

    def dims_of(name):
        t = types.get(name)
        return None if t is None else t.shape

    failures = []
    for node in topological_order(graph):
        version = graph.opset_imports.get(node.domain)
        where = f"node {node.name!r} ({node.op_type}, domain {node.domain or 'ai.onnx'!r}, version {version})"
        if version is None:
            failures.append(f"{where}: the model imports no opset for this domain")
            continue
        try:
            if shapes.try_fold(node, node.attrs, version, dims_of):
                continue
            for i, name in enumerate(node.inputs):
                if shapes.is_shape_value(name):
                    array = shapes.constant_for(name, node, i, dims_of(node.inputs[0]))
                    if array is not None:
                        types[name] = initializer_type(array)
                    else:           # computed at run time (see the module docstring)
                        value = shapes.values[name]
                        types[name] = TensorType(np.dtype(np.int64), () if value.scalar else (len(value.entries),))
            get_schema(node.op_type, node.domain, version)
            if all(not name or name in types for name in node.inputs):
                out_types = check_graph_node(graph, node, types).out_types
                for name, t in zip(node.outputs, out_types):
                    declared = graph.value_info.get(name)
                    types[name] = TensorType(t.dtype, declared.shape) if t.shape is None and declared else t
                continue
        except MinitrainError as e:
            failures.append(f"{where}: {e}")
        types.update((name, graph.value_info[name]) for name in node.outputs if name in graph.value_info)
    if failures:
        raise OnnxImportError(f"cannot import ONNX model {graph.name!r}: {len(failures)} node(s) "
                              "are not supported:\n  " + "\n  ".join(failures))
