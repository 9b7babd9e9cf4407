"""SoftmaxCrossEntropyLoss, MSELoss and their gradients on CUDA against the CPU kernels: every
reduction, class weights, ignore_index, label ranks and dtypes, warp-per-row and
thread-per-row layouts, device inputs, and bad input raising the CPU's errors (every opset and
non-contiguous inputs: test_op_table.py); a bad label is reported by the device's flag without a
stall, at the next loss call or at check_labels."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import run_node
from minitrain.errors import ShapeError
from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
SCE_CASES = [  # scores shape, weighted, ignore_index, label dtype
    ((5, 4), False, None, np.int64),
    ((5, 4), True, 1, np.int32),
    ((5, 4, 3), True, None, np.int64),
    ((5, 4, 2, 3), False, 1, np.int64),
    ((6, 4, 3), False, -1, np.int32),
    ((33, 1000), True, -100, np.int64),      # long rows: a warp strides over the classes
    ((3, 7, 50), True, 2, np.int64),         # many rows of stride D
    ((0, 4), False, None, np.int64),
    ((2, 4, 0), False, None, np.int64),
]
REDUCTIONS = ["mean", "sum", "none"]


def sce_inputs(rng, shape, weighted, ignore, label_dtype):
    scores = rng.standard_normal(shape) * 3
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(label_dtype)
    if ignore is not None and labels.size:
        labels.reshape(-1)[::3] = ignore
    weights = rng.uniform(0.5, 2.0, shape[1]) if weighted else None
    return [scores, labels] + ([weights] if weighted else [])


def sce_attrs(reduction, ignore):
    return {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})


@pytest.mark.parametrize("case", range(len(SCE_CASES)))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_cross_entropy(case, reduction, dtype, rng):
    shape, weighted, ignore, label_dtype = SCE_CASES[case]
    inputs = sce_inputs(rng, shape, weighted, ignore, label_dtype)
    attrs = sce_attrs(reduction, ignore)
    loss, log_prob = check_parity("SoftmaxCrossEntropyLoss", inputs, attrs, dtypes=[dtype])
    check_parity("SoftmaxCrossEntropyLoss", inputs, attrs, dtypes=[dtype], outputs=["output"])
    dy = rng.standard_normal(loss.shape)
    grad_inputs = [dy, log_prob.astype(np.float64), inputs[1]] + inputs[2:]
    check_parity("SoftmaxCrossEntropyLossGrad", grad_inputs, attrs, domain=MS, dtypes=[dtype])


def test_all_rows_ignored_gives_the_cpu_nan(rng):
    scores, labels = rng.standard_normal((4, 3)), np.full(4, -1)
    check_parity("SoftmaxCrossEntropyLoss", [scores, labels], {"ignore_index": -1})


def test_device_inputs_give_device_outputs(rng):
    cuda = get_provider("cuda")
    scores, labels = rng.standard_normal((8, 5)), rng.integers(0, 5, 8)
    loss, log_prob = run_node("SoftmaxCrossEntropyLoss", [cuda.from_numpy(scores), cuda.from_numpy(labels)],
                              provider="cuda")
    assert cuda.is_native(loss) and cuda.is_native(log_prob)
    (dx,) = run_node("SoftmaxCrossEntropyLossGrad", [cuda.from_numpy(np.array(1.0)), log_prob,
                                                     cuda.from_numpy(labels)], domain=MS, provider="cuda")
    assert cuda.is_native(dx)
    expected_loss, expected_lp = run_node("SoftmaxCrossEntropyLoss", [scores, labels])
    (expected_dx,) = run_node("SoftmaxCrossEntropyLossGrad", [np.array(1.0), expected_lp, labels], domain=MS)
    np.testing.assert_allclose(cuda.to_numpy(loss), expected_loss, rtol=1e-12)
    np.testing.assert_allclose(cuda.to_numpy(dx), expected_dx, rtol=1e-12, atol=1e-15)


LARGE_SCE_CASES = [  # per-pixel scores whose rows are summed in chunks, then over the chunks
    ((8, 5, 128, 128), True, 1, np.int64),
    ((3, 4, 1031, 7), False, -1, np.int32),      # a last chunk of fewer rows
    ((2, 3, 1200, 1000), True, None, np.int64),  # the most chunks (loss.MAX_CHUNKS)
]


def _device_run(op, inputs, attrs, domain=""):
    cuda = get_provider("cuda")
    return [cuda.to_numpy(r) for r in run_node(op, [cuda.from_numpy(x) for x in inputs], attrs=attrs,
                                                domain=domain, provider="cuda")]


@pytest.mark.parametrize("case", range(len(LARGE_SCE_CASES)))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_large_per_pixel_losses_reduce_as_on_the_cpu_and_reproducibly(case, reduction, dtype, rng):
    """The loss, its gradient, the fused loss-with-gradient and NegativeLogLikelihoodLoss: each
    reduces its rows (and their weights, the mean's divisor) in two levels; the CPU's results,
    the same bits on every run."""
    from minitrain.ops.fused import FUSED_DOMAIN
    from minitrain.providers.cuda.loss import row_chunks
    shape, weighted, ignore, label_dtype = LARGE_SCE_CASES[case]
    assert row_chunks(shape[0] * int(np.prod(shape[2:])))[1] > 1
    inputs = [x.astype(dtype) if x.dtype.kind == "f" else x
              for x in sce_inputs(rng, shape, weighted, ignore, label_dtype)]
    scores, labels, weights = inputs[0], inputs[1], inputs[2:]
    attrs = sce_attrs(reduction, ignore)
    seed = np.array(0.75, dtype)
    _, log_prob = check_parity("SoftmaxCrossEntropyLoss", inputs, attrs, dtypes=[dtype])
    log_prob = log_prob.astype(dtype)
    cases = [("SoftmaxCrossEntropyLoss", inputs, ""),
             ("SoftmaxCrossEntropyLossGrad", [seed, log_prob, labels] + weights, MS),
             ("SoftmaxCrossEntropyLossWithGrad", [scores, labels, seed] + weights, FUSED_DOMAIN),
             ("NegativeLogLikelihoodLoss", [log_prob, labels] + weights, ""),
             ("NegativeLogLikelihoodLossGrad", [seed, log_prob, labels] + weights, MS)]
    for op, args, domain in cases:
        check_parity(op, args, attrs, domain=domain, dtypes=[dtype])
        first, again = _device_run(op, args, attrs, domain), _device_run(op, args, attrs, domain)
        for a, b in zip(first, again):
            assert a.tobytes() == b.tobytes(), op


def test_a_bad_label_in_a_late_chunk_of_a_large_mean_is_the_cpu_error(rng):
    from minitrain.providers.cuda.loss import check_labels
    scores, labels = sce_inputs(rng, (4, 3, 256, 256), False, None, np.int64)
    labels[3, 200, 17] = 9
    grad_inputs = [np.array(1.0), np.log(np.full(scores.shape, 1 / 3)), labels]
    expected = _cpu_error("SoftmaxCrossEntropyLossGrad", grad_inputs, {}, MS)
    cuda = get_provider("cuda")
    run_node("SoftmaxCrossEntropyLossGrad", [cuda.from_numpy(x) for x in grad_inputs], domain=MS, provider="cuda")
    with pytest.raises(ShapeError) as error:
        check_labels(cuda)
    assert str(error.value) == expected


BAD_LABELS = [  # labels, attributes
    (np.array([0, 3, 1]), {}),
    (np.array([0, -1, 1]), {}),
    (np.array([0, -1, 7]), {"ignore_index": -1}),
    (np.array([[0, 1], [2, 5], [1, 1]]), {"reduction": "none"}),
]


def _cpu_error(op, inputs, attrs, domain=""):
    with pytest.raises(ShapeError) as cpu:
        run_node(op, inputs, attrs=attrs, domain=domain)
    return str(cpu.value)


@pytest.mark.parametrize("case", range(len(BAD_LABELS)))
def test_bad_label_is_the_cpu_error_at_check_labels(case, rng):
    from minitrain.providers.cuda.loss import check_labels
    cuda = get_provider("cuda")
    labels, attrs = BAD_LABELS[case]
    scores = rng.standard_normal((3, 3) + labels.shape[1:])
    message = _cpu_error("SoftmaxCrossEntropyLoss", [scores, labels], attrs)
    run_node("SoftmaxCrossEntropyLoss", [cuda.from_numpy(scores), cuda.from_numpy(labels)], attrs=attrs,
             provider="cuda")       # device tensors: nothing waits for the stream
    with pytest.raises(ShapeError) as gpu:
        check_labels(cuda)
    assert str(gpu.value) == message
    check_labels(cuda)      # reported once, then cleared

    dy = np.ones(labels.shape) if attrs.get("reduction") == "none" else np.array(1.0)
    log_prob = np.log(np.full(scores.shape, 1 / 3))
    message = _cpu_error("SoftmaxCrossEntropyLossGrad", [dy, log_prob, labels], attrs, MS)
    run_node("SoftmaxCrossEntropyLossGrad", [cuda.from_numpy(a) for a in (dy, log_prob, labels)], attrs=attrs,
             domain=MS, provider="cuda")
    with pytest.raises(ShapeError) as gpu:
        check_labels(cuda)
    assert str(gpu.value) == message


def test_bad_label_is_raised_by_the_next_loss_call(rng):
    cuda = get_provider("cuda")
    scores, good, bad = rng.standard_normal((4, 3)), np.array([0, 1, 2, 0]), np.array([0, 1, 9, 0])
    run_node("SoftmaxCrossEntropyLoss", [cuda.from_numpy(scores), cuda.from_numpy(bad)], provider="cuda")
    cuda.stream.synchronize()       # the verdict has landed, nobody has read it yet
    with pytest.raises(ShapeError, match="holds 9, outside \\[0, 3\\)"):
        run_node("SoftmaxCrossEntropyLoss", [cuda.from_numpy(scores), cuda.from_numpy(good)], provider="cuda")
    check_parity("SoftmaxCrossEntropyLoss", [scores, good])


def test_many_calls_in_flight_then_a_bad_one(rng):
    """More calls than the guard has slots, none waited for, then a bad label."""
    from minitrain.providers.cuda.loss import LabelGuard, check_labels
    cuda = get_provider("cuda")
    scores = cuda.from_numpy(rng.standard_normal((16, 10)))
    good = cuda.from_numpy(rng.integers(0, 10, 16))
    bad = cuda.from_numpy(np.array([3] * 15 + [10]))
    for _ in range(LabelGuard.SLOTS + 5):
        run_node("SoftmaxCrossEntropyLoss", [scores, good], provider="cuda", outputs=["output"])
    run_node("SoftmaxCrossEntropyLoss", [scores, bad], provider="cuda", outputs=["output"])
    with pytest.raises(ShapeError, match="holds 10, outside \\[0, 10\\)"):
        check_labels(cuda)


@pytest.mark.parametrize("inputs,attrs", [
    ([np.ones((3, 4)), np.array([0, 1])], {}),
    ([np.ones((3, 4)), np.array([0, 1, 2]), np.ones(3)], {}),
    ([np.ones((3, 4)), np.array([0, 1, 2])], {"reduction": "avg"}),
    ([np.ones((3, 4)), np.array([0.0, 1.0, 2.0])], {}),
])
def test_bad_input_raises_the_cpu_error(inputs, attrs):
    with pytest.raises(Exception) as cpu:
        run_node("SoftmaxCrossEntropyLoss", inputs, attrs=attrs)
    with pytest.raises(type(cpu.value)) as gpu:
        run_node("SoftmaxCrossEntropyLoss", inputs, attrs=attrs, provider="cuda")
    assert str(gpu.value) == str(cpu.value)


# ---------------------------------------------------------------------------------- MSELoss
MSE_SHAPES = [(5,), (2, 3, 4), (3, 100001), (0, 3)]


@pytest.mark.parametrize("shape", MSE_SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mse(shape, reduction, dtype, rng):
    if reduction == "mean" and 0 in shape:
        pytest.skip("an empty mean is an error (test_mse_bad_input)")
    p, t = rng.standard_normal(shape) * 0.1, rng.standard_normal(shape) * 0.1   # float16 holds the sum
    (loss,) = check_parity("MSELoss", [p, t], {"reduction": reduction}, domain=MS, dtypes=[dtype])
    dy = rng.standard_normal(loss.shape)
    check_parity("MSELossGrad", [dy, p, t], {"reduction": reduction}, domain=MS, dtypes=[dtype])


def test_mse_device_inputs_give_device_outputs(rng):
    cuda = get_provider("cuda")
    p, t = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    (loss,) = run_node("MSELoss", [cuda.from_numpy(p), cuda.from_numpy(t)], domain=MS, provider="cuda")
    assert cuda.is_native(loss)
    np.testing.assert_allclose(cuda.to_numpy(loss), ((p - t) ** 2).mean(), rtol=1e-12)
    (grad,) = run_node("MSELossGrad", [np.array(1.0), cuda.from_numpy(p), cuda.from_numpy(t)], domain=MS,
                       provider="cuda")
    assert cuda.is_native(grad)
    np.testing.assert_allclose(cuda.to_numpy(grad), 2 * (p - t) / p.size, rtol=1e-12)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("MSELoss", [np.ones((0, 3)), np.ones((0, 3))], {}),
    ("MSELoss", [np.ones((2, 3)), np.ones((3, 2))], {}),
    ("MSELoss", [np.ones(2), np.ones(2)], {"reduction": "max"}),
    ("MSELossGrad", [np.array(1.0), np.ones((2, 3)), np.ones((3, 2))], {}),
])
def test_mse_bad_input(op, inputs, attrs):
    with pytest.raises(Exception) as cpu:
        run_node(op, inputs, attrs=attrs, domain=MS)
    with pytest.raises(type(cpu.value)) as gpu:
        run_node(op, inputs, attrs=attrs, domain=MS, provider="cuda")
    assert str(gpu.value) == str(cpu.value)


def test_a_bad_label_is_raised_when_the_host_fetches_results():
    scores = np.zeros((3, 4), np.float32)
    with pytest.raises(ShapeError, match="outside \\[0, 4\\)"):
        run_node("SoftmaxCrossEntropyLoss", [scores, np.array([0, 7, 1])], provider="cuda", outputs=["output"])
    (loss,) = run_node("SoftmaxCrossEntropyLoss", [scores, np.array([0, 3, 1])], provider="cuda", outputs=["output"])
    assert np.isclose(loss, np.log(4))
