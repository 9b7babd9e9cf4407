"""cuDNN's convolution algorithms in the conv search, against the CPU kernels.

Each case of the table (1D/2D/3D, strides, dilations, groups and depthwise, symmetric pads,
ConvTranspose with output_padding) runs its forward op and its gradient op with the cuDNN
family forced first (search mode "fixed", algorithm "cudnn") in float64, float32, float16 and
bfloat16, and checks that all but float64 really ran on cuDNN in every direction the ops use.  Then:
every algorithm cuDNN offers for a few keys, run alone; the exhaustive search timing cuDNN's
algorithms with minitrain's own; asymmetric pads staying on minitrain's kernels; a failing cuDNN
algorithm falling back; the workspace cap and deterministic mode filtering cuDNN's algorithms;
strict FP32 running FMA math; status errors naming the call; and everything working on
minitrain's own algorithms when libcudnn cannot be loaded."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, TOLERANCE as PARITY_TOLERANCE, check_parity
from minitrain import run_node
from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
# cuDNN's FFT and Winograd algorithms reorder sums more than a GEMM does
TOLERANCE = {"float64": (1e-10, 1e-10), "float32": (1e-4, 1e-5), "float16": (2e-2, 2e-2),
             "bfloat16": PARITY_TOLERANCE["bfloat16"]}
DIRECTIONS = {"forward": "cudnn_fwd_", "data": "cudnn_bwd_data_", "weight": "cudnn_bwd_filter_"}
# the primitives each op runs: Conv forward; ConvGrad data + weight; ConvTranspose data;
# ConvTransposeGrad forward (dX) + weight (X and dY swapped)
USES = {"Conv": ("forward",), "ConvGrad": ("data", "weight"), "ConvTranspose": ("data",),
        "ConvTransposeGrad": ("forward", "weight")}

CONV_CASES = {
    "1d_p1": ((2, 4, 9), (6, 4, 3), {"pads": [1, 1]}),
    "1d_s2_d2_g2": ((2, 4, 17), (6, 2, 3), {"strides": [2], "dilations": [2], "group": 2, "pads": [2, 2]}),
    "2d_valid": ((2, 4, 6, 7), (6, 4, 3, 2), {}),
    "2d_p1_s2": ((2, 4, 9, 8), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "2d_d2": ((2, 4, 9, 9), (6, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "2d_g2": ((2, 4, 6, 7), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((2, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "depthwise_x2_s2": ((2, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}),
    "lenet_conv1": ((4, 1, 28, 28), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    "pointwise": ((2, 6, 8, 9), (5, 6, 1, 1), {}),
    "wide_3x3": ((2, 32, 16, 16), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3d_valid": ((2, 3, 4, 5, 6), (4, 3, 2, 3, 2), {}),
    "3d_p1_s2_g2": ((2, 4, 6, 6, 6), (4, 2, 3, 3, 3), {"pads": [1] * 6, "strides": [2, 2, 2], "group": 2}),
    "3d_d2": ((1, 2, 7, 7, 7), (3, 2, 3, 3, 3), {"dilations": [2, 2, 2], "pads": [2] * 6}),
}
# ConvTranspose: W is (C_in, C_out / group, *kernel)
TRANSPOSE_CASES = {
    "t1d_s2": ((2, 4, 8), (4, 3, 3), {"strides": [2], "pads": [1, 1]}),
    "t2d_p1": ((2, 4, 5, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "t2d_s2_outpad": ((2, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                   "output_padding": [1, 1]}),
    "t2d_g2_d2": ((2, 4, 5, 5), (4, 2, 3, 3), {"group": 2, "dilations": [2, 2]}),
    "t_depthwise_s2": ((2, 4, 6, 6), (4, 1, 4, 4), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "t3d_s2": ((1, 4, 3, 4, 3), (4, 2, 2, 2, 2), {"strides": [2, 2, 2]}),
}


@pytest.fixture
def cudnn():
    from minitrain.providers.cuda.libs import cudnn
    if not cudnn.available():
        pytest.skip("libcudnn 9 is not available")
    return cudnn


def options():
    """The conv search options of run_node's CUDA provider (the `search` fixture restores them)."""
    return get_provider("cuda").conv_search


def stats(search):
    """The conv search counters of run_node's CUDA provider."""
    return search.stats(get_provider("cuda"))

def force(search, algorithm):
    options().mode, options().algorithm = "fixed", algorithm


def cudnn_runs(search, direction):
    return sum(n for name, n in stats(search).ran.items() if name.startswith(DIRECTIONS[direction]))


def parity_on_cudnn(search, op, inputs, attrs, dtype, **kwargs):
    """check_parity of one dtype; asserts (all but float64) that each primitive ran on cuDNN."""
    before = {d: cudnn_runs(search, d) for d in USES[op]}
    check_parity(op, inputs, attrs, domain=MS if op.endswith("Grad") else "", dtypes=(dtype,),
                 tolerance=TOLERANCE, **kwargs)
    if dtype != "float64":   # cuDNN supports fewer double configurations; the search falls back
        missing = [d for d in USES[op] if cudnn_runs(search, d) == before[d]]
        assert not missing, f"{op} {dtype}: {missing} did not run on cuDNN ({dict(stats(search).ran)})"


def inputs_of(op, x_shape, w_shape, attrs, rng):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    b = rng.standard_normal(c_out)
    dy = rng.standard_normal(run_node(op, [x, w, b], attrs=attrs)[0].shape)
    return [x, w, b], [dy, x, w]


# --------------------------------------------------------------------------- the case table
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CONV_CASES) + list(TRANSPOSE_CASES))
def test_forced_cudnn_matches_cpu(case, dtype, search, cudnn, rng):
    force(search, "cudnn")
    op = "Conv" if case in CONV_CASES else "ConvTranspose"
    x_shape, w_shape, attrs = CONV_CASES.get(case) or TRANSPOSE_CASES[case]
    forward, grad = inputs_of(op, x_shape, w_shape, attrs, rng)
    parity_on_cudnn(search, op, forward, attrs, dtype)
    parity_on_cudnn(search, op + "Grad", grad, attrs, dtype)


def _key(search, op, direction, x_shape, w_shape, attrs, dtype="float32", tf32=False):
    from minitrain.ops.conv_geometry import geometry_for
    geom = geometry_for("conv", op, x_shape, w_shape, attrs)
    return search.ConvKey(op, direction, x_shape[0], geom, dtype, tf32, ())


def _offered(key, family=0):
    """The cuDNN algorithms a family offers for `key` (0: the legacy API's, 1: the backend's)."""
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.conv import kernels as conv
    return conv.FAMILIES[family].for_key(get_provider("cuda"), key)


@pytest.mark.parametrize("family", [0, 1], ids=["legacy", "backend"])
@pytest.mark.parametrize("case", ["2d_p1_s2", "wide_3x3", "depthwise", "3d_p1_s2_g2"])
def test_every_offered_algorithm(case, family, search, cudnn, rng):
    """Each algorithm the _v7 heuristic offers, and each engine configuration of the backend's
    heuristics, forced alone, matches the CPU in float32."""
    x_shape, w_shape, attrs = CONV_CASES[case]
    forward, grad = inputs_of("Conv", x_shape, w_shape, attrs, rng)
    runs = {"forward": ("Conv", forward, None), "data": ("ConvGrad", grad, ["dX"]),
            "weight": ("ConvGrad", grad, ["dW"])}
    for direction, (op, inputs, outputs) in runs.items():
        offered = _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs), family)
        assert offered, f"cuDNN offers no {direction} algorithm for {case}"
        for algorithm in offered:
            force(search, algorithm.name)
            search.clear_cache()
            before = stats(search).ran[algorithm.name]
            check_parity(op, inputs, attrs, domain=MS if op == "ConvGrad" else "", outputs=outputs,
                         dtypes=("float32",), tolerance=TOLERANCE)
            assert stats(search).ran[algorithm.name] > before, f"{algorithm.name} did not run"


# --------------------------------------------------------------------------- the search
def test_exhaustive_search_times_cudnn_with_own_algorithms(search, cudnn, rng):
    x_shape, w_shape, attrs = CONV_CASES["wide_3x3"]
    forward, _ = inputs_of("Conv", x_shape, w_shape, attrs, rng)
    timed = stats(search).timed
    check_parity("Conv", forward, attrs, dtypes=("float32",), tolerance=TOLERANCE)
    (ranked,) = [r for k, r in search.rankings().items() if k.direction == "forward"]
    names = [a.name for a in ranked]
    assert {"im2col_gemm", "direct"} <= set(names) and any(n.startswith("cudnn_fwd_") for n in names), names
    timed_now = stats(search).timed
    assert timed_now - timed >= 3   # every candidate that did not fail
    run_node("Conv", [a.astype(np.float32) for a in forward], attrs=attrs, provider="cuda")
    assert stats(search).timed == timed_now   # a cache hit times nothing


def test_heuristic_mode_puts_cudnn_first_unless_direct_suits(search, cudnn):
    options().mode = "heuristic"
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.conv import kernels as conv
    for case, first in (("wide_3x3", "cudnn_fwd_"), ("lenet_conv1", "direct")):
        key = _key(search, "Conv", "forward", *CONV_CASES[case])
        ranked = search.rank(get_provider("cuda"), key, conv.ALGORITHMS + conv.FAMILIES, None)
        assert ranked[0].name.startswith(first), (case, [a.name for a in ranked])


def test_asymmetric_pads_stay_on_own_algorithms(search, cudnn, rng):
    attrs = {"pads": [1, 0, 2, 1]}
    key = _key(search, "Conv", "forward", (2, 4, 8, 8), (6, 4, 3, 3), attrs)
    assert _offered(key) == []
    force(search, "cudnn")
    forward, grad = inputs_of("Conv", (2, 4, 8, 8), (6, 4, 3, 3), attrs, rng)
    before = sum(cudnn_runs(search, d) for d in DIRECTIONS)
    check_parity("Conv", forward, attrs)
    check_parity("ConvGrad", grad, attrs, domain=MS)
    assert sum(cudnn_runs(search, d) for d in DIRECTIONS) == before


def test_failing_cudnn_algorithm_falls_back(search, cudnn, rng, monkeypatch):
    def fail(self, provider, key, buffers):
        raise cudnn.CudnnError("cudnnConvolutionForward failed with CUDNN_STATUS_EXECUTION_FAILED (forced)")
    from minitrain.providers.cuda.conv.cudnn_algorithms import CudnnAlgorithm
    monkeypatch.setattr(CudnnAlgorithm, "run", fail)
    force(search, "cudnn")
    x_shape, w_shape, attrs = CONV_CASES["2d_p1_s2"]
    forward, grad = inputs_of("Conv", x_shape, w_shape, attrs, rng)
    fallbacks = stats(search).fallbacks
    check_parity("Conv", forward, attrs, dtypes=("float32",))
    check_parity("ConvGrad", grad, attrs, domain=MS, dtypes=("float32",))
    assert stats(search).fallbacks >= fallbacks + 3


def test_workspace_cap_excludes_cudnn_algorithms_with_workspace(search, cudnn):
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.conv import kernels as conv
    key = _key(search, "Conv", "forward", (8, 32, 32, 32), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]})
    offered = search.expand(get_provider("cuda"), key, conv.FAMILIES)
    assert offered
    options().workspace_limit = 0
    kept = search.candidates(get_provider("cuda"), key, offered)
    assert all(a.workspace_bytes(key) == 0 for a in kept)
    assert len(kept) == sum(a.workspace_bytes(key) == 0 for a in offered)


def test_deterministic_mode_keeps_deterministic_cudnn_weight_gradients(search, cudnn, rng):
    force(search, "cudnn")
    options().deterministic = True
    x_shape, w_shape, attrs = CONV_CASES["wide_3x3"]
    key = _key(search, "Conv", "weight", x_shape, w_shape, attrs)
    assert all(a.deterministic for a in search.candidates(get_provider("cuda"), key, _offered(key)))
    _, grad = inputs_of("Conv", x_shape, w_shape, attrs, rng)
    args = [a.astype(np.float32) for a in grad]
    first = run_node("ConvGrad", args, attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
    for _ in range(3):
        again = run_node("ConvGrad", args, attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
        assert np.array_equal(first, again)


def test_math_types(search, cudnn):
    """Strict FP32 runs FMA math only; float16 and bfloat16 may use tensor cores."""
    x_shape, w_shape, attrs = CONV_CASES["wide_3x3"]
    for direction in DIRECTIONS:
        strict = _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs))
        assert strict and all(a.math_type == cudnn.CUDNN_FMA_MATH for a in strict)
        tf32 = _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs, tf32=True))
        assert tf32 and all(a.math_type != cudnn.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION for a in tf32)
        for half in HALF_TYPES:
            assert _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs, dtype=half)), half


def test_backend_math_and_determinism_filters(search, cudnn):
    """Strict FP32 offers no tensor-core engine, TF32 may; no engine down-converts its inputs;
    deterministic mode keeps only engines without the nondeterministic note."""
    from minitrain.providers.cuda.libs import cudnn_backend as backend
    x_shape, w_shape, attrs = CONV_CASES["wide_3x3"]
    for direction in DIRECTIONS:
        strict = _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs), 1)
        assert strict and not any(backend.NOTE_TENSOR_CORE in a.notes for a in strict)
        tf32 = _offered(_key(search, "Conv", direction, x_shape, w_shape, attrs, tf32=True), 1)
        assert tf32 and not any(backend.NOTE_DOWN_CONVERT in a.notes for a in strict + tf32)
        key = _key(search, "Conv", direction, x_shape, w_shape, attrs)
        options().deterministic = True
        kept = search.candidates(get_provider("cuda"), key, strict)
        assert all(backend.NOTE_NONDETERMINISTIC not in a.notes for a in kept)
        options().deterministic = False


def test_status_error_names_the_call(cudnn):
    with pytest.raises(cudnn.CudnnError) as info:
        cudnn.check("cudnnSetStream", 2000)
    assert "cudnnSetStream" in str(info.value) and "BAD_PARAM" in str(info.value) and "2000" in str(info.value)


def test_without_cudnn_own_algorithms_serve(search, rng, monkeypatch):
    """libcudnn made unavailable: no cuDNN algorithm is offered and every op still matches."""
    from minitrain.providers.cuda.libs import cudnn
    monkeypatch.setattr(cudnn, "_library", None)
    monkeypatch.setattr(cudnn, "_failure", "cuDNN hidden by the test")
    assert not cudnn.available()
    key = _key(search, "Conv", "forward", *CONV_CASES["wide_3x3"])
    assert _offered(key) == []
    force(search, "cudnn")
    before = sum(cudnn_runs(search, d) for d in DIRECTIONS)
    for op, cases in (("Conv", CONV_CASES), ("ConvTranspose", TRANSPOSE_CASES)):
        for case in ("2d_p1_s2", "t2d_s2_outpad"):
            if case in cases:
                forward, grad = inputs_of(op, *cases[case], rng)
                check_parity(op, forward, cases[case][2], dtypes=("float32",))
                check_parity(op + "Grad", grad, cases[case][2], domain=MS, dtypes=("float32",))
    assert sum(cudnn_runs(search, d) for d in DIRECTIONS) == before
