"""minitrain: a small, fast, graph-based training engine for convolutional networks.

Forward ops are differentiated into ONNX Runtime's gradient ops; every node runs a kernel looked
up in a registry keyed by op type, domain, opset version, provider and dtype."""
from . import errors, ops
from ._ext import cpu_info
from .caches import cache_limit, clear_caches, set_cache_limit
from .tensor_limit import max_tensor_bytes, set_max_tensor_bytes
from .executor import Executor, run_node
from .graph import DEFAULT_OPSETS, Graph, Node, Value
from .registry import KernelDef, register_kernel, registered_kernels
from .threads import get_dynamic, get_num_threads, set_dynamic, set_num_threads
from .gradcheck import gradcheck, gradcheck_graph  # noqa: E402  (minitrain.gradcheck is the function)
from . import data, nn, optim, random, training  # noqa: E402,F401  (the training front end)
from . import distributed  # noqa: E402,F401  (data parallelism; MPI starts only at distributed.init())

__version__ = "0.1.0"

__all__ = ["Graph", "Node", "Value", "DEFAULT_OPSETS", "Executor", "run_node", "KernelDef",
           "register_kernel", "registered_kernels", "errors", "ops", "get_num_threads",
           "set_num_threads", "get_dynamic", "set_dynamic", "cache_limit", "set_cache_limit", "clear_caches",
           "max_tensor_bytes", "set_max_tensor_bytes", "gradcheck", "gradcheck_graph", "data", "nn", "optim", "random",
           "training", "cpu_info", "__version__"]
