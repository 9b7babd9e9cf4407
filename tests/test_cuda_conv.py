"""The convolution family on CUDA against the CPU kernels, per algorithm, and the search.

The case table is test_conv.py's matrix (rank x group x stride x dilation x padding mode, for
ConvTranspose also output_padding and output_shape), each case run with every algorithm forced
first (search mode "fixed") in float64, float32, float16 and bfloat16 (both opset versions:
test_op_table.py); then its special paths, every subset of requested gradients,
non-contiguous and device-tensor inputs, bad input raising the CPU's errors, and the search:
a cache hit times nothing, a failing algorithm falls back to the next, a low workspace cap
excludes im2col, dW is bitwise repeatable."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, check_parity
from minitrain import run_node
from minitrain.providers import get_provider
import test_conv
from test_conv import (CONV_PADS, GROUPS, KERNEL, SPATIAL, SUBSETS, T_GROUPS, T_PADS, case_seed, conv_attrs,
                       expected_transpose_geometry)

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
ALGORITHMS = ["im2col_gemm", "direct", "direct_tiled"]


def options():
    """The conv search options of run_node's CUDA provider (the `search` fixture restores them)."""
    return get_provider("cuda").conv_search


def stats(search):
    """The conv search counters of run_node's CUDA provider."""
    return search.stats(get_provider("cuda"))

def force(search, algorithm):
    options().mode, options().algorithm = "fixed", algorithm


def conv_case(rank, group_mode, stride, dilation, pad_mode, n=2):
    rng = np.random.default_rng(case_seed("cuda", rank, group_mode, stride, dilation, pad_mode))
    c_in, c_out, group = GROUPS[group_mode]
    attrs = conv_attrs(pad_mode, rank, (stride,) * rank, (dilation,) * rank, group)
    x = rng.standard_normal((n, c_in) + SPATIAL[rank])
    w = rng.standard_normal((c_out, c_in // group) + KERNEL[rank])
    return x, w, rng.standard_normal(c_out), attrs, rng


def transpose_case(rank, group_mode, stride, dilation, pad_mode):
    rng = np.random.default_rng(case_seed("cuda T", rank, group_mode, stride, dilation, pad_mode))
    c_in, c_out, group = T_GROUPS[group_mode]
    spatial = tuple(s - 1 for s in SPATIAL[rank])
    strides, dilations = (stride,) * rank, (dilation,) * rank
    _, _, out, attrs = expected_transpose_geometry(pad_mode, spatial, KERNEL[rank], strides, dilations)
    attrs.update(strides=list(strides), dilations=list(dilations), group=group)
    x = rng.standard_normal((2, c_in) + spatial)
    w = rng.standard_normal((c_in, c_out // group) + KERNEL[rank])
    return x, w, rng.standard_normal(c_out), attrs, rng


def forward_and_grads(op, x, w, b, attrs, rng, **kwargs):
    """Parity of the forward op and of its gradient op (all three outputs)."""
    y = run_node(op, [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    check_parity(op, [x, w, b], attrs, **kwargs)
    check_parity(op + "Grad", [dy, x, w], attrs, domain=MS, **kwargs)
    return dy


# --------------------------------------------------------------------------- the matrix
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("pad_mode", CONV_PADS)
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("group_mode", list(GROUPS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_matrix(rank, group_mode, stride, dilation, pad_mode, algorithm, search):
    force(search, algorithm)
    x, w, b, attrs, rng = conv_case(rank, group_mode, stride, dilation, pad_mode)
    forward_and_grads("Conv", x, w, b, attrs, rng)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("pad_mode", T_PADS)
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("group_mode", list(T_GROUPS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_transpose_matrix(rank, group_mode, stride, dilation, pad_mode, algorithm, search):
    force(search, algorithm)
    x, w, b, attrs, rng = transpose_case(rank, group_mode, stride, dilation, pad_mode)
    forward_and_grads("ConvTranspose", x, w, b, attrs, rng)


# --------------------------------------------------------------------------- special paths
SPECIAL = [
    ("Conv", (2, 6, 8, 9), (5, 6, 1, 1), {}),                                    # 1x1: no im2col
    ("Conv", (2, 6, 8, 9), (6, 3, 1, 1), {"group": 2}),
    ("Conv", (2, 6, 8, 9), (5, 6, 1, 1), {"strides": [2, 2]}),
    ("Conv", (1, 3, 40, 45), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("Conv", (3, 16, 30, 31), (8, 16, 3, 3), {"pads": [2, 1, 0, 2], "strides": [2, 1]}),
    ("Conv", (4, 5, 50), (7, 5, 9), {"pads": [4, 4], "dilations": [3]}),
    ("Conv", (2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ("Conv", (5, 1, 28, 28), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}),            # LeNet's first layer
    ("Conv", (2, 3, 5, 6, 7), (4, 3, 1, 1, 1), {}),
    ("Conv", (3, 8, 6, 6), (4, 2, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # more groups than samples
    ("Conv", (2, 2, 72, 70), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}),            # planes of several bias chunks
    ("Conv", (2, 4, 21, 40), (4, 1, 5, 5), {"group": 4, "pads": [2, 1, 2, 3], "strides": [2, 3],
                                             "dilations": [1, 2]}),          # depthwise, strided, dilated
    ("ConvTranspose", (2, 6, 5, 4), (6, 3, 1, 1), {}),                          # 1x1 transpose
    ("ConvTranspose", (2, 2, 5), (2, 3, 3), {"strides": [2], "auto_pad": "SAME_UPPER", "output_shape": [12]}),
    ("ConvTranspose", (1, 4, 3, 4), (4, 1, 3, 2), {"strides": [2, 3], "group": 4, "auto_pad": "SAME_UPPER",
                                                   "output_shape": [9, 12]}),
    ("ConvTranspose", (2, 3, 4), (3, 2, 2), {"strides": [3], "output_padding": [2]}),   # points no tap reaches
]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op,x_shape,w_shape,attrs", SPECIAL)
def test_special_paths(op, x_shape, w_shape, attrs, algorithm, search, rng):
    force(search, algorithm)
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(c_out)
    forward_and_grads(op, x, w, b, attrs, rng)


def test_im2col_in_chunks(search, rng, monkeypatch):
    """A workspace smaller than the batch's column matrices: im2col runs in chunks of samples,
    the weight gradient summing the chunks."""
    from minitrain.providers.cuda.conv import kernels as conv
    force(search, "im2col_gemm")
    monkeypatch.setattr(conv, "CHUNK_BYTES", 2 * 4 * 9 * 36 * 8)
    x, w, b, attrs, _ = conv_case(2, "g2", 1, 1, "p1", n=5)
    forward_and_grads("Conv", x, w, b, attrs, rng, dtypes=("float64",))


def test_empty_batch(rng):
    x, w = np.zeros((0, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    y = run_node("Conv", [x, w], provider="cuda")[0]
    assert y.shape == (0, 3, 3, 3)
    dx, dw, db = run_node("ConvGrad", [y, x, w], domain=MS, provider="cuda")
    assert dx.shape == x.shape and dw.shape == w.shape and not dw.any() and not db.any()


# --------------------------------------------------------------------------- gradient subsets
@pytest.mark.parametrize("subset", SUBSETS, ids=["+".join(s) for s in SUBSETS])
@pytest.mark.parametrize("op", ["ConvGrad", "ConvTransposeGrad"])
def test_gradient_subsets(op, subset, monkeypatch):
    """Each subset of (dX, dW, dB) matches the CPU and runs only the primitives it names."""
    from minitrain.providers.cuda.conv import kernels as conv
    if op == "ConvGrad":
        x, w, _, attrs, rng = conv_case(2, "g2", 2, 1, "asym")
        data = "_data"
    else:
        x, w, _, attrs, rng = transpose_case(2, "g2", 2, 1, "out_pad")
        data = "_forward"
    y = run_node(op[:-4], [x, w], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    calls = []
    for name in (data, "_weight", "_bias"):
        original = getattr(conv, name)
        monkeypatch.setattr(conv, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    check_parity(op, [dy, x, w], attrs, domain=MS, outputs=subset)
    ran = {name for name, wanted in ((data, "dX"), ("_weight", "dW"), ("_bias", "dB")) if wanted in subset}
    assert set(calls) == ran


# --------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_noncontiguous_inputs(op):
    if op == "Conv":
        x, w, b, attrs, rng = conv_case(2, "g2", 2, 2, "asym")
    else:
        x, w, b, attrs, rng = transpose_case(2, "g2", 2, 1, "out_shape")
    forward_and_grads(op, x, w, b, attrs, rng, noncontiguous_inputs=True)


def test_device_tensors_stay_on_the_device(rng):
    from minitrain.providers import get_provider
    prov = get_provider("cuda")
    x, w, b, attrs, _ = conv_case(2, "g1", 1, 1, "p1")
    xd, wd, bd = (prov.from_numpy(a.astype(np.float32)) for a in (x, w, b))
    y = run_node("Conv", [xd, wd, bd], attrs=attrs, provider="cuda")[0]
    assert prov.is_native(y)
    dx, dw, db = run_node("ConvGrad", [y, xd, wd], attrs=attrs, domain=MS, provider="cuda")
    assert all(prov.is_native(v) for v in (dx, dw, db))
    want = run_node("Conv", [a.astype(np.float32) for a in (x, w, b)], attrs=attrs)[0]
    np.testing.assert_allclose(prov.to_numpy(y), want, rtol=1e-5, atol=1e-5)


# test_conv.py's bad-input table, read from its parametrize mark
BAD_INPUT = next(m for m in test_conv.test_bad_input.pytestmark if m.name == "parametrize").args[1]


@pytest.mark.parametrize("op,inputs,attrs,error,words", BAD_INPUT)
def test_bad_input(op, inputs, attrs, error, words):
    """test_conv.py's bad-input table raises the same errors on CUDA."""
    with pytest.raises(error) as info:
        run_node(op, inputs, attrs=attrs, domain=MS if op.endswith("Grad") else "", provider="cuda")
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# --------------------------------------------------------------------------- the search
def _lenet_case():
    rng = np.random.default_rng(7)
    return rng.standard_normal((4, 1, 28, 28)).astype(np.float32), \
        rng.standard_normal((6, 1, 5, 5)).astype(np.float32), {"pads": [2, 2, 2, 2]}


def test_second_call_is_a_cache_hit(search):
    x, w, attrs = _lenet_case()
    run_node("Conv", [x, w], attrs=attrs, provider="cuda")
    searches, timed, hits = stats(search).searches, stats(search).timed, stats(search).hits
    assert timed >= 2    # both algorithms fit and were timed
    run_node("Conv", [x, w], attrs=attrs, provider="cuda")
    assert (stats(search).searches, stats(search).timed, stats(search).hits) == (searches, timed, hits + 1)


def test_heuristic_mode_times_nothing(search):
    options().mode = "heuristic"
    x, w, attrs = _lenet_case()
    timed = stats(search).timed
    check_parity("Conv", [x, w], attrs, dtypes=("float32",))
    check_parity("ConvGrad", [np.ones((4, 6, 28, 28), np.float32), x, w], attrs, domain=MS, dtypes=("float32",))
    assert stats(search).timed == timed


def test_failing_algorithm_falls_back(search, monkeypatch):
    from minitrain.providers.cuda.conv import kernels as conv
    force(search, "im2col_gemm")

    def fail(*args):
        raise RuntimeError("forced failure")
    monkeypatch.setattr(conv.Im2colGemm, "run", fail)
    x, w, attrs = _lenet_case()
    before = stats(search).fallbacks
    check_parity("Conv", [x, w], attrs, dtypes=("float32",))
    assert stats(search).fallbacks > before


def test_workspace_cap_excludes_im2col(search):
    from minitrain.ops.conv_geometry import geometry_for
    from minitrain.providers.cuda.conv import kernels as conv
    x, w, attrs = _lenet_case()
    geom = geometry_for("conv", "Conv", x.shape, w.shape, attrs)
    key = search.ConvKey("Conv", "forward", 4, geom, "float32", False, ("Y",))
    tiled = ["direct_tiled", "direct_tiled_r1", "direct_rows"]
    provider = get_provider("cuda")
    assert [a.name for a in search.candidates(provider, key, conv.ALGORITHMS)] == ["im2col_gemm", "direct"] + tiled
    options().workspace_limit = 1024
    assert [a.name for a in search.candidates(provider, key, conv.ALGORITHMS)] == ["direct"] + tiled
    check_parity("Conv", [x, w], attrs, dtypes=("float32",))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_deterministic_weight_gradient(algorithm, search):
    force(search, algorithm)
    options().deterministic = True
    x, w, b, attrs, rng = conv_case(2, "g1", 1, 1, "p1", n=8)
    dy = rng.standard_normal(run_node("Conv", [x, w], attrs=attrs)[0].shape)
    args = [a.astype(np.float32) for a in (dy, x, w)]
    first = run_node("ConvGrad", args, attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
    for _ in range(3):
        again = run_node("ConvGrad", args, attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
        assert np.array_equal(first, again)


TILED_SHAPES = [
    ("Conv", (2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),                # depthwise
    ("Conv", (5, 1, 28, 28), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}),                          # LeNet's first layer
    ("Conv", (3, 4, 40), (8, 2, 5), {"group": 2, "strides": [2], "pads": [3, 1]}),           # 1D: single-row tiles
    ("Conv", (2, 3, 11, 13), (6, 3, 3, 3), {"strides": [2, 2], "dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    ("ConvTranspose", (2, 6, 7, 8), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ("Conv", (2, 12, 17, 19), (6, 12, 3, 3), {"pads": [1, 1, 1, 1]}),                        # a U-Net decoder's
]


@pytest.mark.parametrize("algorithm", ["direct_tiled", "direct_tiled_r1"])
@pytest.mark.parametrize("op,x_shape,w_shape,attrs", TILED_SHAPES)
def test_tiled_runs_every_direction(op, x_shape, w_shape, attrs, algorithm, search, rng):
    """The tiled kernels (both tile heights) take all three primitives of the small-channel
    shapes they are for (forward, data and weight) and match the CPU in every dtype."""
    force(search, algorithm)
    before = stats(search).ran[algorithm]
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(c_out)
    forward_and_grads(op, x, w, b, attrs, rng)
    assert stats(search).ran[algorithm] - before >= 3 * len(DTYPES)   # per dtype: the op's primitive, its gradient's two


ROWS_SHAPES = [   # op, x, w, attrs, primitives the kernels take per dtype
    ("Conv", (2, 6, 9, 10), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}, 2),            # depthwise
    ("Conv", (3, 1, 28, 27), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}, 2),                       # LeNet's first layer
    ("Conv", (2, 4, 11, 9), (4, 2, 3, 5), {"group": 2, "strides": [2, 1], "dilations": [2, 1],
                                           "pads": [1, 0, 2, 3]}, 1),                        # rows strided: forward
    ("Conv", (3, 2, 13), (4, 2, 3), {"pads": [0, 2]}, 2),                                    # 1D
    ("Conv", (2, 16, 12, 10), (12, 16, 3, 3), {"pads": [1, 1, 1, 1]}, 2),                    # 16 channels
    ("ConvTranspose", (2, 4, 7, 6), (4, 1, 5, 5), {"group": 4, "pads": [1, 2, 3, 0]}, 2),
]


@pytest.mark.parametrize("op,x_shape,w_shape,attrs,per_dtype", ROWS_SHAPES)
def test_rows_runs_forward_and_data(op, x_shape, w_shape, attrs, per_dtype, search, rng):
    """The register-tiled kernels take the forward and (unit strides) data primitives of the
    shapes they are for, the weight gradient going to the next algorithm, and match the CPU in
    every dtype."""
    force(search, "direct_rows")
    before = stats(search).ran["direct_rows"]
    c_out = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(c_out)
    forward_and_grads(op, x, w, b, attrs, rng)
    assert stats(search).ran["direct_rows"] - before == len(DTYPES) * per_dtype


# --------------------------------------------------------------------------- rankings on disk
def test_rankings_on_disk(search, tmp_path, caplog):
    """A ranking written by one search is read back by the next (nothing timed); a corrupt file
    is ignored with one warning and rewritten."""
    options().cache_dir = str(tmp_path)
    x, w, attrs = _lenet_case()
    expected = run_node("Conv", [x, w], attrs=attrs)[0]
    run_node("Conv", [x, w], attrs=attrs, provider="cuda")
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and not list(tmp_path.glob(".tmp-*"))
    search.clear_cache()
    timed, disk_hits = stats(search).timed, stats(search).disk_hits
    np.testing.assert_allclose(run_node("Conv", [x, w], attrs=attrs, provider="cuda")[0], expected, rtol=1e-4,
                               atol=1e-5)
    assert (stats(search).timed, stats(search).disk_hits) == (timed, disk_hits + 1)
    files[0].write_text("{not json")
    search.clear_cache()
    with caplog.at_level("WARNING", logger="minitrain.cuda.conv"):
        for _ in range(2):
            search.clear_cache()
            np.testing.assert_allclose(run_node("Conv", [x, w], attrs=attrs, provider="cuda")[0], expected,
                                       rtol=1e-4, atol=1e-5)
    assert sum("unreadable cache file" in r.getMessage() for r in caplog.records) == 1
    assert stats(search).timed > timed and stats(search).disk_hits == disk_hits + 2
    assert '"ranking"' in files[0].read_text()


def test_rankings_are_kept_per_element_type(search, tmp_path):
    """bfloat16, float16 and float32 runs of one shape rank their algorithms separately, in memory
    and on disk: a ranking timed in one precision is never used for another."""
    options().cache_dir = str(tmp_path)
    x, w, attrs = _lenet_case()
    for dtype in DTYPES:
        run_node("Conv", [x.astype(dtype), w.astype(dtype)], attrs=attrs, provider="cuda")
    keys = [k for k in search.rankings() if k.op == "Conv" and k.direction == "forward"]
    assert sorted(k.dtype for k in keys) == sorted(DTYPES)
    assert len({k.geom for k in keys}) == 1
    assert len(list(tmp_path.glob("*.json"))) == len(DTYPES)


@pytest.mark.parametrize("algorithm", ALGORITHMS + ["direct_rows"])
@pytest.mark.parametrize("dtype", HALF_TYPES)
def test_sixteen_bit_convolutions_accumulate_in_float32(dtype, algorithm, search):
    """Every tap of 1024 channels x 2 x 2 is 1: the 4096 products sum to 4096 in float32, where
    accumulating in the 16-bit type would stop at 256 (bfloat16) or 2048 (float16).  Each
    weight gradient entry sums 4096 ones too, over a 64 x 64 output."""
    force(search, algorithm)
    x, w = np.ones((1, 1024, 2, 2), dtype), np.ones((1, 1024, 2, 2), dtype)
    (y,) = run_node("Conv", [x, w], provider="cuda")
    np.testing.assert_array_equal(y.astype(np.float64), np.full((1, 1, 1, 1), 4096.0))
    dy, img = np.ones((1, 1, 64, 64), dtype), np.ones((1, 1, 65, 65), dtype)
    (dw,) = run_node("ConvGrad", [dy, img, np.ones((1, 1, 2, 2), dtype)], domain=MS, provider="cuda", outputs=["dW"])
    np.testing.assert_array_equal(dw.astype(np.float64), np.full((1, 1, 2, 2), 4096.0))
