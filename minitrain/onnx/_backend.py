"""The lazy imports of the optional packages of minitrain.onnx (`onnx`, and `flatbuffers` for
writing ONNX Runtime checkpoints), so that minitrain's core never needs them."""
import importlib


def require_onnx():
    """The `onnx` module (its helper, numpy_helper and shape_inference submodules loaded), or an
    ImportError that says how to install it."""
    try:
        return importlib.import_module("onnx")
    except ImportError as e:
        raise ImportError("minitrain.onnx needs the `onnx` package: install the extra with "
                          "`pip install minitrain[onnx]` (or `pip install onnx`)") from e


def require_flatbuffers():
    """The `flatbuffers` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("flatbuffers")
    except ImportError as e:
        raise ImportError("writing an ONNX Runtime checkpoint needs the `flatbuffers` package: install the extra "
                          "with `pip install minitrain[ort]` (or `pip install flatbuffers`)") from e
