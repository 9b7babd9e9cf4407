"""BatchNormalization's element types, as ONNX versions them: one type T at version 9, the
statistics' own type U from 14, scale and B's own type T1 (statistics T2) from 15, and
BatchNormalizationGrad and BatchNormInternal with ONNX Runtime's T, T1, T2.  The CPU kernels run
the mixed forms in X's type (float64 data with float32 parameters stands in for mixed precision's
16-bit data) and give each per-channel output in its own type."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import DTypeError
from minitrain.inference import check_node
from minitrain.ops.schema import TensorType

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
MS = "com.microsoft"
X, C = (4, 3, 5, 5), (3,)
FORWARD_OUTPUTS = ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"]
GRAD_OUTPUTS = ["dX", "dscale", "dbias"]


def _types(op, opset, dtypes, domain=""):
    """The output dtypes a node with inputs of these dtypes (X, or dY and X, then the
    per-channel ones) infers."""
    shapes = [X if i < (2 if op.endswith("Grad") else 1) else C for i in range(len(dtypes))]
    attrs = {} if opset == 9 else {"training_mode": 1}
    checked = check_node(op, domain, opset, attrs, [TensorType(np.dtype(d), s) for d, s in zip(dtypes, shapes)])
    return [t.dtype for t in checked.out_types]


def test_version_15_takes_16_bit_data_with_float32_parameters_and_statistics():
    assert _types("BatchNormalization", 15, [F16, F32, F32, F32, F32]) == [F16] + [F32] * 4
    assert _types("BatchNormalization", 15, [F16, F16, F16, F32, F32]) == [F16] + [F32] * 4
    assert _types("BatchNormalizationGrad", 1, [F16, F16, F32, F32, F32], MS) == [F16, F32, F32]
    assert _types("BatchNormInternal", 1, [F16, F32, F32, F32, F32], MS) == [F16] + [F32] * 4


@pytest.mark.parametrize("op, opset, dtypes, message", [
    ("BatchNormalization", 15, [F16, F32, F64, F32, F32], "input 'B' has dtype float64 but an earlier input has "
                                                          "float32; inputs of type T1 must share one float dtype"),
    ("BatchNormalization", 15, [F16, F32, F32, F32, F16], "input 'input_var' has dtype float16 .* type T2"),
    ("BatchNormalization", 14, [F16, F32, F32, F32, F32], "input 'scale' has dtype float32 .* type T must"),
    ("BatchNormalization", 9, [F32, F32, F32, F64, F64], "input 'input_mean' has dtype float64 .* type T must"),
    ("BatchNormalizationGrad", 1, [F16, F32, F32, F32, F32], "input 'X' has dtype float32 .* type T must"),
])
def test_types_that_must_agree(op, opset, dtypes, message):
    domain = MS if op.endswith("Grad") else ""
    with pytest.raises(DTypeError, match=message):
        _types(op, opset, dtypes, domain)


def test_version_14_statistics_of_their_own_type():
    assert _types("BatchNormalization", 14, [F64, F64, F64, F32, F32]) == [F64] + [F32] * 4


def _inputs(rng):
    x = rng.standard_normal(X) * 2 + 0.5
    return [x, rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3), rng.random(3) + 0.5]


@pytest.mark.parametrize("training", [1, 0])
def test_cpu_float64_data_with_float32_parameters(training, rng):
    """The per-channel inputs rounded to float32 and read in float64: the float64 kernel's
    results on those values, the per-channel outputs rounded to float32."""
    x, *per_channel = _inputs(rng)
    low = [a.astype(F32) for a in per_channel]
    attrs = {"training_mode": training, "momentum": 0.8, "epsilon": 1e-3}
    outputs = FORWARD_OUTPUTS if training else ["Y", "saved_mean", "saved_inv_std"]
    got = run_node("BatchNormalization", [x, *low], attrs=attrs, outputs=outputs)
    expected = run_node("BatchNormalization", [x, *(a.astype(F64) for a in low)], attrs=attrs, outputs=outputs)
    assert [g.dtype for g in got] == [F64] + [F32] * (len(outputs) - 1)
    np.testing.assert_array_equal(got[0], expected[0])
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_array_equal(g, e.astype(F32))
    dy = rng.standard_normal(X)
    saved = got[-2:]
    grads = run_node("BatchNormalizationGrad", [dy, x, low[0], *saved], attrs=attrs, domain=MS)
    expected = run_node("BatchNormalizationGrad", [dy, x, low[0].astype(F64), *(s.astype(F64) for s in saved)],
                        attrs=attrs, domain=MS)
    assert [g.dtype for g in grads] == [F64, F32, F32]
    np.testing.assert_array_equal(grads[0], expected[0])
    for g, e in zip(grads[1:], expected[1:]):
        np.testing.assert_array_equal(g, e.astype(F32))
    (dscale,) = run_node("BatchNormalizationGrad", [dy, x, low[0], *saved], attrs=attrs, domain=MS,
                         outputs=["dscale"])
    assert dscale.dtype == F32 and np.array_equal(dscale, grads[1])
