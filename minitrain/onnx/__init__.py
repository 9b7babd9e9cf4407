"""ONNX interoperability: `load` an .onnx model into a minitrain Graph, `save` a Graph or a
TrainingSession as an .onnx model.  Needs the optional `onnx` package
(`pip install minitrain[onnx]`); `import minitrain` works without it."""
from .exporter import save, to_model
from .importer import from_model, load

__all__ = ["load", "from_model", "save", "to_model"]
