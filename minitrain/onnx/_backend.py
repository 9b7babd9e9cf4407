"""The lazy import of the `onnx` package, so that minitrain's core never needs it."""
import importlib


def require_onnx():
    """The `onnx` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("onnx")
    except ImportError as e:
        raise ImportError("minitrain.onnx needs the `onnx` package: install the extra with "
                          "`pip install minitrain[onnx]` (or `pip install onnx`)") from e
