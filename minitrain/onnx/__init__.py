"""ONNX interoperability, Graph <-> ModelProto: `load` an .onnx model into a minitrain Graph,
`save` a Graph, an nn Module or a TrainingSession (through its export_graph) as an .onnx model.
Nothing here knows training: training an .onnx file is minitrain.training.onnx_file's.  Needs
the optional `onnx` package (`pip install minitrain[onnx]`); `import minitrain` works without
it."""
from .exporter import save, to_model
from .importer import from_model, load

__all__ = ["load", "from_model", "save", "to_model"]
