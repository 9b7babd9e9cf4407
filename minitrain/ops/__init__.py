"""Op schemas and gradient builders, one module per op family.

Importing this package imports every module in it, which registers every schema and gradient
builder: a new op family is a new module here, nothing else to edit."""
import importlib
import pkgutil

from .schema import (FLOAT_TYPES, MS_DOMAIN, ONNX_DOMAIN, REQUIRED, Attr, Input, OpSchema, TensorType,
                     get_schema, infer_node, registered_ops, resolve_attrs, schema)
from .gradients import GradContext, gradient, get_gradient_builder

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
