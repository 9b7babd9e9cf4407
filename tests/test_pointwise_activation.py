"""The activations, unary math, PRelu, Max/Min, ReduceSumSquare and ReduceL2 of exported CNNs
beyond their rows in the op table: forward and every input gradient (through the op's gradient
builder) against PyTorch autograd, and the graphs torch.onnx.export writes for nn.SiLU,
nn.Hardswish, nn.Hardsigmoid, nn.GELU, nn.Mish, nn.ELU, nn.SELU, nn.Softplus and nn.PReLU at
opsets 13 to 20 imported, run and differentiated beside PyTorch.  Skips without torch."""
import io
import warnings

import numpy as np
import pytest

from minitrain import run_node
from minitrain.autodiff import build_gradient_graph
from minitrain.executor import Executor
from minitrain.gradcheck import gradcheck
from minitrain.scheduler import schedule
from op_table import POINTWISE

torch = pytest.importorskip("torch")
F = torch.nn.functional
MS = "com.microsoft"


def away_from_kinks(rng, shape, kinks=(0.0,), scale=2.0):
    """Normal values at least 0.05 from every kink (finite differences straddle none)."""
    x = rng.standard_normal(shape) * scale
    for k in kinks:
        near = np.abs(x - k) < 0.05
        x[near] = k + np.where(x[near] >= k, 0.05, -0.05)
    return x


def hard_sigmoid(alpha, beta):
    return lambda t: torch.clamp(alpha * t + beta, 0, 1)


# op: (attributes, domain, opset, torch function of the inputs, input builders)
CASES = {
    # F.hardsigmoid's own backward scales by 1/6 rounded to float32: torch.clamp's is exact
    "HardSigmoid": ({"alpha": 1 / 6, "beta": 0.5}, "", None, hard_sigmoid(1 / 6, 0.5),
                    [lambda r: away_from_kinks(r, (3, 4), (-3, 3), 3)]),
    "HardSigmoid-0.3": ({"alpha": 0.3, "beta": 0.4}, "", None, hard_sigmoid(0.3, 0.4),
                        [lambda r: away_from_kinks(r, (3, 4), (-4 / 3, 2), 3)]),
    "HardSwish": ({}, "", None, F.hardswish, [lambda r: away_from_kinks(r, (3, 4), (-3, 3), 3)]),
    "Softplus": ({}, "", None, F.softplus, [lambda r: r.standard_normal((3, 4)) * 4]),
    "Elu": ({"alpha": 0.7}, "", None, lambda t: F.elu(t, 0.7), [lambda r: away_from_kinks(r, (3, 4))]),
    "Selu": ({"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}, "", None, F.selu,   # torch's, in float64
             [lambda r: away_from_kinks(r, (3, 4))]),
    "Gelu": ({}, "", 20, F.gelu, [lambda r: r.standard_normal((3, 4)) * 2]),
    "Gelu-tanh": ({"approximate": "tanh"}, "", 20, lambda t: F.gelu(t, approximate="tanh"),
                  [lambda r: r.standard_normal((3, 4)) * 2]),
    "Gelu-ms": ({}, MS, None, F.gelu, [lambda r: r.standard_normal((3, 4)) * 2]),
    "FastGelu": ({}, MS, None, lambda t, b: F.gelu(t + b, approximate="tanh"),
                 [lambda r: r.standard_normal((3, 4)) * 2, lambda r: r.standard_normal(4)]),
    "Erf": ({}, "", None, torch.erf, [lambda r: r.standard_normal((3, 4))]),
    "Reciprocal": ({}, "", None, torch.reciprocal, [lambda r: away_from_kinks(r, (3, 4), (0.0,)) + 0.5]),
    "PRelu": ({}, "", None, F.prelu, [lambda r: away_from_kinks(r, (2, 3, 4, 4)), lambda r: r.standard_normal(3)]),
    "Max": ({}, "", None, torch.maximum,
            [lambda r: np.array([[1.0, 3.0, -2.0], [0.5, 0.0, 4.0]]), lambda r: np.array([1.0, 0.0, -2.0])]),
    "Min": ({}, "", None, torch.minimum,
            [lambda r: np.array([[1.0, 3.0, -2.0], [0.5, 0.0, 4.0]]), lambda r: np.array([1.0, 0.0, -2.0])]),
    "ReduceSumSquare": ({"axes": [1], "keepdims": 0}, "", 13, lambda t: (t * t).sum(dim=1),
                        [lambda r: r.standard_normal((3, 4, 2))]),
    "ReduceL2": ({"axes": [0, 2]}, "", 13, lambda t: torch.linalg.vector_norm(t, dim=(0, 2), keepdim=True),
                 [lambda r: r.standard_normal((3, 4, 2))]),
}


def _torch_slope(op, inputs):
    """nn.PReLU's weight is one value per channel; ONNX's slope broadcasts it as (C, 1, 1)."""
    return [x.reshape(3, 1, 1) if op == "PRelu" and i == 1 else x for i, x in enumerate(inputs)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_torch_autograd(name, rng):
    attrs, domain, opset, fn, builders = CASES[name]
    op = name.split("-")[0]
    inputs = [b(rng) for b in builders]
    ours = _torch_slope(op, inputs)
    (y,) = run_node(op, ours, attrs=attrs, domain=domain, opset=opset)
    tensors = [torch.from_numpy(x).requires_grad_() for x in inputs]
    ty = fn(*tensors)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    checked = gradcheck(op, ours, attrs, domain=domain, opset=opset, wrt=range(len(inputs)))
    ty.backward(torch.from_numpy(np.random.default_rng(0).standard_normal(y.shape)))   # gradcheck's direction
    for i, t in enumerate(tensors):
        np.testing.assert_allclose(checked[i][0].reshape(t.shape), t.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name} input {i}")


def test_max_shares_a_tie_as_torch_does():
    """The tie at (0, 0) sends half of dY to each input, as torch.maximum does."""
    a, b = np.array([[1.0, 3.0]]), np.array([1.0, 0.0])
    results = gradcheck("Max", [a, b], wrt=[0, 1])
    ta, tb = (torch.from_numpy(x).requires_grad_() for x in (a, b))
    direction = np.random.default_rng(0).standard_normal((1, 2))
    torch.maximum(ta, tb).backward(torch.from_numpy(direction))
    np.testing.assert_allclose(results[0][0], ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(results[1][0], tb.grad.numpy(), rtol=1e-12)
    assert results[0][0][0, 0] == pytest.approx(direction[0, 0] / 2)


# ---- long inputs: the OpenMP chunks of the CPU kernels and their tails ------------------------

LONG_CASES = [("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, ""), ("HardSwish", {}, ""), ("Softplus", {}, ""),
              ("Elu", {"alpha": 0.5}, ""), ("Selu", {}, ""), ("Gelu", {}, MS), ("FastGelu", {}, MS)]


@pytest.mark.parametrize("op,attrs,domain", LONG_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype,tol", [(np.float32, 3e-6), (np.float64, 1e-13)])
def test_long_inputs_on_every_thread_count(op, attrs, domain, dtype, tol, threads, rng):
    """70007 elements (five chunks and a tail) with huge magnitudes and the kinks among them,
    forward and gradient op against the float64 definitions."""
    x = rng.standard_normal(70007) * 5
    x[:9] = [0.0, -3.0, 3.0, 80.0, -80.0, 1e-6, -1e-6, 700.0, -700.0]
    x = x.astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    forward, backward = POINTWISE[op]
    (y,) = run_node(op, [x], attrs=attrs, domain=domain)
    (dx,) = run_node(f"{op}Grad", [dy, x], attrs=attrs, domain=MS)
    assert y.dtype == dx.dtype == dtype
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(y, forward(x.astype(np.float64), attrs), rtol=tol, atol=tol)
        np.testing.assert_allclose(dx, backward(dy.astype(np.float64), x.astype(np.float64), attrs), rtol=tol,
                                   atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hard_swish_special_values(dtype, rng):
    """Infinities and NaN spread through a long input (the vectorised body of the kernels, not
    only their tails): HardSwish gives NaN for -inf and NaN (-inf times a zero gate) as PyTorch
    does; its gradient is 0 at -inf and dY at +inf and, as PyTorch's scalar rule has it, at NaN
    (PyTorch's gradient of -4, 4 and 4 there)."""
    x = rng.standard_normal(4099) * 5
    at = np.arange(5, x.size, 37)
    x[at] = np.array([-np.inf, np.inf, np.nan])[np.arange(at.size) % 3]
    x = x.astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    (y,) = run_node("HardSwish", [x])
    (dx,) = run_node("HardSwishGrad", [dy, x], domain=MS)
    np.testing.assert_allclose(y, F.hardswish(torch.from_numpy(x)).numpy(), rtol=1e-6, atol=1e-6)
    finite = torch.from_numpy(np.nan_to_num(x, nan=4.0, posinf=4.0, neginf=-4.0)).requires_grad_()
    F.hardswish(finite).backward(torch.from_numpy(dy))
    np.testing.assert_allclose(dx, finite.grad.numpy(), rtol=1e-6, atol=1e-6)


# ---- exported graphs -------------------------------------------------------------------------

EXPORTED = {
    "SiLU": lambda: torch.nn.SiLU(), "Hardswish": lambda: torch.nn.Hardswish(),
    "Hardsigmoid": lambda: torch.nn.Hardsigmoid(), "GELU": lambda: torch.nn.GELU(),
    "GELU-tanh": lambda: torch.nn.GELU(approximate="tanh"), "Mish": lambda: torch.nn.Mish(),
    "ELU": lambda: torch.nn.ELU(0.5), "SELU": lambda: torch.nn.SELU(), "Softplus": lambda: torch.nn.Softplus(),
    "PReLU": lambda: torch.nn.PReLU(3, 0.2),
}
# exports whose graph holds a constant of torch's as a float32 attribute (HardSigmoid's 1/6,
# Selu's alpha and gamma): equal to float32's precision only
FLOAT32_ATTRIBUTES = {("Hardsigmoid", 13), ("Hardsigmoid", 17), ("Hardsigmoid", 20), ("Hardswish", 13),
                      ("SELU", 13), ("SELU", 17), ("SELU", 20)}


def constants_as_initializers(model):
    """The model with each Constant node's tensor moved into the initializers (the Constant op
    itself is another module's concern; what is checked here are the activations' ops)."""
    from onnx import numpy_helper
    graph = model.graph
    for node in [n for n in graph.node if n.op_type == "Constant"]:
        value = numpy_helper.to_array(node.attribute[0].t)
        graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        graph.node.remove(node)
    return model


def exported(module, opset):
    """(onnx.ModelProto of Conv -> module, the torch model), exported in training mode."""
    import onnx
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), module).double()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(2, 2, 5, 5, dtype=torch.float64),), buffer, dynamo=False,
                          opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                          input_names=["x"], output_names=["y"])
    return constants_as_initializers(onnx.load_from_string(buffer.getvalue())), model


def close(got, expected, rtol, what=""):
    """Equal to rtol relative to the largest expected magnitude (sums of many terms cancel)."""
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(expected)))),
                               err_msg=what)


@pytest.mark.parametrize("opset", [13, 17, 20])
@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_exported_activation_trains_beside_torch(name, opset, rng):
    """The imported graph's output, and the gradients of sum(R * output) with respect to the
    input and every parameter, against PyTorch's."""
    import minitrain.onnx
    proto, model = exported(EXPORTED[name](), opset)
    rtol = 1e-7 if (name, opset) in FLOAT32_ATTRIBUTES else 1e-10
    graph = minitrain.onnx.load(proto)
    x = rng.standard_normal((2, 2, 5, 5))
    direction = rng.standard_normal((2, 3, 5, 5))
    tx = torch.from_numpy(x).requires_grad_()
    ty = model(tx)
    ty.backward(torch.from_numpy(direction))
    (y,) = Executor(schedule(graph, ["y"])).run({"x": x}).values()
    close(y, ty.detach().numpy(), rtol)
    params = {name: name if name in graph.initializers else
              next(i for i in graph.initializers if i.startswith("onnx::PRelu"))      # the exporter renames it
              for name, _ in model.named_parameters()}
    seed = graph.add_input("seed", np.float64, direction.shape)
    grad_graph, grads = build_gradient_graph(graph, ["y"], ["x"] + list(params.values()), seeds={"y": seed})
    got = Executor(schedule(grad_graph, list(grads.values()))).run({"x": x, "seed": direction})
    close(got[grads["x"]], tx.grad.numpy(), 10 * rtol)
    for param, p in model.named_parameters():
        close(got[grads[params[param]]].reshape(p.shape), p.grad.numpy(), 10 * rtol, param)
