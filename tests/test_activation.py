"""Elementwise activations and their com.microsoft gradient kernels beyond their rows in the
op table (op_table.py: values, gradient formulas, finite differences, every alpha's builder
route): long and odd-sized inputs that take the threaded chunks and their tails, huge and
non-finite inputs, every opset's schema, PyTorch autograd, bad input, and the streaming-store
path (ext/grad_stream.h) against the plain one."""
import numpy as np
import pytest

from minitrain import Graph, errors, run_node
from minitrain._ext import activation as _act
from minitrain.autodiff import build_gradient_graph
from minitrain.providers.cpu import activation as cpu_activation
from minitrain.providers.cpu import streaming

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


@pytest.mark.parametrize("op", sorted(FORWARD))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_propagates_nan(op, dtype):
    """NaN in, NaN out, as in ONNX's reference, onnxruntime and PyTorch: a diverging run must
    show.  Long enough to take the threaded chunks too."""
    attrs, domain, _ = FORWARD[op]
    x = np.tile(np.array([np.nan, 1.0, -1.0, 0.0], dtype), 20000)
    (y,) = run_node(op, [x], attrs=attrs, domain=domain)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(x))


def test_relu_of_infinities_and_signed_zero():
    x = np.array([np.inf, -np.inf, -0.0, 0.0], np.float32)
    np.testing.assert_array_equal(run_node("Relu", [x])[0], [np.inf, 0, 0, 0])


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
    leaky = float(np.float32(0.01))      # the default alpha, a float32 as ONNX holds it
    for op in ("Relu", "Sigmoid", "Tanh", "LeakyRelu"):
        (y,) = run_node(op, [x], opset=opset)
        np.testing.assert_allclose(y, FORWARD[op][2](x) if op != "LeakyRelu" else np.where(x >= 0, x, leaky * x),
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


# --------------------------------------------------------------------------- streaming stores
KERNEL_NAMES = ["relu", "sigmoid", "tanh", "leaky_relu", "quick_gelu"]


def misaligned(n, dtype, offset):
    """A length-n output view starting `offset` elements into a 64-byte aligned buffer, so
    the streaming path meets every head length up to a cache line."""
    raw = np.empty(n * np.dtype(dtype).itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset * np.dtype(dtype).itemsize
    return raw[start:start + n * np.dtype(dtype).itemsize].view(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 13, 515, 2 * 16384 + 1037])     # blocks, chunks and tails
def test_streamed_gradient_matches_the_plain_one(dtype, n, rng):
    """The streamed loops (ext/grad_stream.h), into outputs at every offset from a cache
    line: bitwise equal to the plain ones.  QuickGeluGrad never streams but takes the flag:
    its float32 exp (fastmath.h) rounds differently in the scalar loops that the split into
    head, vectors and tail moves (-ffast-math reassociates them)."""
    v = (rng.standard_normal(n) * 4).astype(dtype)
    dy = rng.standard_normal(n).astype(dtype)
    lanes = 64 // np.dtype(dtype).itemsize
    for name in KERNEL_NAMES:
        plain = np.empty(n, dtype)
        _act.backward(name, dy, v, plain, 0.3, 2, False)
        for offset in range(lanes):
            dx = misaligned(n, dtype, offset)
            dx[:] = np.nan
            _act.backward(name, dy, v, dx, 0.3, 2, True)
            if name == "quick_gelu" and dtype == np.float32:
                np.testing.assert_allclose(dx, plain, rtol=1e-5, atol=1e-30, err_msg=f"offset {offset}")
            else:
                np.testing.assert_array_equal(dx.view(np.uint8), plain.view(np.uint8), err_msg=f"{name} {offset}")


@pytest.fixture
def streamed(monkeypatch):
    """The `stream` flag of every gradient kernel call the provider makes."""
    calls = []

    def backward(*args):
        calls.append(args[-1])
        _act.backward(*args)

    monkeypatch.setattr(cpu_activation, "_act", type("Recorder", (), {"backward": staticmethod(backward)}))
    yield calls
    streaming.set_stream_threshold(None)


def test_provider_streams_only_above_the_threshold(streamed, rng):
    x = rng.standard_normal((64, 6, 28, 28)).astype(np.float32)     # LeNet's first activation
    dy = rng.standard_normal(x.shape).astype(np.float32)
    (dx,) = run_node("ReluGrad", [dy, x], domain=MS)
    assert streamed == [False]
    streaming.set_stream_threshold(3 * x.nbytes - 1)
    (dx_streamed,) = run_node("ReluGrad", [dy, x], domain=MS)
    run_node("QuickGeluGrad", [dy, x], domain=MS)       # an exp per element: never streams
    assert streamed == [False, True, False]
    np.testing.assert_array_equal(dx_streamed, dx)


def test_stream_threshold_is_the_last_level_cache():
    llc = streaming.last_level_cache_bytes()
    assert llc >= 1 << 20
    assert streaming.stream_threshold() == llc
    small, big = np.empty(llc // 8, np.uint8), np.empty(llc // 2 + 1, np.uint8)
    assert not streaming.should_stream(small, small, small)
    assert streaming.should_stream(big, big)


STREAMED_GRADIENTS_C = r"""
#include <stdio.h>
#include <string.h>
#include "grad_stream.h"
/* Each streamed loop of grad_stream.h against the scalar formula, into outputs at every
   offset from a cache line: whole lines only, exact values, nothing outside touched. */
#define CHECK(T, NAME, SCALAR)                                                              \
    for (int off = 0; off < 64 / (int)sizeof(T); off++)                                    \
        for (int n = 0; n < 300; n = n < 40 ? n + 1 : n * 2 + 3) {                        \
            T* dx = (T*)out + off;                                                          \
            for (int i = 0; i < 400; i++) ((T*)out)[i] = (T)-7;                             \
            ptrdiff_t head = mt_stream_head(dx, n, sizeof(T));                              \
            ptrdiff_t done = NAME(dy_##T + head, v_##T + head, dx + head, n - head, (T)0.3); \
            mt_stream_fence();                                                              \
            if (done % (64 / sizeof(T)) || n - head - done < 0 || n - head - done >= 64 / (ptrdiff_t)sizeof(T)) { \
                printf(#NAME ": %td of %d elements at offset %d\n", done, n, off);         \
                return 1;                                                                   \
            }                                                                               \
            for (int i = -off; i < 400 - off; i++) {                                        \
                T g = dy_##T[i < 0 ? 0 : i], u = v_##T[i < 0 ? 0 : i], a = (T)0.3;         \
                T want = i >= head && i < head + done ? (SCALAR) : (T)-7;                   \
                (void)g; (void)u; (void)a;                                                  \
                if (memcmp(&dx[i], &want, sizeof want)) {                                   \
                    printf(#NAME ": element %d of %d at offset %d\n", i, n, off);          \
                    return 1;                                                               \
                }                                                                           \
            }                                                                               \
        }
static float dy_float[400], v_float[400];
static double dy_double[400], v_double[400];
static double out[512] __attribute__((aligned(64)));
int main(void) {
    for (int i = 0; i < 400; i++) {
        dy_float[i] = dy_double[i] = (i % 13 - 6) * 0.37;
        v_float[i] = v_double[i] = (i % 7 - 3) * 0.29;
    }
    CHECK(float, mt_relu_grad_stream_f, u > 0 ? g : 0.0f)
    CHECK(double, mt_relu_grad_stream_d, u > 0 ? g : 0.0)
    CHECK(float, mt_leaky_relu_grad_stream_f, u > 0 ? g : a * g)
    CHECK(double, mt_leaky_relu_grad_stream_d, u > 0 ? g : a * g)
    CHECK(float, mt_sigmoid_grad_stream_f, g * u * (1.0f - u))
    CHECK(double, mt_sigmoid_grad_stream_d, g * u * (1.0 - u))
    CHECK(float, mt_tanh_grad_stream_f, g * (1.0f - u * u))
    CHECK(double, mt_tanh_grad_stream_d, g * (1.0 - u * u))
    CHECK(float, mt_softmax_grad_stream_f, u * (g - a))
    CHECK(double, mt_softmax_grad_stream_d, u * (g - a))
    CHECK(float, mt_log_softmax_grad_stream_f, g - u * a)
    CHECK(double, mt_log_softmax_grad_stream_d, g - u * a)
    return 0;
}
"""


@pytest.mark.parametrize("isa", ["-mavx512f", "-mavx", "-msse2", "-U__SSE2__"])
def test_streamed_gradients_of_each_instruction_set(isa, run_c):
    """ext/grad_stream.h's loops write exactly the scalar formulas (heads, whole lines,
    offsets; contraction to FMA off, as the comparison is bitwise) in each of stream.h's
    variants; -U__SSE2__ selects the ordinary-store fallback."""
    run_c(STREAMED_GRADIENTS_C, ["-O2", "-ffp-contract=off", isa])


def test_default_alphas_are_the_float32_values_onnx_holds(rng):
    """ONNX holds float attributes as float32: without an alpha, float64 results use
    float32(0.01) (LeakyRelu) and float32(1.702) (QuickGelu), as ONNX Runtime does, and so
    does the gradient node that the builder emits."""
    x = away_from_kinks(rng, (4, 5))
    leaky, quick = float(np.float32(0.01)), float(np.float32(1.702))
    (y,) = run_node("LeakyRelu", [x])
    np.testing.assert_array_equal(y, np.where(x > 0, x, x * leaky))
    (y,) = run_node("QuickGelu", [x], domain=MS)
    np.testing.assert_allclose(y, x * sigmoid(quick * x), rtol=1e-14, atol=1e-300)
    g = Graph(name="leaky")
    g.add_input("x", np.float64, (3,))
    g.outputs.append(g.add_node("LeakyRelu", ["x"], ["y"]))
    g.add_input("seed", np.float64, (3,))
    grad_graph, _ = build_gradient_graph(g, "y", ["x"], seeds={"y": "seed"})
    (node,) = [n for n in grad_graph.nodes if n.op_type == "LeakyReluGrad"]
    assert node.attrs["alpha"] == leaky


def test_every_float_default_is_a_float32_value():
    from minitrain.ops.schema import _SCHEMAS
    doubles = [(s.op_type, s.since_version, name, a.default) for versions in _SCHEMAS.values() for s in versions
               for name, a in s.attrs.items()
               if a.kind == "float" and isinstance(a.default, float) and a.default != float(np.float32(a.default))]
    assert not doubles
