"""The core ops beyond their rows in the op table (op_table.py, run by test_op_table.py, which
checks values, gradients and every version): attributes out of range, numerical stability,
negative class weights, outputs in the order asked, empty dims and a Gemm large enough for
threaded BLAS."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import GraphError, OpAttributeError, ShapeError
from minitrain.gradcheck import gradcheck


@pytest.mark.parametrize("axis", [4, -4])
def test_flatten_axis_out_of_range(axis):
    with pytest.raises(OpAttributeError, match=f"Flatten: attribute 'axis'={axis}"):
        run_node("Flatten", [np.ones((2, 3, 4))], attrs={"axis": axis})


def test_shape_before_opset_15_has_no_start():
    with pytest.raises(OpAttributeError, match="start"):
        run_node("Shape", [np.zeros((2, 3))], attrs={"start": 1}, opset=14)


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    (y,) = run_node("Softmax", [x])
    assert np.all(np.isfinite(y)) and y[0, 0] == pytest.approx(1.0)
    (ly,) = run_node("LogSoftmax", [x])
    assert np.all(np.isfinite(ly))


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


def test_matmul_gradient_of_a_vector_operand_is_refused_by_name(rng):
    """1-D operands (ONNX promotes them to matrices) have no gradient builder yet: a GraphError
    naming the op, not a bare NotImplementedError."""
    with pytest.raises(GraphError, match="MatMul: its gradient needs operands of known rank >= 2"):
        gradcheck("MatMul", [rng.standard_normal(3), rng.standard_normal((3, 2))])
