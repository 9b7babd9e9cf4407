"""Constant folding at plan time (minitrain/constant_folding.py): Constant nodes and the cheap
nodes computed from constants only leave no step in the plan, their values are the plan's
constants and the results are unchanged; initializers (parameters, state), ops outside
FOLDED_OPS and values larger than MAX_ELEMENTS are never folded."""
import textwrap

import numpy as np
import pytest

from minitrain import Executor, Graph
from minitrain.constant_folding import FOLDED_OPS, MAX_ELEMENTS
from minitrain.scheduler import schedule
from stubbed_cuda import run_stubbed


def _steps(plan):
    return [s.node.op_type for s in plan.steps]


def test_a_constant_node_is_a_plan_constant_not_a_step():
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float32, ("N", 3))
    half = g.add_node("Constant", [], attrs={"value": np.array(0.5, np.float32)})
    g.outputs.append(g.add_node("Mul", ["x", half]))
    plan = schedule(g)
    assert _steps(plan) == ["Mul"]
    assert plan.constants[half] == np.float32(0.5)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Executor(plan).run({"x": x})[g.outputs[0]], x * 0.5)


def test_nodes_of_constants_fold_through_a_chain():
    """Cast, Identity and Concat of constants, then the arithmetic of two scalars: only the
    node reading the graph input stays."""
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float64, ("N", 4))
    low = g.add_node("Constant", [], attrs={"value": np.array([1.0, 2.0], np.float32)})
    high = g.add_node("Constant", [], attrs={"value_floats": [3.0, 4.0]})
    joined = g.add_node("Concat", [low, high], attrs={"axis": 0})
    wide = g.add_node("Cast", [g.add_node("Identity", [joined])], attrs={"to": 11})
    sqrt2 = g.add_node("Sqrt", [g.add_node("Constant", [], attrs={"value": np.array(2.0)})])
    scale = g.add_node("Div", [wide, sqrt2])
    g.outputs.append(g.add_node("Mul", ["x", scale]))
    plan = schedule(g)
    assert _steps(plan) == ["Mul"]
    assert list(plan.constants) == [scale]      # the values only folded nodes read are not kept
    np.testing.assert_allclose(plan.constants[scale], np.array([1.0, 2.0, 3.0, 4.0]) / np.sqrt(2.0))
    assert plan.constants[scale].dtype == np.float64
    x = np.ones((2, 4))
    np.testing.assert_allclose(Executor(plan).run({"x": x})[g.outputs[0]], x * plan.constants[scale])


def test_a_folded_value_can_be_fetched_and_a_shape_constant_still_shapes():
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float32, (2, 3, 4))
    shape = g.add_node("Constant", [], attrs={"value": np.array([6, -1], np.int64)})
    g.outputs += [g.add_node("Reshape", ["x", shape]), shape]
    plan = schedule(g)
    assert _steps(plan) == ["Reshape"]
    got = Executor(plan).run({"x": np.zeros((2, 3, 4), np.float32)})
    assert got[g.outputs[0]].shape == (6, 4)
    np.testing.assert_array_equal(got[shape], [6, -1])


def test_initializers_are_never_folded_from():
    """An initializer is a parameter or state that changes between runs: a node reading one
    stays a step, and a run after the initializer changed sees the new value."""
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float32, (2,))
    g.add_initializer("w", np.array([1.0, 2.0], np.float32))
    one = g.add_node("Constant", [], attrs={"value": np.array(1.0, np.float32)})
    shifted = g.add_node("Add", ["w", one])
    g.outputs.append(g.add_node("Mul", ["x", shifted]))
    plan = schedule(g)
    assert _steps(plan) == ["Add", "Mul"]
    executor = Executor(plan)
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(executor.run({"x": x})[g.outputs[0]], [2.0, 3.0])
    g.initializers["w"][...] = [5.0, 6.0]
    executor = Executor(plan)
    np.testing.assert_array_equal(executor.run({"x": x})[g.outputs[0]], [6.0, 7.0])


def test_ops_outside_the_folded_set_stay_steps():
    """Dropout draws a new mask per run, so a Dropout of a constant is still a step."""
    assert "Dropout" not in FOLDED_OPS
    g = Graph(opset_imports={"": 17})
    ones = g.add_node("Constant", [], attrs={"value": np.ones(64, np.float32)})
    ratio = g.add_node("Constant", [], attrs={"value": np.array(0.5, np.float32)})
    training = g.add_node("Constant", [], attrs={"value": np.array(True)})
    g.outputs.append(g.add_node("Dropout", [ones, ratio, training]))
    plan = schedule(g)
    assert _steps(plan) == ["Dropout"]
    executor = Executor(plan)
    first, second = (executor.run({})[g.outputs[0]] for _ in range(2))
    assert not np.array_equal(first, second)


def test_a_value_beyond_the_size_limit_stays_a_step():
    """A plan constant lives as long as the plan: a node of constants whose output holds more than
    MAX_ELEMENTS values is computed by its step, which holds the memory only while it runs."""
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float32, (MAX_ELEMENTS + 1,))
    size = g.add_node("Constant", [], attrs={"value": np.array([MAX_ELEMENTS + 1], np.int64)})
    ones = g.add_node("ConstantOfShape", [size], attrs={"value": np.ones(1, np.float32)})
    g.outputs.append(g.add_node("Add", ["x", ones]))
    plan = schedule(g)
    assert _steps(plan) == ["ConstantOfShape", "Add"]
    assert list(plan.constants) == [size]
    x = np.arange(MAX_ELEMENTS + 1, dtype=np.float32)
    np.testing.assert_array_equal(Executor(plan).run({"x": x})[g.outputs[0]], x + 1)


def test_nodes_no_fetched_value_needs_are_neither_folded_nor_run():
    g = Graph(opset_imports={"": 17})
    g.add_input("x", np.float32, (2,))
    unused = g.add_node("Constant", [], attrs={"value": np.ones(3, np.float32)})
    g.add_node("Neg", [unused])
    g.outputs.append(g.add_node("Relu", ["x"]))
    plan = schedule(g, g.outputs)
    assert _steps(plan) == ["Relu"]
    assert plan.constants == {}


def test_a_constant_read_in_host_and_device_memory_is_placed_in_both():
    """On CUDA, Resize reads its scales in host memory and Mul in device memory: the plan holds
    a constant in each, and no copy step (placement checked with pycuda stubbed)."""
    found = run_stubbed(textwrap.dedent("""
        import json
        import numpy as np
        from minitrain import Graph
        from minitrain.providers import get_provider
        from minitrain.scheduler import schedule
        get_provider("cuda")    # registers the CUDA kernels
        g = Graph(opset_imports={"": 13})
        g.add_input("x", np.float32, (1, 1, 2, 2))
        g.add_input("v", np.float32, (4,))
        scales = g.add_node("Constant", [], attrs={"value": np.array([1, 1, 2, 2], np.float32)})
        g.outputs += [g.add_node("Resize", ["x", "", scales]), g.add_node("Mul", [scales, "v"])]
        plan = schedule(g, providers="cuda")
        print(json.dumps({"steps": [[s.node.op_type, s.provider, s.node.inputs] for s in plan.steps],
                          "constants": {name: plan.locations[name] for name in plan.constants}}))
        """))
    assert found["steps"] == [["Resize", "cuda", ["x", "", "constant_out_0@cpu"]],
                              ["Mul", "cuda", ["constant_out_0", "v"]]]
    assert found["constants"] == {"constant_out_0": "cuda", "constant_out_0@cpu": "cpu"}


# --------------------------------------------------------------------------- exported families
torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from model_families import FAMILIES  # noqa: E402
from family_plans import exported_session  # noqa: E402


@pytest.mark.parametrize("mode", ["training", "eval"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_plans_of_an_exported_family_hold_no_constant_node(family, mode):
    """ReLU6's bounds, Gelu's constants and Resize's scales are plan constants: no plan step
    is a Constant node, and no step reads only constants."""
    session = exported_session(family, mode, "cpu")
    for plan in (session.train_plan, session._eval_executor(True)[0].plan):
        assert "Constant" not in _steps(plan)
        constant_only = [s.node.name for s in plan.steps if s.node.inputs
                         and all(not n or n in plan.constants for n in s.node.inputs)]
        assert constant_only == []
