"""Exceptions raised by minitrain.

Every class subclasses ValueError or TypeError, so callers that already catch those keep
working; every message names the op (and node, where there is one), the attribute or input at
fault and the bad value.
"""


class MinitrainError(Exception):
    """Base class of all minitrain errors."""


class OpAttributeError(MinitrainError, ValueError):
    """An attribute is unknown to the op, missing, of the wrong type or out of range."""


class ShapeError(MinitrainError, ValueError):
    """Input shapes are inconsistent with each other or with the attributes."""


class DTypeError(MinitrainError, TypeError):
    """An input has an unsupported element type, or inputs disagree on their element type."""


class KernelNotFoundError(MinitrainError, TypeError):
    """No registered kernel serves this op, domain, opset version, provider and dtype."""


class GraphError(MinitrainError, ValueError):
    """The graph is malformed: an undefined value, a cycle, a duplicate name, a bad opset."""


class GradcheckError(MinitrainError, ValueError):
    """A gradient check that cannot be made: an op without a gradient, checked inputs that are
    absent or not float, or no checked output with a gradient."""


class CheckpointError(MinitrainError, ValueError):
    """A checkpoint file is truncated, foreign or of an unsupported version."""


class OptimizerArgumentError(MinitrainError, ValueError, TypeError):
    """An optimizer's hyperparameter or parameter group is of the wrong type or out of range
    (caught as either ValueError or TypeError)."""


class ProviderUnavailableError(MinitrainError, RuntimeError):
    """An execution provider was asked for on a machine that cannot run it (no pycuda, no
    driver, no device); the message says which of these is missing."""


class RunFolderError(MinitrainError, ValueError):
    """A run folder already holds a run (and neither resume nor overwrite was asked), or holds
    nothing to resume."""


class TrainingDivergedError(MinitrainError, ValueError):
    """A training step's loss is not finite; the last good checkpoint is kept."""


class OnnxImportError(MinitrainError, ValueError):
    """An ONNX model holds nodes minitrain cannot run (unknown op, unimported domain, dtype it
    does not serve, opset older than the op's first schema); the message lists every one."""


class DistributedUnavailableError(MinitrainError, RuntimeError):
    """Data parallelism was asked for where it cannot run: mpi4py (or, for CUDA, libnccl) is not
    installed, the world was not initialised, or it was already shut down; the message says what
    to install or call."""


class WorldMismatchError(MinitrainError, ValueError):
    """The ranks of a data-parallel world disagree on what they train (parameter names or
    shapes, batch shape, provider, dtype); the message names what differs and on which ranks."""


class PrecisionError(MinitrainError, ValueError):
    """A session's precision is unknown, or the device cannot compute in it (float16 and
    bfloat16 on the CPU)."""
