"""Checkpoints of a TrainingSession: parameters and buffers, optimizer state (with each parameter
group's lr and weight decay), step count, the loss scale of an fp16 session (scale, growth
tracker, skipped updates), the global random generator's state, and a caller's `extra` dict
(epoch, data-loader state...).

The file is a zip archive: `checkpoint.json` (format name, version, scalars, extra) and one
`.npy` entry per array, read back without pickle.  `save` writes a temporary file beside the
target, renames it over the target (os.replace) and fsyncs the folder, so a crash leaves
either the old checkpoint or the new one, never a torn file.  `load` reads and checks
everything (arrays and every metadata entry) before it touches the session: a truncated, foreign or mismatched file raises CheckpointError and
leaves the model, optimizer and generator as they were.  A resumed run repeats an
uninterrupted one bitwise on the same device (same thread count, same batches).  The arrays
are pulled from the session's device before saving and pushed to it after loading, so a
checkpoint written on one device loads on the other.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
import zlib

import numpy as np

from . import random as mt_random
from .errors import CheckpointError

FORMAT = "minitrain-checkpoint"
VERSION = 1
_META = "checkpoint.json"


def _write_array(archive, name, array):
    buffer = io.BytesIO()
    array = np.asarray(array)
    np.lib.format.write_array(buffer, np.ascontiguousarray(array).reshape(array.shape), allow_pickle=False)
    archive.writestr(f"{name}.npy", buffer.getvalue())


def save(path, session, extra=None):
    """Write `session`'s state to `path` atomically.  `extra` must be JSON-serialisable."""
    path = os.fspath(path)
    session.pull()
    optimizer = session.optimizer.state_dict()
    meta = {"format": FORMAT, "version": VERSION, "step": session.step_count,
            "optimizer": {"type": optimizer["type"], "step_count": optimizer["step_count"],
                          "groups": optimizer["groups"]},
            "rng": mt_random.get_state(), "extra": extra or {},
            "model_arrays": list(session.model.state_dict()), "optimizer_arrays": list(optimizer["arrays"])}
    loss_scale = session.loss_scale.state_dict() if getattr(session, "loss_scale", None) else {}
    if loss_scale:
        meta["loss_scale_arrays"] = list(loss_scale)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as archive:
                archive.writestr(_META, json.dumps(meta))
                for name, array in session.model.state_dict().items():
                    _write_array(archive, f"model/{name}", array)
                for name, array in optimizer["arrays"].items():
                    _write_array(archive, f"optimizer/{name}", array)
                for name, array in loss_scale.items():
                    _write_array(archive, f"loss_scale/{name}", array)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_folder(folder)


def _fsync_folder(folder):
    """Make a rename in `folder` durable (a no-op where folders cannot be opened, as on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_meta(path, meta):
    """Every metadata entry load() uses has the type it needs; raises CheckpointError naming it."""
    def bad(entry, value, expected):
        raise CheckpointError(f"{path}: metadata entry {entry!r} is {value!r}; expected {expected}")
    if not _is_count(meta.get("step")):
        bad("step", meta.get("step"), "a count >= 0")
    optimizer = meta.get("optimizer")
    if not isinstance(optimizer, dict):
        bad("optimizer", optimizer, "a dict with 'type' and 'step_count'")
    if not isinstance(optimizer.get("type"), str):
        bad("optimizer.type", optimizer.get("type"), "the optimizer's class name")
    if not _is_count(optimizer.get("step_count")):
        bad("optimizer.step_count", optimizer.get("step_count"), "a count >= 0")
    groups = optimizer.get("groups")
    if groups is not None and not (isinstance(groups, list) and all(isinstance(g, dict) for g in groups)):
        bad("optimizer.groups", groups, "a list of parameter group dicts")
    if not isinstance(meta.get("extra"), dict):
        bad("extra", meta.get("extra"), "a dict")
    for entry in ("model_arrays", "optimizer_arrays", "loss_scale_arrays"):
        names = meta.get(entry, [] if entry == "loss_scale_arrays" else None)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            bad(entry, names, "a list of array names")
    try:
        np.random.default_rng().bit_generator.state = meta.get("rng")
    except (ValueError, TypeError, KeyError):
        bad("rng", meta.get("rng"), "a NumPy bit generator state")


def read(path):
    """Read and check a checkpoint file: (meta, model arrays, optimizer arrays).  Raises
    CheckpointError for a missing, truncated, foreign or newer-version file."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as archive:
            try:
                meta = json.loads(archive.read(_META))
            except KeyError:
                raise CheckpointError(f"{path}: not a minitrain checkpoint (no {_META})") from None
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not a minitrain checkpoint (format {meta.get('format')!r})"
                                      if isinstance(meta, dict) else f"{path}: not a minitrain checkpoint")
            if meta.get("version") != VERSION:
                raise CheckpointError(f"{path}: checkpoint version {meta.get('version')!r} is not supported "
                                      f"(this minitrain reads version {VERSION})")
            _check_meta(path, meta)

            def arrays(prefix, names):
                out = {}
                for name in names:
                    with archive.open(f"{prefix}/{name}.npy") as f:
                        out[name] = np.lib.format.read_array(f, allow_pickle=False)
                return out
            meta["loss_scale"] = arrays("loss_scale", meta.get("loss_scale_arrays", []))
            return meta, arrays("model", meta["model_arrays"]), arrays("optimizer", meta["optimizer_arrays"])
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({type(e).__name__}: {e})") from None


def load(path, session):
    """Restore `session` from `path`; returns the checkpoint's `extra` dict.  Nothing is
    changed unless the whole file is valid and fits the session's model and optimizer."""
    return restore(session, read(path), path)


def restore(session, contents, path):
    """Restore `session` from `contents`, what read(path) returned (a data-parallel run reads
    the file on one rank and hands the contents to the others); returns the `extra` dict."""
    meta, model_state, optimizer_arrays = contents
    optimizer_state = {"type": meta["optimizer"]["type"], "step_count": meta["optimizer"]["step_count"],
                       "arrays": optimizer_arrays, "groups": meta["optimizer"].get("groups")}
    loss_scale = getattr(session, "loss_scale", None) if meta["loss_scale"] else None
    try:
        session.model.check_state_dict(model_state)
        session.optimizer.check_state_dict(optimizer_state)
        if loss_scale is not None:
            loss_scale.check_state_dict(meta["loss_scale"])
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{os.fspath(path)}: checkpoint does not fit this session: {e}") from None
    session.model.load_state_dict(model_state)
    session.optimizer.load_state_dict(optimizer_state)
    if loss_scale is not None:
        loss_scale.load_state_dict(meta["loss_scale"])
    session.push()
    mt_random.set_state(meta["rng"])
    return meta["extra"]
