"""The kernel registry, keyed like ONNX Runtime's.

A kernel is declared by a KernelDef: op type, domain, opset version range, execution provider
and the element types it accepts.  Lookup for a node takes the opset that the graph imports for
the node's domain and picks the kernel whose [since_version, end_version] range holds it, for
that provider and dtype.  Several versions of one op coexist as separate kernels.

A kernel is a callable `kernel(ctx) -> dict[output name, array]` where ctx is a KernelContext.
Its inputs and outputs live in the provider's memory, except those the KernelDef declares
host-resident (`host_inputs`, `host_outputs`: learning rates, ratios, shapes), as ONNX
Runtime's InputMemoryType(OrtMemTypeCPUInput, i) declares them: the kernel receives and returns
those as NumPy arrays, and the executor moves such values, nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .bfloat16 import BFLOAT16_TYPES
from .caches import freeze
from .errors import KernelNotFoundError, ShapeError
from .ops.schema import ONNX_DOMAIN, describe_op


@dataclass(frozen=True)
class KernelDef:
    op_type: str
    domain: str
    since_version: int
    end_version: Optional[int]
    provider: str
    type_constraints: dict
    host_inputs: frozenset = frozenset()
    host_outputs: frozenset = frozenset()
    reference: bool = False

    def input_on_host(self, index):
        """Whether the kernel reads input `index` from host memory, whatever memory its
        provider's own values live in (a provider with host memory reads every input there)."""
        return index in self.host_inputs

    def output_on_host(self, name):
        """Whether the kernel returns output `name` in host memory (see input_on_host)."""
        return name in self.host_outputs

    def holds(self, opset):
        return self.since_version <= opset and (self.end_version is None or opset <= self.end_version)

    def describe(self):
        end = "" if self.end_version is None else str(self.end_version)
        types = ", ".join(f"{k}: {'|'.join(str(np.dtype(t)) for t in v)}" for k, v in self.type_constraints.items())
        return f"versions {self.since_version}-{end or '∞'} on {self.provider} ({types})"


@dataclass(slots=True)
class KernelContext:
    """What a kernel receives: contiguous inputs (None for an absent optional input),
    resolved attributes, the output names wanted, and shapes the graph knows for outputs."""
    op_type: str
    node_name: Optional[str]
    inputs: list
    attrs: dict
    wanted: tuple
    output_shapes: dict
    dtype: np.dtype
    provider: object
    attrs_key: object = None     # freeze(attrs), when the caller keeps it (a bound node does)

    def wants(self, name):
        return name in self.wanted

    def frozen_attrs(self):
        """The attributes as a hashable key (caches.freeze; TypeError when some value cannot
        be hashed): the bound node's, made once, else made now."""
        return self.attrs_key if self.attrs_key is not None else freeze(self.attrs)

    @property
    def who(self):
        """The op and node name, as errors name them."""
        return describe_op(self.op_type, self.node_name)

    def fail(self, message, error=ShapeError):
        raise error(f"{self.who}: {message}")


_KERNELS: dict = {}


def register_kernel(op_type, *, domain=ONNX_DOMAIN, since=1, end=None, provider="cpu",
                    dtypes=(np.float32, np.float64), host_inputs=(), host_outputs=(), reference=False):
    """Decorator: register `fn(ctx) -> dict` as the kernel of op_type for opsets since..end.
    `host_inputs` (input indices) and `host_outputs` (output names) live in host memory.
    `reference` marks a fused op's kernel that gives its results but is no faster than the
    nodes it stands for: graphs that hold the op run it, the fusion pass never chooses it."""
    kdef = KernelDef(op_type, domain, since, end, provider, {"T": tuple(np.dtype(d) for d in dtypes)},
                     frozenset(host_inputs), frozenset(host_outputs), reference)

    def register(fn: Callable):
        entries = _KERNELS.setdefault((domain, op_type), [])
        for other, _ in entries:
            if other.provider == provider and _ranges_overlap(other, kdef) and \
                    set(other.type_constraints["T"]) & set(kdef.type_constraints["T"]):
                raise ValueError(f"kernel {op_type} {kdef.describe()} overlaps {other.describe()}")
        entries.append((kdef, fn))
        return fn
    return register


def _ranges_overlap(a: KernelDef, b: KernelDef):
    a_end = a.end_version if a.end_version is not None else float("inf")
    b_end = b.end_version if b.end_version is not None else float("inf")
    return a.since_version <= b_end and b.since_version <= a_end


def find(op_type, domain, opset, provider, dtype):
    """The (KernelDef, kernel) serving this node on `provider`, or None."""
    dtype = np.dtype(dtype)
    for kdef, fn in _KERNELS.get((domain, op_type), []):
        if kdef.provider == provider and kdef.holds(opset) and dtype in kdef.type_constraints["T"]:
            return kdef, fn
    return None


def lookup(op_type, domain, opset, provider, dtype):
    """The (KernelDef, kernel) serving this node; KernelNotFoundError says what exists instead."""
    dtype = np.dtype(dtype)
    found = find(op_type, domain, opset, provider, dtype)
    if found is not None:
        return found
    entries = _KERNELS.get((domain, op_type), [])
    registered = "; ".join(k.describe() for k, _ in entries) or "nothing"
    hint = "; bfloat16 kernels exist on the 'cuda' provider only" if dtype in BFLOAT16_TYPES and provider != "cuda" else ""
    raise KernelNotFoundError(
        f"no kernel for op {op_type!r} domain {domain or 'ai.onnx'!r} opset {opset} "
        f"provider {provider!r} dtype {dtype}; registered: {registered}{hint}")


def registered_kernels(op_type=None, domain=None):
    """KernelDefs registered so far (optionally for one op), for docs and tests."""
    return [k for (d, op), entries in sorted(_KERNELS.items()) for k, _ in entries
            if (op_type is None or op == op_type) and (domain is None or d == domain)]
