"""CUDA kernels against the CPU kernels on the same inputs, one case table per op family run
per element type (Chainer's FunctionTestCase style).

`check_parity(op, inputs, ...)` runs the node on "cpu" and on "cuda" through run_node and
compares every output: float64 to 1e-10, float32 to 1e-5 relative, float16 against the
float32 CPU result on the same float16-rounded inputs to 1e-2, bfloat16 likewise to eight
units of its 8-bit mantissa (8 * 2**-7, where float16's 1e-2 is about ten of its 2**-10).
Float inputs are cast to the
element type under test; integer and bool inputs (labels, indices, masks) are passed as they
are.  With `noncontiguous=True` the CUDA run gets non-contiguous NumPy views of the inputs.
The tolerances and the non-contiguous views also serve test_op_table.py, which runs every
registered CUDA kernel this way from the op table; the files that use check_parity keep the
cases beyond it (large and odd geometry, algorithm routes, device inputs).
"""
import numpy as np

from minitrain import run_node
from minitrain.bfloat16 import BFLOAT16_TYPES, is_float

HALF_TYPES = ("float16",) + tuple(t.name for t in BFLOAT16_TYPES)    # checked against the CPU's float32
DTYPES = ("float64", "float32") + HALF_TYPES
BFLOAT16_EPS = 2.0 ** -7
TOLERANCE = {"float64": (1e-10, 1e-10), "float32": (1e-5, 1e-6), "float16": (1e-2, 1e-2),
             "bfloat16": (8 * BFLOAT16_EPS, 8 * BFLOAT16_EPS)}


def cast(inputs, dtype):
    return [x.astype(dtype) if isinstance(x, np.ndarray) and is_float(x.dtype) else x for x in inputs]


def noncontiguous(x):
    """A strided view holding the same values as x (every other element of a wider array)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        return x
    wide = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    view = wide[..., ::2]
    assert not view.flags.c_contiguous or x.shape[-1] <= 1
    return view


def check_parity(op, inputs, attrs=None, *, domain="", opset=None, outputs=None, output_shapes=None,
                 dtypes=DTYPES, noncontiguous_inputs=False, tolerance=None):
    """Assert that the CUDA kernel matches the CPU kernel for each element type in `dtypes`;
    returns the CUDA results of the last dtype."""
    for dtype in dtypes:
        device_inputs = cast(inputs, dtype)
        cpu_inputs = cast(device_inputs, "float32") if dtype in HALF_TYPES else device_inputs
        kwargs = dict(attrs=attrs, domain=domain, opset=opset, outputs=outputs, output_shapes=output_shapes)
        expected = run_node(op, cpu_inputs, provider="cpu", **kwargs)
        if noncontiguous_inputs:
            device_inputs = [noncontiguous(x) for x in device_inputs]
        got = run_node(op, device_inputs, provider="cuda", **kwargs)
        rtol, atol = (tolerance or TOLERANCE)[dtype]
        assert len(got) == len(expected)
        for k, (g, e) in enumerate(zip(got, expected)):
            assert isinstance(g, np.ndarray), f"{op} output #{k} on cuda is {type(g).__name__}, not a NumPy array"
            assert g.shape == e.shape, f"{op} {dtype} output #{k}: shape {g.shape} != cpu {e.shape}"
            if is_float(e.dtype):
                assert g.dtype == np.dtype(dtype), f"{op} output #{k}: dtype {g.dtype}, expected {dtype}"
                scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                           atol=atol * scale, err_msg=f"{op} {dtype} output #{k}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"{op} {dtype} output #{k}")
    return got
