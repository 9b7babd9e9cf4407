"""The core ops of the engine: forward values against NumPy references, and every gradient
against float64 central finite differences through the registered gradient builders."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck


def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def coerced_softmax_ref(x, axis, log=False):
    rows = int(np.prod(x.shape[:axis]))
    flat = x.reshape(rows, -1)
    y = softmax_ref(flat, 1)
    return (np.log(y) if log else y).reshape(x.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_forward_and_gradient(rng, dtype, trans_a, trans_b):
    a = rng.standard_normal((4, 3) if trans_a else (3, 4)).astype(dtype)
    b = rng.standard_normal((5, 4) if trans_b else (4, 5)).astype(dtype)
    c = rng.standard_normal((5,)).astype(dtype)
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.7, "beta": 1.5}
    (y,) = run_node("Gemm", [a, b, c], attrs=attrs)
    ref = 0.7 * (a.T if trans_a else a) @ (b.T if trans_b else b) + 1.5 * c
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    gradcheck("Gemm", [a, b, c], attrs)


@pytest.mark.parametrize("c_shape", [None, (1,), (3, 1), (3, 5)])
def test_gemm_bias_broadcast_gradient(rng, c_shape):
    inputs = [rng.standard_normal((3, 4)), rng.standard_normal((4, 5))]
    inputs.append(None if c_shape is None else rng.standard_normal(c_shape))
    gradcheck("Gemm", inputs)


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1)])
def test_gemm_gradient_before_opset_11_gives_every_gemm_its_c(rng, opset, trans_a, trans_b):
    """Gemm requires C before opset 11: the gradient's Gemm nodes get a zero C that beta 0 leaves out."""
    a = rng.standard_normal((4, 3) if trans_a else (3, 4))
    b = rng.standard_normal((5, 4) if trans_b else (4, 5))
    gradcheck("Gemm", [a, b, rng.standard_normal((3, 1))], {"transA": trans_a, "transB": trans_b, "alpha": 0.7},
              opset=opset)
    with pytest.raises(ShapeError, match="Gemm.*'C'"):
        run_node("Gemm", [a, b], attrs={"transA": trans_a, "transB": trans_b}, opset=opset)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                             ((1, 3, 4), (2, 4, 5))])
def test_matmul(rng, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    np.testing.assert_allclose(run_node("MatMul", [a, b])[0], a @ b, rtol=1e-12)
    gradcheck("MatMul", [a, b])


@pytest.mark.parametrize("op,ref", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)),
                                             ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((2, 1, 4), (1, 3, 1))])
def test_broadcast_arithmetic(rng, op, ref, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    np.testing.assert_allclose(run_node(op, [a, b])[0], ref(a, b), rtol=1e-12)
    gradcheck(op, [a, b])


def test_sum_variadic(rng):
    xs = [rng.standard_normal((2, 3, 4)), rng.standard_normal((4,)), rng.standard_normal((3, 1))]
    np.testing.assert_allclose(run_node("Sum", xs)[0], xs[0] + xs[1] + xs[2], rtol=1e-12)
    gradcheck("Sum", xs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu(rng, dtype):
    x = rng.standard_normal((7, 9)).astype(dtype)
    np.testing.assert_array_equal(run_node("Relu", [x])[0], np.maximum(x, 0))
    dy = rng.standard_normal(x.shape).astype(dtype)
    (dx,) = run_node("ReluGrad", [dy, x], domain="com.microsoft")
    np.testing.assert_array_equal(dx, np.where(x > 0, dy, 0))
    gradcheck("Relu", [x.astype(np.float64) + np.sign(x) * 0.01])


@pytest.mark.parametrize("axis,expected", [(0, (1, 24)), (1, (2, 12)), (2, (6, 4)), (3, (24, 1)),
                                           (-1, (6, 4)), (-2, (2, 12)), (-3, (1, 24))])
def test_flatten(rng, axis, expected):
    """ONNX: a negative axis counts from the back (axis + rank); [-rank, rank] is valid."""
    x = rng.standard_normal((2, 3, 4))
    (y,) = run_node("Flatten", [x], attrs={"axis": axis})
    assert y.shape == expected
    np.testing.assert_array_equal(y, x.reshape(expected))
    gradcheck("Flatten", [x], {"axis": axis})


@pytest.mark.parametrize("axis", [4, -4])
def test_flatten_axis_out_of_range(axis):
    with pytest.raises(OpAttributeError, match=f"Flatten: attribute 'axis'={axis}"):
        run_node("Flatten", [np.ones((2, 3, 4))], attrs={"axis": axis})


@pytest.mark.parametrize("target,expected", [([4, -1], (4, 6)), ([0, -1], (2, 12)), ([2, 3, 4], (2, 3, 4)),
                                             ([-1], (24,))])
def test_reshape(rng, target, expected):
    x = rng.standard_normal((2, 3, 4))
    (y,) = run_node("Reshape", [x, np.array(target, dtype=np.int64)])
    assert y.shape == expected
    np.testing.assert_array_equal(y.reshape(-1), x.reshape(-1))
    gradcheck("Reshape", [x, np.array(target, dtype=np.int64)])


def test_identity_shape_transpose(rng):
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(run_node("Identity", [x])[0], x)
    np.testing.assert_array_equal(run_node("Shape", [x])[0], [2, 3, 4])
    np.testing.assert_array_equal(run_node("Transpose", [x], attrs={"perm": [2, 0, 1]})[0], x.transpose(2, 0, 1))
    gradcheck("Identity", [x])
    gradcheck("Transpose", [x], {"perm": [2, 0, 1]})
    gradcheck("Transpose", [x])


@pytest.mark.parametrize("attrs,expected", [({}, [2, 3, 4, 5]), ({"start": 1}, [3, 4, 5]), ({"start": -2}, [4, 5]),
                                            ({"end": -1}, [2, 3, 4]), ({"start": 1, "end": 3}, [3, 4]),
                                            ({"start": -9, "end": 9}, [2, 3, 4, 5]), ({"start": 3, "end": 1}, [])])
def test_shape_start_end(attrs, expected):
    """Shape-15's start and end: negative from the back, clamped to [0, rank], empty when crossed."""
    (y,) = run_node("Shape", [np.zeros((2, 3, 4, 5))], attrs=attrs)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, np.array(expected, dtype=np.int64))


def test_shape_before_opset_15_has_no_start():
    with pytest.raises(OpAttributeError, match="start"):
        run_node("Shape", [np.zeros((2, 3))], attrs={"start": 1}, opset=14)


@pytest.mark.parametrize("op,log", [("Softmax", False), ("LogSoftmax", True)])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_opset13_single_axis(rng, op, log, axis):
    x = rng.standard_normal((3, 4, 5)) * 3
    (y,) = run_node(op, [x], attrs={"axis": axis}, opset=13)
    ref = softmax_ref(x, axis)
    np.testing.assert_allclose(y, np.log(ref) if log else ref, rtol=1e-10, atol=1e-12)
    gradcheck(op, [x], {"axis": axis}, opset=13)


@pytest.mark.parametrize("op,log", [("Softmax", False), ("LogSoftmax", True)])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_opset11_coerced(rng, op, log, axis):
    x = rng.standard_normal((3, 4, 5)) * 3
    (y,) = run_node(op, [x], attrs={"axis": axis}, opset=11)
    np.testing.assert_allclose(y, coerced_softmax_ref(x, axis % 3, log), rtol=1e-10, atol=1e-12)
    gradcheck(op, [x], {"axis": axis}, opset=11)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    (y,) = run_node("Softmax", [x])
    assert np.all(np.isfinite(y)) and y[0, 0] == pytest.approx(1.0)
    (ly,) = run_node("LogSoftmax", [x])
    assert np.all(np.isfinite(ly))


@pytest.mark.parametrize("op", ["SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"])
def test_softmax_grad_kernels_match_formula(rng, op):
    y_raw = rng.standard_normal((4, 6))
    dy = rng.standard_normal((4, 6))
    if op.startswith("Log"):
        y = np.log(softmax_ref(y_raw, 1))
        ref = dy - np.exp(y) * dy.sum(1, keepdims=True)
    else:
        y = softmax_ref(y_raw, 1)
        ref = y * (dy - (y * dy).sum(1, keepdims=True))
    (dx,) = run_node(op, [dy, y], attrs={"axis": 1}, domain="com.microsoft")
    np.testing.assert_allclose(dx, ref, rtol=1e-12, atol=1e-12)


def sce_ref(scores, labels, weights=None, reduction="mean", ignore_index=None):
    n, c = scores.shape[:2]
    s = scores.reshape(n, c, -1)
    lab = labels.reshape(n, -1)
    logp = s - s.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    w = np.ones(c) if weights is None else weights
    losses, totals = np.zeros(lab.shape), np.zeros(lab.shape)
    for i in range(n):
        for d in range(lab.shape[1]):
            if lab[i, d] == ignore_index:
                continue
            losses[i, d] = -logp[i, lab[i, d], d] * w[lab[i, d]]
            totals[i, d] = w[lab[i, d]]
    if reduction == "none":
        return losses.reshape(labels.shape)
    return losses.sum() if reduction == "sum" else losses.sum() / totals.sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extra,weighted,ignore", [((), False, None), ((3,), True, None), ((2, 3), False, 1),
                                                   ((), True, 0)])
def test_softmax_cross_entropy(rng, reduction, extra, weighted, ignore):
    scores = rng.standard_normal((5, 4) + extra)
    labels = rng.integers(0, 4, (5,) + extra)
    weights = rng.random(4) + 0.5 if weighted else None
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    inputs = [scores, labels] + ([weights] if weighted else [])
    loss, log_prob = run_node("SoftmaxCrossEntropyLoss", inputs, attrs=attrs)
    np.testing.assert_allclose(loss, sce_ref(scores, labels, weights, reduction, ignore), rtol=1e-10)
    np.testing.assert_allclose(np.exp(log_prob).sum(1), 1.0, rtol=1e-12)
    gradcheck("SoftmaxCrossEntropyLoss", inputs, attrs, outputs=["output"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_negative_class_weights(rng, reduction):
    """A negative class weight scales its samples' loss like any other weight (ONNX's
    reference, PyTorch): the loss and its gradient agree."""
    scores = rng.standard_normal((6, 4))
    labels = np.array([0, 1, 2, 3, 0, 2])
    weights = np.array([1.0, 1.5, -0.5, 2.0])
    attrs = {"reduction": reduction}
    loss, _ = run_node("SoftmaxCrossEntropyLoss", [scores, labels, weights], attrs=attrs)
    np.testing.assert_allclose(loss, sce_ref(scores, labels, weights, reduction), rtol=1e-10)
    gradcheck("SoftmaxCrossEntropyLoss", [scores, labels, weights], attrs, outputs=["output"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_run_node_keeps_inputs_and_accepts_views(rng, dtype):
    base = rng.standard_normal((6, 8)).astype(dtype)
    x = base[::2, ::2]                       # non-contiguous view
    saved = base.copy()
    (y,) = run_node("Softmax", [x])
    np.testing.assert_allclose(y, softmax_ref(x.astype(np.float64), -1), rtol=1e-5)
    assert y.dtype == dtype
    np.testing.assert_array_equal(base, saved)
    dy = rng.standard_normal(x.shape).astype(dtype)
    run_node("ReluGrad", [dy, x], domain="com.microsoft")
    np.testing.assert_array_equal(base, saved)


def test_run_node_returns_requested_outputs_in_order(rng):
    scores, labels = rng.standard_normal((3, 4)), np.array([0, 1, 2])
    log_prob, loss = run_node("SoftmaxCrossEntropyLoss", [scores, labels], outputs=["log_prob", "output"])
    assert log_prob.shape == (3, 4) and loss.shape == ()
    (only,) = run_node("SoftmaxCrossEntropyLoss", [scores, labels], outputs=["output"])
    assert only == loss


@pytest.mark.parametrize("a_shape,b_shape", [((0, 4), (4, 5)), ((3, 0), (0, 5)), ((3, 4), (4, 0))])
def test_gemm_with_empty_dims(a_shape, b_shape):
    a, b = np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)
    (y,) = run_node("Gemm", [a, b])
    np.testing.assert_array_equal(y, a @ b)


def test_gemm_large_enough_for_threaded_blas(rng):
    a, b = rng.standard_normal((256, 300)), rng.standard_normal((300, 200))
    np.testing.assert_allclose(run_node("Gemm", [a, b])[0], a @ b, rtol=1e-10)
