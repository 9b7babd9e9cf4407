"""ONNX Runtime's training checkpoint file: read and write its flatbuffer.

The layout is ort_training_checkpoint.fbs in ONNX Runtime's source (tables Checkpoint,
ModuleState, OptimizerGroup, ParameterOptimizerState, PropertyBag and the Tensor table of
ort.fbs), file identifier "ODTC".  A field of a table is found through the table's vtable by
its index in the schema, so the indices below are the order of the fields there.

Reading walks the buffer with bounds-checked accessors of our own, so that a truncated, corrupt
or foreign file raises a CheckpointError naming the file and what is wrong, never an IndexError
or a silently wrong tensor.  Writing uses the flatbuffers runtime library's Builder (the format's
reference implementation of alignment, vtables and offsets).
"""
from __future__ import annotations

import dataclasses
import os
import struct

import numpy as np

from ..bfloat16 import BFLOAT16_TYPES
from ..errors import CheckpointError
from ..ops.schema import TENSOR_PROTO_DTYPES
from ._backend import require_flatbuffers

FILE_IDENTIFIER = b"ODTC"
SUPPORTED_VERSIONS = (1, 2)     # 2 adds ModuleState.is_nominal_state; 1 reads the same
WRITTEN_VERSION = 2              # the version ONNX Runtime 1.19 writes and reads

# Field indices of each table, in the schema's order.
CHECKPOINT = {"version": 0, "module_state": 1, "optimizer_groups": 2, "property_bag": 3}
MODULE_STATE = {"requires_grad_params": 0, "frozen_params": 1, "is_nominal_state": 2, "has_external_data": 3}
OPTIMIZER_GROUP = {"group_name": 0, "step": 1, "initial_learning_rate": 2, "optimizer_states": 3}
PARAMETER_STATE = {"param_name": 0, "momentums": 1}
PROPERTY_BAG = {"ints": 0, "floats": 1, "strings": 2}
PROPERTY = {"name": 0, "value": 1}
TENSOR = {"name": 0, "doc_string": 1, "dims": 2, "data_type": 3, "raw_data": 4, "string_data": 5,
          "external_data_offset": 6}

# ort.fbs TensorDataType (the numbering of ONNX's TensorProto.DataType), bfloat16 aside.
DTYPE_OF_CODE = {code: dtype for code, dtype in TENSOR_PROTO_DTYPES.items() if dtype not in BFLOAT16_TYPES}
CODE_OF_DTYPE = {dtype: code for code, dtype in DTYPE_OF_CODE.items()}


@dataclasses.dataclass
class OptimizerGroupState:
    """One optimizer group: its step count, initial learning rate, and each parameter's
    state tensors by name ("momentum0", "momentum1" for AdamW, "momentum0" for SGD)."""
    step: int = 0
    initial_learning_rate: float = 0.0
    states: dict = dataclasses.field(default_factory=dict)   # parameter -> {state name: array}


@dataclasses.dataclass
class CheckpointContents:
    """What a checkpoint file holds: trainable and frozen parameters, optimizer groups by
    name, and the property bag (str -> int, float or str)."""
    trainable: dict = dataclasses.field(default_factory=dict)
    frozen: dict = dataclasses.field(default_factory=dict)
    optimizer_groups: dict = dataclasses.field(default_factory=dict)
    properties: dict = dataclasses.field(default_factory=dict)


# ---------------------------------------------------------------------------------- reading
class _Buffer:
    """The file's bytes with reads that fail with a CheckpointError outside its bounds."""

    def __init__(self, data, path):
        self.data, self.path = data, path

    def fail(self, what):
        raise CheckpointError(f"checkpoint {self.path}: {what}")

    def read(self, fmt, pos):
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            self.fail(f"an offset points outside the file ({pos} of {len(self.data)} bytes): the file is "
                      "truncated or corrupt")
        return struct.unpack_from("<" + fmt, self.data, pos)[0]

    def bytes_at(self, pos, count, what):
        if count < 0 or pos < 0 or pos + count > len(self.data):
            self.fail(f"{what} runs past the end of the file ({pos} + {count} of {len(self.data)} bytes): the "
                      "file is truncated or corrupt")
        return self.data[pos:pos + count]


class _Table:
    """A flatbuffer table at `pos`: fields by index, through its vtable."""

    def __init__(self, buf, pos, kind):
        self.buf, self.pos, self.kind = buf, pos, kind
        self.vtable = pos - buf.read("i", pos)
        self.vtable_size = buf.read("H", self.vtable)
        if self.vtable_size < 4 or self.vtable_size % 2:
            buf.fail(f"the {kind} table has a malformed vtable (size {self.vtable_size})")

    def _field(self, index):
        """The absolute position of field `index`, or None when it is absent."""
        entry = 4 + 2 * index
        if entry >= self.vtable_size:
            return None
        offset = self.buf.read("H", self.vtable + entry)
        return self.pos + offset if offset else None

    def scalar(self, index, fmt, default):
        pos = self._field(index)
        return default if pos is None else self.buf.read(fmt, pos)

    def _target(self, index):
        pos = self._field(index)
        return None if pos is None else pos + self.buf.read("I", pos)

    def table(self, index, kind):
        target = self._target(index)
        return None if target is None else _Table(self.buf, target, kind)

    def string(self, index, what):
        target = self._target(index)
        if target is None:
            return None
        length = self.buf.read("I", target)
        try:
            return bytes(self.buf.bytes_at(target + 4, length, what)).decode("utf-8")
        except UnicodeDecodeError:
            self.buf.fail(f"{what} is not UTF-8 text")

    def tables(self, index, kind):
        """A vector of tables, or None when the field is absent."""
        target = self._target(index)
        if target is None:
            return None
        count = self.buf.read("I", target)
        self.buf.bytes_at(target + 4, 4 * count, f"the vector of {kind} tables")
        return [_Table(self.buf, target + 4 + 4 * i + self.buf.read("I", target + 4 + 4 * i), kind)
                for i in range(count)]

    def array(self, index, dtype, what):
        """A vector of scalars as a NumPy array (empty when absent)."""
        target = self._target(index)
        if target is None:
            return np.zeros(0, dtype)
        count = self.buf.read("I", target)
        itemsize = np.dtype(dtype).itemsize
        raw = self.buf.bytes_at(target + 4, count * itemsize, what)
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)


def read_checkpoint(path):
    """The CheckpointContents of the checkpoint file at `path`; CheckpointError when the file
    is not an ONNX Runtime training checkpoint, of an unsupported version, or corrupt."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path}: cannot be read ({e.strerror or e})") from e
    buf = _Buffer(memoryview(data), path)
    if len(data) < 8 or bytes(data[4:8]) != FILE_IDENTIFIER:
        found = bytes(data[4:8]) if len(data) >= 8 else f"only {len(data)} bytes"
        buf.fail(f"not an ONNX Runtime training checkpoint: file identifier {FILE_IDENTIFIER!r} expected at "
                 f"bytes 4..8, found {found!r}")
    root = _Table(buf, buf.read("I", 0), "Checkpoint")
    version = root.scalar(CHECKPOINT["version"], "i", 0)
    if version not in SUPPORTED_VERSIONS:
        buf.fail(f"checkpoint format version {version} is not supported (supported: {SUPPORTED_VERSIONS})")
    contents = CheckpointContents()
    module = root.table(CHECKPOINT["module_state"], "ModuleState")
    if module is not None:
        if module.scalar(MODULE_STATE["has_external_data"], "?", False):
            buf.fail("its tensors are in an external data file, which minitrain does not read")
        if module.scalar(MODULE_STATE["is_nominal_state"], "?", False):
            buf.fail("it is a nominal checkpoint (parameter names without values); load a complete one")
        for key, target in (("requires_grad_params", contents.trainable), ("frozen_params", contents.frozen)):
            for tensor in module.tables(MODULE_STATE[key], "Tensor") or []:
                name, array = _read_tensor(tensor)
                target[name] = array
    for group in root.tables(CHECKPOINT["optimizer_groups"], "OptimizerGroup") or []:
        name = group.string(OPTIMIZER_GROUP["group_name"], "an optimizer group's name")
        if name is None or name in contents.optimizer_groups:
            buf.fail(f"an optimizer group has {'no' if name is None else 'a duplicate'} name {name!r}")
        state = OptimizerGroupState(step=group.scalar(OPTIMIZER_GROUP["step"], "q", 0),
                                    initial_learning_rate=group.scalar(OPTIMIZER_GROUP["initial_learning_rate"],
                                                                       "f", 0.0))
        for entry in group.tables(OPTIMIZER_GROUP["optimizer_states"], "ParameterOptimizerState") or []:
            param = entry.string(PARAMETER_STATE["param_name"], "an optimizer state's parameter name")
            state.states[param] = dict(_read_tensor(t) for t in entry.tables(PARAMETER_STATE["momentums"],
                                                                             "Tensor") or [])
        contents.optimizer_groups[name] = state
    bag = root.table(CHECKPOINT["property_bag"], "PropertyBag")
    if bag is not None:
        for key, fmt in (("ints", "q"), ("floats", "f"), ("strings", None)):
            for prop in bag.tables(PROPERTY_BAG[key], "Property") or []:
                name = prop.string(PROPERTY["name"], "a property name")
                if name is None:
                    buf.fail(f"a property in '{key}' has no name")
                contents.properties[name] = (prop.string(PROPERTY["value"], f"property {name!r}") if fmt is None
                                             else prop.scalar(PROPERTY["value"], fmt, 0))
    return contents


def _read_tensor(table):
    """(name, array) of a Tensor table, the bytes copied out of the file."""
    buf = table.buf
    name = table.string(TENSOR["name"], "a tensor's name")
    if name is None:
        buf.fail("a tensor has no name")
    if table.scalar(TENSOR["external_data_offset"], "q", -1) != -1:
        buf.fail(f"tensor {name!r} is stored in an external data file, which minitrain does not read")
    code = table.scalar(TENSOR["data_type"], "i", 0)
    if code not in DTYPE_OF_CODE:
        buf.fail(f"tensor {name!r} has data type {code}, which minitrain does not read "
                 f"(it reads {sorted(DTYPE_OF_CODE)})")
    dtype = np.dtype(DTYPE_OF_CODE[code])
    dims = table.array(TENSOR["dims"], np.int64, f"the dims of tensor {name!r}")
    if (dims < 0).any():
        buf.fail(f"tensor {name!r} has negative dims {dims.tolist()}")
    raw = table.array(TENSOR["raw_data"], np.uint8, f"the data of tensor {name!r}")
    expected = int(np.prod(dims)) * dtype.itemsize
    if raw.size != expected:
        buf.fail(f"tensor {name!r} of shape {tuple(dims.tolist())} and type {dtype} needs {expected} bytes, "
                 f"its data holds {raw.size}")
    return name, raw.view(dtype.newbyteorder("<")).astype(dtype).reshape(tuple(int(d) for d in dims))


# ---------------------------------------------------------------------------------- writing
def write_checkpoint(contents, path):
    """Write `contents` (a CheckpointContents) to `path` in ONNX Runtime's format, tensors and
    names sorted as ONNX Runtime writes them."""
    builder = require_flatbuffers().Builder(1024)
    trainable = _tensor_vector(builder, contents.trainable)
    frozen = _tensor_vector(builder, contents.frozen)
    builder.StartObject(len(MODULE_STATE))
    builder.PrependUOffsetTRelativeSlot(MODULE_STATE["requires_grad_params"], trainable, 0)
    builder.PrependUOffsetTRelativeSlot(MODULE_STATE["frozen_params"], frozen, 0)
    module_state = builder.EndObject()
    groups = [_optimizer_group(builder, name, contents.optimizer_groups[name])
              for name in sorted(contents.optimizer_groups)]
    group_vector = _offset_vector(builder, groups)
    bag = _property_bag(builder, contents.properties) if contents.properties else None
    builder.StartObject(len(CHECKPOINT))
    builder.PrependInt32Slot(CHECKPOINT["version"], WRITTEN_VERSION, 0)
    builder.PrependUOffsetTRelativeSlot(CHECKPOINT["module_state"], module_state, 0)
    builder.PrependUOffsetTRelativeSlot(CHECKPOINT["optimizer_groups"], group_vector, 0)
    if bag is not None:
        builder.PrependUOffsetTRelativeSlot(CHECKPOINT["property_bag"], bag, 0)
    builder.Finish(builder.EndObject(), file_identifier=FILE_IDENTIFIER)
    with open(os.fspath(path), "wb") as f:
        f.write(builder.Output())


def _offset_vector(builder, offsets):
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _tensor_vector(builder, arrays):
    return _offset_vector(builder, [_tensor(builder, name, arrays[name]) for name in sorted(arrays)])


def _tensor(builder, name, array):
    array = np.asarray(array)
    if array.dtype not in CODE_OF_DTYPE:
        raise CheckpointError(f"checkpoint: tensor {name!r} has dtype {array.dtype}, which the format cannot "
                              f"hold (it holds {sorted(str(np.dtype(d)) for d in CODE_OF_DTYPE)})")
    name_offset = builder.CreateString(name)
    dims = builder.CreateNumpyVector(np.array(array.shape, dtype=np.int64))
    raw = builder.CreateNumpyVector(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
                                    .reshape(-1).view(np.uint8))
    builder.StartObject(len(TENSOR))
    builder.PrependUOffsetTRelativeSlot(TENSOR["name"], name_offset, 0)
    builder.PrependUOffsetTRelativeSlot(TENSOR["dims"], dims, 0)
    builder.PrependInt32Slot(TENSOR["data_type"], CODE_OF_DTYPE[array.dtype], 0)
    builder.PrependUOffsetTRelativeSlot(TENSOR["raw_data"], raw, 0)
    builder.PrependInt64Slot(TENSOR["external_data_offset"], -1, -1)
    return builder.EndObject()


def _optimizer_group(builder, name, group):
    states = []
    for param in sorted(group.states):
        param_name = builder.CreateString(param)
        momentums = _tensor_vector(builder, group.states[param])
        builder.StartObject(len(PARAMETER_STATE))
        builder.PrependUOffsetTRelativeSlot(PARAMETER_STATE["param_name"], param_name, 0)
        builder.PrependUOffsetTRelativeSlot(PARAMETER_STATE["momentums"], momentums, 0)
        states.append(builder.EndObject())
    group_name = builder.CreateString(name)
    state_vector = _offset_vector(builder, states)
    builder.StartObject(len(OPTIMIZER_GROUP))
    builder.PrependUOffsetTRelativeSlot(OPTIMIZER_GROUP["group_name"], group_name, 0)
    builder.PrependInt64Slot(OPTIMIZER_GROUP["step"], int(group.step), 0)
    builder.PrependFloat32Slot(OPTIMIZER_GROUP["initial_learning_rate"], float(group.initial_learning_rate), 0.0)
    builder.PrependUOffsetTRelativeSlot(OPTIMIZER_GROUP["optimizer_states"], state_vector, 0)
    return builder.EndObject()


def _property_bag(builder, properties):
    kinds = {"ints": [], "floats": [], "strings": []}
    for name in sorted(properties):
        value = properties[name]
        name_offset = builder.CreateString(name)
        if isinstance(value, str):
            value_offset = builder.CreateString(value)
            builder.StartObject(len(PROPERTY))
            builder.PrependUOffsetTRelativeSlot(PROPERTY["value"], value_offset, 0)
            kind = "strings"
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            builder.StartObject(len(PROPERTY))
            builder.PrependInt64Slot(PROPERTY["value"], int(value), 0)
            kind = "ints"
        else:
            builder.StartObject(len(PROPERTY))
            builder.PrependFloat32Slot(PROPERTY["value"], float(value), 0.0)
            kind = "floats"
        builder.PrependUOffsetTRelativeSlot(PROPERTY["name"], name_offset, 0)
        kinds[kind].append(builder.EndObject())
    vectors = {kind: _offset_vector(builder, offsets) for kind, offsets in kinds.items()}
    builder.StartObject(len(PROPERTY_BAG))
    for kind, vector in vectors.items():
        builder.PrependUOffsetTRelativeSlot(PROPERTY_BAG[kind], vector, 0)
    return builder.EndObject()
