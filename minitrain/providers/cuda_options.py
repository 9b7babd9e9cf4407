"""Options of the CUDA provider, importable without pycuda: the convolution algorithm search's,
which a session takes as ONNX Runtime's CUDA provider takes cudnn_conv_algo_search.

    TrainingSession(..., device="cuda", conv_search={"mode": "heuristic"})
    get_provider("cuda").conv_search.mode = "heuristic"     # run_node's default provider

Sessions made afterwards start from the default provider's options.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

SEARCH_MODES = ("exhaustive", "heuristic", "fixed")


@dataclass
class ConvSearchOptions:
    """How the CUDA convolutions pick their algorithm per shape (providers/cuda/conv/search.py).

    mode: "exhaustive" (time the candidates, the default), "heuristic" (each algorithm's own
        rank, lowest first; nothing timed) or "fixed" (`algorithm` first, the others as
        fallbacks);
    algorithm: for mode "fixed", an algorithm's name or a family's ("cudnn": its algorithms
        first, in the family's order);
    deterministic: only algorithms whose results do not depend on scheduling (minitrain's own
        kernels all are);
    workspace_limit: bytes, or None for free device memory less 10%;
    cache_dir: a folder for rankings on disk too (conv/search_disk.py's `default_folder()` sits
        beside pycuda's kernel cache), or None (the default) to keep them in memory only.  In
        exhaustive mode a key missing from memory is looked up there before it is timed.
    """
    mode: str = "exhaustive"
    algorithm: Optional[str] = None
    deterministic: bool = False
    workspace_limit: Optional[int] = None
    cache_dir: Optional[str] = None

    def __post_init__(self):
        check_mode(self.mode)

    @classmethod
    def of(cls, value):
        """A new ConvSearchOptions from None (the defaults), a mapping of its fields, or
        another ConvSearchOptions (copied)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return dataclasses.replace(value)
        if not isinstance(value, Mapping):
            raise TypeError(f"conv_search: expected a dict or ConvSearchOptions, got {type(value).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise ValueError(f"conv_search: unknown option(s) {unknown}; the options are {sorted(fields)}")
        return cls(**value)

    def ranking_settings(self):
        """What a ranking depends on besides its key (cache_dir only says where it is kept)."""
        return self.mode, self.algorithm, self.deterministic, self.workspace_limit


def check_mode(mode):
    if mode not in SEARCH_MODES:
        raise ValueError(f"conv search: mode {mode!r} is not exhaustive, heuristic or fixed")
