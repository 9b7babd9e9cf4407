"""Bad input to the ops of the fused gradient buffer (ConcatFlat, SliceFlat: minitrain's own
domain, which error_inputs.py leaves out) and to the all-reduce ops raises minitrain errors naming
the op, the attribute or input and the value."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import DTypeError, OpAttributeError, ShapeError

FLAT = "ai.minitrain"


@pytest.mark.parametrize("call,error,words", [
    (lambda: run_node("SliceFlat", [np.ones(4)], domain=FLAT, attrs={"offset": 3, "shape": [2]}), ShapeError,
     ["SliceFlat", "[3, 5)", "offset=3", "(4,)"]),
    (lambda: run_node("SliceFlat", [np.ones(4)], domain=FLAT, attrs={"offset": -1, "shape": [2]}), OpAttributeError,
     ["SliceFlat", "'offset'=-1"]),
    (lambda: run_node("SliceFlat", [np.ones(4)], domain=FLAT, attrs={"offset": 0, "shape": [-2]}), OpAttributeError,
     ["SliceFlat", "'shape'"]),
    (lambda: run_node("SliceFlat", [np.ones((2, 2))], domain=FLAT, attrs={"offset": 0, "shape": [2]}), ShapeError,
     ["SliceFlat", "'flat'", "rank 2"]),
    (lambda: run_node("SliceFlat", [np.ones(4)], domain=FLAT, attrs={"shape": [2]}), OpAttributeError,
     ["SliceFlat", "'offset'", "missing"]),
    (lambda: run_node("ConcatFlat", [np.ones(2), np.ones(2, np.float32)], domain=FLAT), DTypeError,
     ["ConcatFlat", "float32", "float64"]),
    (lambda: run_node("ConcatFlat", [np.ones(2)], domain=FLAT, attrs={"scale": float("nan")}), OpAttributeError,
     ["ConcatFlat", "'scale'=nan"]),
    (lambda: run_node("ConcatFlat", [np.ones(2, np.int64)], domain=FLAT), DTypeError, ["ConcatFlat", "int64"]),
    (lambda: run_node("NcclAllReduce", [np.ones(2)], domain="com.microsoft", attrs={"group_type": 5}),
     OpAttributeError, ["NcclAllReduce", "'group_type'=5"]),
    (lambda: run_node("StartAllReduce", [np.ones(2), np.ones(2, np.float32)], domain=FLAT), DTypeError,
     ["StartAllReduce", "float32", "float64"]),
    (lambda: run_node("StartAllReduce", [np.ones(2)], domain=FLAT, attrs={"scale": float("inf")}), OpAttributeError,
     ["StartAllReduce", "'scale'=inf"]),
    (lambda: run_node("StartAllReduce", [], domain=FLAT), ShapeError, ["StartAllReduce", "needs 1 inputs", "got 0"]),
    (lambda: run_node("WaitAllReduce", [np.ones((2, 2))], domain=FLAT), ShapeError,
     ["WaitAllReduce", "'pending'", "rank 2"]),
])
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_slice_flat_is_a_view_of_the_buffer():
    flat = np.arange(6.0)
    view, = run_node("SliceFlat", [flat], domain=FLAT, attrs={"offset": 2, "shape": [2, 2]})
    assert np.shares_memory(view, flat) and view.tolist() == [[2.0, 3.0], [4.0, 5.0]]
