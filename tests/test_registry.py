"""The versioned kernel registry: the graph's opset picks the kernel, misses say what exists."""
import numpy as np
import pytest

import minitrain
from minitrain import Executor, Graph, run_node
from minitrain.errors import KernelNotFoundError
from minitrain.registry import lookup, register_kernel, registered_kernels
from minitrain.scheduler import schedule


def softmax_graph(opset, shape):
    g = Graph(opset_imports={"": opset})
    g.add_input("x", np.float32, shape)
    g.outputs.append(g.add_node("Softmax", ["x"], attrs={"axis": 1}))
    return g


def test_softmax_versions_are_separate_kernels():
    old, _ = lookup("Softmax", "", 12, "cpu", np.float32)
    new, _ = lookup("Softmax", "", 13, "cpu", np.float32)
    assert (old.since_version, old.end_version) == (1, 12)
    assert (new.since_version, new.end_version) == (13, None)


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_graph_opset_selects_softmax_semantics(rng, opset):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = Executor(schedule(softmax_graph(opset, x.shape))).run({"x": x})
    (out,) = y.values()
    if opset < 13:   # coerced to 2-D: normalised over the flattened (3, 4) block
        np.testing.assert_allclose(out.reshape(2, -1).sum(1), 1.0, rtol=1e-5)
        assert not np.allclose(out.sum(1), 1.0)
    else:            # single axis 1
        np.testing.assert_allclose(out.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out, run_node("Softmax", [x], attrs={"axis": 1}, opset=opset)[0])


def test_gradient_builder_follows_the_opset():
    from minitrain.autodiff import build_gradient_graph
    for opset, grad_op in ((11, "SoftmaxGrad"), (13, "SoftmaxGrad_13")):
        g = softmax_graph(opset, (2, 3))
        g.add_initializer("w", np.ones((2, 3), np.float32))
        g.nodes[0].inputs = ["w"]
        g.inputs = []
        seeded = g.add_input("dy", np.float32, (2, 3))
        full, grads = build_gradient_graph(g, g.outputs[0], ["w"], seeds={g.outputs[0]: seeded})
        assert grad_op in [n.op_type for n in full.nodes]


def test_miss_lists_what_is_registered():
    with pytest.raises(KernelNotFoundError) as err:
        lookup("Softmax", "", 13, "cpu", np.int32)
    message = str(err.value)
    assert "Softmax" in message and "int32" in message and "versions 1-12" in message and "13-" in message
    with pytest.raises(KernelNotFoundError, match="provider 'cuda'"):
        lookup("Relu", "", 14, "cuda", np.float32)


def test_run_node_float16_on_cpu_is_a_clear_miss():
    with pytest.raises(KernelNotFoundError, match="float16"):
        run_node("Relu", [np.ones(3, np.float16)])


def test_overlapping_registration_is_refused():
    with pytest.raises(ValueError, match="overlaps"):
        register_kernel("Softmax", since=12, end=13)(lambda ctx: {})


def test_registered_kernels_lists_versions():
    defs = registered_kernels("Softmax", "")
    assert {(d.since_version, d.end_version) for d in defs} >= {(1, 12), (13, None)}
    assert minitrain.KernelDef is type(defs[0])
