"""Bad input raises the documented exceptions, naming the op, the attribute or input and the value."""
import numpy as np
import pytest

from minitrain import Executor, Graph, run_node
from minitrain.errors import DTypeError, GraphError, KernelNotFoundError, OpAttributeError, ShapeError
from minitrain.scheduler import schedule

X = np.ones((2, 3), np.float32)


@pytest.mark.parametrize("call,error,words", [
    (lambda: run_node("Relu", [X], attrs={"alpha": 1.0}), OpAttributeError, ["Relu", "alpha"]),
    (lambda: run_node("Gemm", [X, X], attrs={"transB": "yes"}), OpAttributeError, ["Gemm", "transB", "yes"]),
    (lambda: run_node("Gemm", [X, X]), ShapeError, ["Gemm", "(2, 3)"]),
    (lambda: run_node("Gemm", [X, X.T.astype(np.float64)]), DTypeError, ["Gemm", "float64", "float32"]),
    (lambda: run_node("Gemm", [X[0], X.T]), ShapeError, ["Gemm", "rank 1"]),
    (lambda: run_node("Relu", [np.ones(3, np.int32)]), DTypeError, ["Relu", "int32"]),
    (lambda: run_node("Add", [X, np.ones((4,), np.float32)]), ShapeError, ["Add", "(4,)", "broadcast"]),
    (lambda: run_node("Softmax", [X], attrs={"axis": 2}), OpAttributeError, ["Softmax", "axis", "2"]),
    (lambda: run_node("Reshape", [X, np.array([4, -1])]), ShapeError, ["Reshape", "(4, -1)"]),
    (lambda: run_node("Reshape", [X, np.array([-1, -1])]), ShapeError, ["Reshape", "more than one -1"]),
    (lambda: run_node("Transpose", [X], attrs={"perm": [0, 0]}), OpAttributeError, ["Transpose", "perm"]),
    (lambda: run_node("Gemm", [X]), ShapeError, ["Gemm", "B"]),
    (lambda: run_node("ReluGrad", [X, np.ones((3, 2), np.float32)], domain="com.microsoft"), ShapeError,
     ["ReluGrad", "(3, 2)"]),
    (lambda: run_node("Relu", [X], outputs=["Z"]), OpAttributeError, ["Relu", "'Z'"]),
    (lambda: run_node("Relu", [X], output_shapes={"dX": (2, 3)}), OpAttributeError, ["Relu", "dX"]),
    (lambda: run_node("Conv2", [X]), KernelNotFoundError, ["Conv2"]),
    (lambda: run_node("Softmax", [X], opset=0), KernelNotFoundError, ["Softmax", "opset 0"]),
    (lambda: run_node("SoftmaxCrossEntropyLoss", [X, np.array([0, 3])]), ShapeError,
     ["SoftmaxCrossEntropyLoss", "labels", "3"]),
    (lambda: run_node("SoftmaxCrossEntropyLoss", [X, np.array([0, 1, 2])]), ShapeError,
     ["SoftmaxCrossEntropyLoss", "labels", "(3,)"]),
    (lambda: run_node("SoftmaxCrossEntropyLoss", [X, np.array([0, 1])], attrs={"reduction": "avg"}),
     OpAttributeError, ["SoftmaxCrossEntropyLoss", "reduction", "avg"]),
    (lambda: run_node("LeakyRelu", [X], attrs={"alpha": float("nan")}), OpAttributeError,
     ["LeakyRelu", "'alpha'=nan", "not finite"]),
    (lambda: run_node("BatchNormalization", [np.ones((2, 3)), *[np.ones(3)] * 4], attrs={"epsilon": float("inf")}),
     OpAttributeError, ["BatchNormalization", "'epsilon'=inf"]),
    (lambda: run_node("Flatten", [X], attrs={"axis": 2 ** 63}), OpAttributeError,
     ["Flatten", "'axis'", "int64"]),
    (lambda: run_node("Gemm", [X, X], attrs={"transB": 2}), OpAttributeError, ["Gemm", "'transB'=2", "0 or 1"]),
    (lambda: run_node("Dropout", [X], attrs={"seed": -1}), OpAttributeError, ["Dropout", "'seed'=-1"]),
    (lambda: run_node("ConvTranspose", [np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2))],
                      attrs={"strides": [2 ** 40, 2 ** 40]}),
     ShapeError, ["ConvTranspose", "output 'Y'", "bytes", "strides"]),
])
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert isinstance(info.value, (ValueError, TypeError))


def test_graph_errors_name_the_node():
    g = Graph()
    g.add_input("x", np.float32, ("N", 3))
    g.add_node("Relu", ["missing"], ["y"], name="r1")
    g.outputs.append("y")
    with pytest.raises(GraphError, match="r1.*missing"):
        schedule(g)
    g = Graph()
    g.add_input("x", np.float32, (2, 3))
    g.add_node("Relu", ["y"], ["x2"], name="a")
    g.add_node("Relu", ["x2"], ["y"], name="b")
    g.outputs.append("y")
    with pytest.raises(GraphError, match="cycle"):
        schedule(g)


def test_graph_shape_errors_name_the_node():
    g = Graph()
    g.add_input("x", np.float32, ("N", 3))
    g.add_initializer("w", np.ones((4, 5), np.float32))
    g.outputs.append(g.add_node("Gemm", ["x", "w"], name="fc1"))
    with pytest.raises(ShapeError, match="fc1"):
        schedule(g)


def test_executor_checks_feeds():
    g = Graph()
    g.add_input("x", np.float32, ("N", 3))
    g.outputs.append(g.add_node("Relu", ["x"]))
    executor = Executor(schedule(g))
    with pytest.raises(ValueError, match="'x'"):
        executor.run({})
    with pytest.raises(ValueError, match="expects shape"):
        executor.run({"x": np.ones((2, 4), np.float32)})
