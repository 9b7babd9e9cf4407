"""Attributes that would make a node produce more than the machine holds fail with a ShapeError
naming the op, the attribute and the byte size, before anything is allocated."""
import numpy as np
import pytest

import minitrain
from minitrain import Executor, Graph, run_node, tensor_limit
from minitrain.errors import ShapeError
from minitrain.scheduler import schedule

X = np.ones((1, 2, 5, 5), np.float32)
HUGE_CASES = [
    ("Conv", [X, np.ones((3, 2, 3, 3), np.float32)], {"pads": [10 ** 6] * 4}, "pads"),
    ("MaxPool", [X], {"kernel_shape": [10 ** 6 + 1] * 2, "pads": [10 ** 6] * 4}, "pads"),
    ("AveragePool", [X], {"kernel_shape": [10 ** 6 + 1] * 2, "pads": [10 ** 6] * 4}, "kernel_shape"),
    ("ConvTranspose", [X, np.ones((2, 3, 3, 3), np.float32)], {"output_shape": [10 ** 6, 10 ** 6]}, "output_shape"),
    ("ConvTranspose", [X, np.ones((2, 3, 3, 3), np.float32)], {"strides": [10 ** 5] * 2}, "strides"),
]


@pytest.mark.parametrize("op,inputs,attrs,attr", HUGE_CASES, ids=[f"{c[0]}-{c[3]}" for c in HUGE_CASES])
def test_run_node_refuses_a_huge_output(op, inputs, attrs, attr):
    with pytest.raises(ShapeError) as info:
        run_node(op, inputs, attrs=attrs)
    message = str(info.value)
    assert message.startswith(op) and attr in message and "bytes" in message
    assert "set_max_tensor_bytes" in message


def test_a_plan_with_symbolic_dims_refuses_at_run_before_allocating():
    g = Graph()
    g.add_input("x", np.float32, ("N", 2, 5, 5))
    g.add_initializer("w", np.ones((3, 2, 3, 3), np.float32))
    g.outputs.append(g.add_node("Conv", ["x", "w"], attrs={"pads": [10 ** 5] * 4}, name="big"))
    ex = Executor(schedule(g))      # N unknown: nothing to refuse yet
    with pytest.raises(ShapeError, match=r"Conv \(node 'big'\): output 'Y' would have shape \(4, 3, 200003, 200003\)"):
        ex.run({"x": np.ones((4, 2, 5, 5), np.float32)})


def test_the_limit_can_be_set_and_restored():
    x, w = np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    try:
        minitrain.set_max_tensor_bytes(300)
        assert minitrain.max_tensor_bytes() == 300
        with pytest.raises(ShapeError, match=r"600 bytes, more than the 300 bytes.*'pads': \(1, 1, 1, 1\)"):
            run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]})     # Y (1, 3, 5, 5) float64
        run_node("Conv", [x, w])                                       # Y (1, 3, 3, 3): 216 bytes
    finally:
        minitrain.set_max_tensor_bytes(None)
    assert minitrain.max_tensor_bytes() == tensor_limit.physical_memory()
