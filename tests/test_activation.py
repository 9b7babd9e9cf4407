"""Elementwise activations and their com.microsoft gradient kernels: forward values, the
gradient formulas, finite-difference gradchecks in float64, PyTorch autograd, bad input."""
import numpy as np
import pytest

from minitrain import Graph, errors, run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.gradcheck import gradcheck

MS = "com.microsoft"


def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


FORWARD = {
    "Relu": (dict(), "", lambda x: np.maximum(x, 0)),
    "Sigmoid": (dict(), "", sigmoid),
    "Tanh": (dict(), "", np.tanh),
    "LeakyRelu": (dict(alpha=0.01), "", lambda x: np.where(x >= 0, x, 0.01 * x)),
    "QuickGelu": (dict(alpha=1.702), MS, lambda x: x * sigmoid(1.702 * x)),
}

# gradient op: (forward op, which forward tensor it reads, reference dX(dY, X, Y))
GRADIENTS = {
    "ReluGrad": ("Relu", "X", lambda dy, x, y: np.where(x > 0, dy, 0)),
    "SigmoidGrad": ("Sigmoid", "Y", lambda dy, x, y: dy * y * (1 - y)),
    "TanhGrad": ("Tanh", "Y", lambda dy, x, y: dy * (1 - y * y)),
    "LeakyReluGrad": ("LeakyRelu", "Y", lambda dy, x, y: np.where(y > 0, dy, 0.01 * dy)),
    "QuickGeluGrad": ("QuickGelu", "X", lambda dy, x, y: dy * sigmoid(1.702 * x) * (
        1 + 1.702 * x * (1 - sigmoid(1.702 * x)))),
}


def away_from_kinks(rng, shape):
    """Values whose distance from 0 exceeds the finite-difference step (Relu, LeakyRelu)."""
    x = rng.standard_normal(shape) * 2
    return x + np.sign(x) * 0.05


@pytest.mark.parametrize("op", sorted(FORWARD))
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-14)])
def test_forward_matches_numpy(op, dtype, tol, rng):
    attrs, domain, ref = FORWARD[op]
    x = np.concatenate([rng.standard_normal(70000) * 6, [0.0, 1e-6, -1e-6, 3e-4, -5e-4, 30, -30]]).astype(dtype)
    (y,) = run_node(op, [x.reshape(7, -1)], attrs=attrs, domain=domain)
    assert y.dtype == dtype and y.shape == (7, 10001)
    expected = ref(x.astype(np.float64))
    np.testing.assert_allclose(y.reshape(-1), expected, rtol=tol * 4, atol=tol)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "QuickGelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_is_safe_for_large_inputs(op, dtype):
    attrs, domain, ref = FORWARD[op]
    x = np.array([-1e30, -1e4, -200, -89, -88, 88, 89, 200, 1e4, 1e30], dtype=dtype)
    with np.errstate(all="ignore"):
        (y,) = run_node(op, [x], attrs=attrs, domain=domain)
    assert np.all(np.isfinite(y))
    expected = ref(x.astype(np.float64))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("grad_op", sorted(GRADIENTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_kernels_match_formulas(grad_op, dtype, rng):
    forward, reads, ref = GRADIENTS[grad_op]
    attrs, domain, fwd = FORWARD[forward]
    x = (rng.standard_normal((33, 1031)) * 3).astype(dtype)   # odd sizes: chunk tails
    y = fwd(x.astype(np.float64)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    (dx,) = run_node(grad_op, [dy, x if reads == "X" else y], attrs=attrs, domain=MS)
    assert dx.dtype == dtype
    expected = ref(dy.astype(np.float64), x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(dx, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("op", sorted(FORWARD))
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2, 2)])
def test_gradcheck(op, shape, rng):
    attrs, domain, _ = FORWARD[op]
    gradcheck(op, [away_from_kinks(rng, shape)], attrs, domain=domain, opset=None if domain else 19)


@pytest.mark.parametrize("alpha", [0.2, -0.5, 0.0])
def test_leaky_relu_gradient_any_alpha(alpha, rng):
    """alpha <= 0: Y no longer marks X > 0, so the builder hands the kernel X instead."""
    gradcheck("LeakyRelu", [away_from_kinks(rng, (4, 5))], {"alpha": alpha})


def test_leaky_relu_builder_reads_y_for_positive_alpha():
    g = Graph(name="leaky")
    g.add_input("x", np.float64, (3,))
    g.outputs.append(g.add_node("LeakyRelu", ["x"], ["y"], {"alpha": 0.1}))
    g.add_input("seed", np.float64, (3,))
    grad_graph, _ = build_gradient_graph(g, "y", ["x"], seeds={"y": "seed"})
    (node,) = [n for n in grad_graph.nodes if n.op_type == "LeakyReluGrad"]
    assert node.inputs[1] == "y" and node.domain == MS and node.attrs["alpha"] == pytest.approx(0.1)


@pytest.mark.parametrize("opset", [6, 13, 14, 16, 19])
def test_forward_versions(opset, rng):
    x = rng.standard_normal((4, 3))
    for op in ("Relu", "Sigmoid", "Tanh", "LeakyRelu"):
        (y,) = run_node(op, [x], opset=opset)
        np.testing.assert_allclose(y, FORWARD[op][2](x) if op != "LeakyRelu" else np.where(x >= 0, x, 0.01 * x),
                                   rtol=1e-12)


def test_against_torch_autograd(rng):
    torch = pytest.importorskip("torch")
    x = away_from_kinks(rng, (6, 7))
    dy = rng.standard_normal(x.shape)
    cases = {
        "Relu": (torch.relu, "ReluGrad", "X", {}),
        "Sigmoid": (torch.sigmoid, "SigmoidGrad", "Y", {}),
        "Tanh": (torch.tanh, "TanhGrad", "Y", {}),
        "LeakyRelu": (lambda t: torch.nn.functional.leaky_relu(t, 0.01), "LeakyReluGrad", "Y", {"alpha": 0.01}),
        "QuickGelu": (lambda t: t * torch.sigmoid(1.702 * t), "QuickGeluGrad", "X", {"alpha": 1.702}),
    }
    for op, (fn, grad_op, reads, attrs) in cases.items():
        tx = torch.from_numpy(x).requires_grad_()
        ty = fn(tx)
        ty.backward(torch.from_numpy(dy))
        (y,) = run_node(op, [x], attrs=attrs, domain=FORWARD[op][1])
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-15)
        (dx,) = run_node(grad_op, [dy, x if reads == "X" else y], attrs=attrs, domain=MS)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_non_contiguous_and_empty_inputs(rng):
    x = rng.standard_normal((6, 8))[:, ::2]
    (y,) = run_node("Sigmoid", [x])
    np.testing.assert_allclose(y, sigmoid(x), rtol=1e-12)
    (e,) = run_node("TanhGrad", [np.zeros((0, 3)), np.zeros((0, 3))], domain=MS)
    assert e.shape == (0, 3)


def test_inputs_are_not_written(rng):
    x = rng.standard_normal((50, 50))
    dy = rng.standard_normal((50, 50))
    keep = x.copy(), dy.copy()
    run_node("QuickGeluGrad", [dy, x], domain=MS)
    np.testing.assert_array_equal(x, keep[0])
    np.testing.assert_array_equal(dy, keep[1])


@pytest.mark.parametrize("grad_op", sorted(GRADIENTS))
def test_bad_input(grad_op):
    with pytest.raises(errors.ShapeError, match=grad_op):
        run_node(grad_op, [np.zeros((2, 3)), np.zeros((3, 2))], domain=MS)
    with pytest.raises(errors.DTypeError, match="dtype"):
        run_node(grad_op, [np.zeros((2, 3)), np.zeros((2, 3), dtype=np.float32)], domain=MS)
    with pytest.raises(errors.DTypeError):
        run_node(grad_op, [np.zeros((2, 3), dtype=np.int64), np.zeros((2, 3), dtype=np.int64)], domain=MS)
    with pytest.raises(errors.KernelNotFoundError, match="float16"):
        run_node(grad_op, [np.zeros(3, np.float16), np.zeros(3, np.float16)], domain=MS)


def test_unknown_attribute():
    with pytest.raises(errors.OpAttributeError, match="beta"):
        run_node("LeakyRelu", [np.zeros(3)], attrs={"beta": 1.0})
