"""cuDNN's engine configurations (the backend API, libs/cudnn_backend.py) as candidates of the
convolution search.

For a key, BackendFamily builds the key's one-operation graph, asks the engine heuristics in
mode A and in fallback mode for their configurations, drops the ones the math mode forbids
(`allowed`) or that need runtime compilation, finalizes an execution plan for each, and offers
one BackendAlgorithm per plan: its workspace is the plan's, its determinism the engine's
numerical notes.  A plan runs the primitive and adds the bias with bias.py's kernel.
"""
from __future__ import annotations

import ctypes
import logging

import numpy as np

from ..driver import device_ptr
from ..libs import cudnn
from ..libs.cudnn_backend import (ALIGNMENT, BEHAVIOR_RUNTIME_COMPILATION, COLUMNS, EXECUTION_PLAN, FILTER, IMAGE,
                                  MAX_CONFIGS, MAX_RESULTS, MODE_A, MODE_FALLBACK, MODE_INSTANT,
                                  NOTE_NONDETERMINISTIC, PACK_POINTERS, PACK_UIDS, PACK_WORKSPACE, PLAN_CONFIG,
                                  PLAN_HANDLE, PLAN_WORKSPACE, T_HANDLE, T_INT64, T_VOID_PTR, VARIANT_PACK,
                                  Descriptor, allowed, describe, heuristic_configs, operation_graph)
from . import bias as conv_bias

log = logging.getLogger("minitrain.cuda.cudnn")
_p, _i64 = ctypes.c_void_p, ctypes.c_int64


class BackendAlgorithm:
    """One execution plan of one engine configuration, made for one key."""
    family = "cudnn"

    def __init__(self, key, plan, name, workspace, notes, rank):
        self.plan, self.name, self.workspace, self.notes = plan, name, workspace, frozenset(notes)
        self.deterministic, self.rank = NOTE_NONDETERMINISTIC not in notes, rank
        self.direction = key.direction

    def __repr__(self):
        return f"<{self.name} workspace={self.workspace}>"

    def workspace_bytes(self, key):
        return self.workspace

    def supports(self, key):
        return True   # made for its key by BackendFamily

    def heuristic_rank(self, key):
        return self.rank

    def run(self, provider, key, buffers):
        if self.direction == "weight":
            cols, img, out = buffers
            pointers, bias = {COLUMNS: cols, IMAGE: img, FILTER: out}, None
        else:
            source, w, bias, out = buffers
            pointers = {COLUMNS: source, IMAGE: out} if self.direction == "data" else {IMAGE: source, COLUMNS: out}
            pointers[FILTER] = w
        addresses = [device_ptr(pointers[uid]) for uid in (IMAGE, FILTER, COLUMNS)]
        if any(a % ALIGNMENT for a in addresses):
            raise cudnn.CudnnError(f"{self.name}: a tensor is not {ALIGNMENT}-byte aligned")
        workspace = provider.empty((self.workspace,), np.uint8) if self.workspace else None
        pack = Descriptor(VARIANT_PACK)
        pack.set(PACK_UIDS, T_INT64, [IMAGE, FILTER, COLUMNS], _i64)
        pack.set(PACK_POINTERS, T_VOID_PTR, addresses, _p)
        pack.set(PACK_WORKSPACE, T_VOID_PTR, [device_ptr(workspace) if workspace is not None else 0], _p)
        pack.finalize()
        handle = cudnn.handle_for(provider)
        cudnn.check(f"cudnnBackendExecute ({self.name})", pack.lib.cudnnBackendExecute(handle, self.plan.value,
                                                                                        pack.value))
        if bias is not None:
            conv_bias.add_bias(provider, out, bias, out.shape[1])


class BackendFamily:
    """cuDNN's engine configurations for a key (none without libcudnn or for keys cuDNN cannot
    take); `own_first` as CudnnFamily's: the heuristic mode ranks them after minitrain's direct
    kernel where it suits, and ahead of the legacy algorithms."""

    def __init__(self, own_first):
        self.own_first = own_first

    def for_key(self, provider, key):
        if not cudnn.supports(key) or not cudnn.available():
            return []
        try:
            return self._plans(provider, key)
        except cudnn.CudnnError as e:
            log.info("cuDNN's backend offers no engine for %s: %s", key, e)
            return []

    def _configs(self, graph, mode):
        """The engine configurations heuristics `mode` ranks for `graph` (instant mode's where
        mode A declines the graph)."""
        try:
            return heuristic_configs(graph, mode, MAX_RESULTS)
        except cudnn.CudnnError:
            return heuristic_configs(graph, MODE_INSTANT, MAX_RESULTS) if mode == MODE_A else []

    def _plans(self, provider, key):
        handle = cudnn.handle_for(provider)
        graph = operation_graph(handle, key)
        base = (0.5 if self.own_first(key) else -1.0) - 0.25
        found, seen = [], set()
        for mode in (MODE_A, MODE_FALLBACK):
            taken = 0
            for config in self._configs(graph, mode):
                if taken == MAX_CONFIGS:
                    break
                try:
                    index, knobs, numerical, behavior = describe(config)
                except cudnn.CudnnError:
                    continue
                if (index, knobs) in seen or not allowed(key, numerical) or BEHAVIOR_RUNTIME_COMPILATION in behavior:
                    continue
                seen.add((index, knobs))
                plan = Descriptor(EXECUTION_PLAN)
                plan.set(PLAN_HANDLE, T_HANDLE, [handle.value], _p)
                plan.set_descriptors(PLAN_CONFIG, [config])
                plan.keep.append(graph)
                try:
                    plan.finalize()
                    workspace = plan.get(PLAN_WORKSPACE, T_INT64, 1, _i64)[0]
                except cudnn.CudnnError:
                    continue
                taken += 1
                name = f"{cudnn.PREFIX[key.direction]}engine{index}" + "".join(f"_k{t}={v}" for t, v in knobs)
                found.append(BackendAlgorithm(key, plan, name, int(workspace), numerical, base + len(found) / 1000))
        return found
