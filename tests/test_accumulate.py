"""InPlaceAccumulator on the CPU: buffer += scale * value written in place, the buffer returned
as the output, and its checks; InPlaceAccumulatorV2 (ONNX Runtime's training artifacts): the
buffer overwritten or added to, a bool flag returned."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import DTypeError, ShapeError

MS = "com.microsoft"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scale", [None, 1.0, 0.25])
def test_accumulates_in_place(rng, dtype, scale):
    buffer = rng.standard_normal((3, 4)).astype(dtype)
    value = rng.standard_normal((3, 4)).astype(dtype)
    expected = buffer.astype(np.float64) + (1.0 if scale is None else scale) * value.astype(np.float64)
    inputs = [buffer, value] + ([] if scale is None else [np.array(scale, dtype)])
    (out,) = run_node("InPlaceAccumulator", inputs, domain=MS)
    assert out is buffer
    tol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(buffer.astype(np.float64), expected, rtol=tol, atol=tol)


def test_repeated_accumulation_sums_micro_batches(rng):
    grads = [rng.standard_normal(5) for _ in range(4)]
    buffer = np.zeros(5)
    for g in grads:
        run_node("InPlaceAccumulator", [buffer, g, np.array(0.25)], domain=MS)
    np.testing.assert_allclose(buffer, np.mean(grads, axis=0), rtol=1e-12)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ShapeError, match="InPlaceAccumulator.*'value'.*\\(3,\\)"):
        run_node("InPlaceAccumulator", [np.zeros((2, 3)), np.zeros(3)], domain=MS)
    with pytest.raises(ShapeError, match="InPlaceAccumulator.*'scale'.*scalar"):
        run_node("InPlaceAccumulator", [np.zeros(3), np.zeros(3), np.ones(2)], domain=MS)
    with pytest.raises(DTypeError, match="InPlaceAccumulator"):
        run_node("InPlaceAccumulator", [np.zeros(3), np.zeros(3, np.float32)], domain=MS)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("overwrite", [None, False, True])
def test_v2_overwrites_or_adds_in_place(rng, dtype, overwrite):
    buffer = rng.standard_normal((3, 4)).astype(dtype)
    value = rng.standard_normal((3, 4)).astype(dtype)
    expected = value.copy() if overwrite else buffer + value
    inputs = [buffer, value] + ([] if overwrite is None else [np.array([overwrite])])
    flag, out = run_node("InPlaceAccumulatorV2", inputs, domain=MS)
    assert out is buffer and flag.dtype == np.bool_ and flag.tolist() == [True]
    np.testing.assert_array_equal(buffer, expected)


def test_v2_reset_then_accumulate(rng):
    grads = [rng.standard_normal(5) for _ in range(3)]
    buffer = np.full(5, 7.0)
    for i, g in enumerate(grads):
        run_node("InPlaceAccumulatorV2", [buffer, g, np.array([i == 0])], domain=MS, outputs=["updated_flag"])
    np.testing.assert_allclose(buffer, np.sum(grads, axis=0), rtol=1e-12)


def test_v2_bad_inputs_name_the_problem():
    with pytest.raises(ShapeError, match="InPlaceAccumulatorV2.*'value'.*\\(3,\\)"):
        run_node("InPlaceAccumulatorV2", [np.zeros((2, 3)), np.zeros(3)], domain=MS)
    with pytest.raises(ShapeError, match="InPlaceAccumulatorV2.*'overwrite_flag'.*scalar"):
        run_node("InPlaceAccumulatorV2", [np.zeros(3), np.zeros(3), np.ones(2, bool)], domain=MS)
    with pytest.raises(DTypeError, match="InPlaceAccumulatorV2.*'overwrite_flag'.*bool"):
        run_node("InPlaceAccumulatorV2", [np.zeros(3), np.zeros(3), np.ones(1)], domain=MS)
