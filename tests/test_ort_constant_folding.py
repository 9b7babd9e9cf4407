"""minitrain.onnx.training's plan-time folding (constant_folding.py): what the shapes of a
step's inputs and the model's constants decide becomes a constant; the state tensors bound to
the step, the fed inputs, fetched values and large values are never folded."""
import numpy as np

from minitrain.constant_folding import MAX_ELEMENTS
from minitrain.graph import Graph
from minitrain.onnx.training.constant_folding import fold_constants


def test_fold_constants_keeps_what_changes_between_steps():
    graph = Graph(opset_imports={"": 17})
    graph.add_input("x", np.float32, (4, 3))
    graph.add_initializer("w", np.ones(3, np.float32))         # bound to the state: variable
    graph.add_initializer("two", np.array(2, np.int64))
    graph.add_initializer("big", np.ones(MAX_ELEMENTS + 1, np.float32))
    graph.add_initializer("half", np.array(0.5, np.float32))
    graph.add_node("Size", ["x"], ["size"], name="size")
    graph.add_node("Div", ["size", "two"], ["count"], name="count")
    graph.add_node("Shape", ["x"], ["last_dim"], {"start": -1}, name="last_dim")
    graph.add_node("Identity", ["w"], ["w_copy"], name="w_copy")
    graph.add_node("Mul", ["x", "half"], ["x_half"], name="x_half")
    graph.add_node("Mul", ["big", "half"], ["big_half"], name="big_half")
    graph.add_node("Mul", ["half", "half"], ["quarter"], name="quarter")
    graph.outputs = ["count", "last_dim", "w_copy", "x_half", "big_half", "quarter"]
    folded = fold_constants(graph, {"quarter"}, {"w"})
    assert folded == 3
    assert sorted(node.name for node in graph.nodes) == ["big_half", "quarter", "w_copy", "x_half"]
    assert graph.initializers["size"] == 12 and graph.initializers["count"] == 6
    np.testing.assert_array_equal(graph.initializers["last_dim"], [3])


def test_fold_constants_follows_the_shared_rule():
    """The op list is constant_folding.py's: a Constant node and ConstantOfShape of a known
    shape fold into initializers too."""
    graph = Graph(opset_imports={"": 17})
    graph.add_input("x", np.float32, (4, 3))
    graph.add_node("Constant", [], ["one"], {"value": np.array(1.0, np.float32)}, name="one")
    graph.add_node("Shape", ["x"], ["shape"], name="shape")
    graph.add_node("ConstantOfShape", ["shape"], ["zeros"], {"value": np.ones(1, np.float32)}, name="zeros")
    graph.add_node("Add", ["zeros", "one"], ["twos"], name="twos")
    graph.add_node("Mul", ["x", "twos"], ["y"], name="y")
    graph.outputs = ["y"]
    assert fold_constants(graph, {"y"}, set()) == 4
    assert [node.name for node in graph.nodes] == ["y"]
    np.testing.assert_array_equal(graph.initializers["twos"], np.full((4, 3), 2, np.float32))
