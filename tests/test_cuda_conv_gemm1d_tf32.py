"""The TF32 tensor-core implicit-GEMM 1-D convolutions (providers/cuda/conv/gemm1d_tf32.py)
against the CPU kernels in float64.

A provider with use_tf32 on runs each case forced to the algorithm (search mode "fixed") in
float32: the forward with its bias and ConvGrad's three gradients, on the shapes of
test_cuda_conv_gemm1d.py, for the family and for its pipelined instances (the weight held by
each block, the source windows in a ring), which take each primitive whose weight fits a block.  Random inputs match at TF32's tolerance (1e-2 of the output's
scale, as cuBLAS's TF32 GEMM is checked in test_cuda_math.py); inputs that TF32 holds exactly
(ten mantissa bits) match at float32's, which a fragment or an offset read from the wrong row
or column would miss by far.  The run counters prove that the algorithm took each primitive;
FusedConv runs each activation in its epilogue; strict-FP32 keys and the other element types
are left to the other algorithms."""
import numpy as np
import pytest

from test_cuda_conv_gemm1d import CNN1D, SHAPES
from test_fusion import ACTS, fused_attrs
from minitrain import run_node
from minitrain.ops.conv_geometry import geometry_for
from minitrain.providers import get_provider
from minitrain.providers.cuda_options import ConvSearchOptions

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
FAMILY = "implicit_gemm_1d_tf32"
PIPELINED = ("implicit_gemm_1d_tf32_pipe", "implicit_gemm_1d_tf32_pipe_fine")
NAMES = (FAMILY, "implicit_gemm_1d_tf32_fine") + PIPELINED
DIRECTIONS = ("forward", "data", "weight")
TF32_TOLERANCE = 1e-2     # of the output's scale
EXACT_TOLERANCE = 1e-5    # of the output's scale: float32 accumulation of exact products


@pytest.fixture(scope="module")
def tf32_provider():
    return get_provider("cuda").for_session(use_tf32=True)


@pytest.fixture
def tf32(tf32_provider, search):
    """The use_tf32 provider with fresh search options (the `search` fixture clears the rankings)."""
    tf32_provider.conv_search = ConvSearchOptions()
    return tf32_provider


def force(provider, algorithm):
    provider.conv_search.mode, provider.conv_search.algorithm = "fixed", algorithm


def runs(search, provider):
    ran = search.stats(provider).ran
    return sum(ran[name] for name in NAMES)


def algorithm_named(name):
    from minitrain.providers.cuda.conv import kernels as conv
    return next(a for a in conv.ALGORITHMS if a.name == name)


def taken(search, name, x_shape, w_shape, attrs, op="Conv"):
    """How many of the three primitives of the case the algorithm `name` supports."""
    geom = geometry_for("conv", op, x_shape, w_shape, attrs)
    algorithm = algorithm_named(name)
    return sum(algorithm.supports(search.ConvKey(op, direction, x_shape[0], geom, "float32", True, ()))
               for direction in DIRECTIONS)


def tf32_exact(x):
    """x with its float32 mantissa cut to TF32's ten bits."""
    bits = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


def check_against_cpu(provider, op, inputs, attrs, tolerance, domain=""):
    """run_node on `provider` in float32 against the CPU in float64, every output."""
    expected = run_node(op, inputs, attrs=attrs, domain=domain)
    got = run_node(op, [x.astype(np.float32) for x in inputs], attrs=attrs, domain=domain, provider=provider)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == np.float32 and g.shape == e.shape
        scale = max(1.0, float(np.max(np.abs(e))))
        np.testing.assert_allclose(g.astype(np.float64), e, rtol=0, atol=tolerance * scale,
                                   err_msg=f"{op} output #{k}")


def check_every_direction(provider, op, x, w, b, attrs, rng, tolerance=TF32_TOLERANCE, exact=False):
    y = run_node(op, [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    if exact:
        x, w, b, dy = (tf32_exact(v) for v in (x, w, b, dy))
    check_against_cpu(provider, op, [x, w, b], attrs, tolerance)
    check_against_cpu(provider, op + "Grad", [dy, x, w], attrs, tolerance, domain=MS)


@pytest.mark.parametrize("x_shape,w_shape,attrs", SHAPES)
@pytest.mark.parametrize("exact", [False, True], ids=["random", "tf32_exact"])
def test_every_direction_matches_the_cpu(x_shape, w_shape, attrs, exact, tf32, search, rng):
    force(tf32, FAMILY)
    before = runs(search, tf32)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_every_direction(tf32, "Conv", x, w, b, attrs, rng, EXACT_TOLERANCE if exact else TF32_TOLERANCE, exact)
    assert runs(search, tf32) - before == 3    # the forward, the data and weight gradients


@pytest.mark.parametrize("x_shape,w_shape,attrs", SHAPES)
@pytest.mark.parametrize("exact", [False, True], ids=["random", "tf32_exact"])
@pytest.mark.parametrize("algorithm", PIPELINED)
def test_pipelined_every_direction(x_shape, w_shape, attrs, exact, algorithm, tf32, search, rng):
    """The pipelined instances on every shape: the primitives they take (those whose weight fits
    a block, and every weight gradient) match, the others fall through."""
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    expected = taken(search, algorithm, x_shape, w_shape, attrs)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_every_direction(tf32, "Conv", x, w, b, attrs, rng, EXACT_TOLERANCE if exact else TF32_TOLERANCE, exact)
    assert ran[algorithm] - before == expected


@pytest.mark.parametrize("k", range(1, 10))
@pytest.mark.parametrize("algorithm", (FAMILY,) + PIPELINED)
def test_every_kernel_width(k, algorithm, tf32, search, rng):
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    x, w, b = rng.standard_normal((2, 7, 29)), rng.standard_normal((6, 7, k)), rng.standard_normal(6)
    check_every_direction(tf32, "Conv", x, w, b, {"pads": [k // 2, (k - 1) // 2]}, rng, EXACT_TOLERANCE, exact=True)
    assert ran[algorithm] - before == 3


@pytest.mark.parametrize("x_shape,w_shape,attrs", CNN1D)
@pytest.mark.parametrize("algorithm", NAMES)
def test_cnn1d_layers(x_shape, w_shape, attrs, algorithm, tf32, search, rng):
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_every_direction(tf32, "Conv", x, w, b, attrs, rng)
    assert ran[algorithm] - before == 3


def test_the_fine_instance(tf32, search, rng):
    """Several chunks of input channels, several weight slices, two channel tiles."""
    force(tf32, "implicit_gemm_1d_tf32_fine")
    ran = search.stats(tf32).ran
    before = ran["implicit_gemm_1d_tf32_fine"]
    x, w, b = rng.standard_normal((4, 40, 300)), rng.standard_normal((36, 40, 5)), rng.standard_normal(36)
    check_every_direction(tf32, "Conv", x, w, b, {"pads": [2, 2]}, rng, EXACT_TOLERANCE, exact=True)
    assert ran["implicit_gemm_1d_tf32_fine"] - before == 3


@pytest.mark.parametrize("algorithm", (FAMILY,) + PIPELINED)
def test_conv_transpose_unit_stride(algorithm, tf32, search, rng):
    """ConvTranspose runs the data primitive forward and the forward primitive for its dX."""
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    x, w, b = rng.standard_normal((2, 6, 40)), rng.standard_normal((6, 5, 5)), rng.standard_normal(5)
    check_every_direction(tf32, "ConvTranspose", x, w, b, {"pads": [1, 3]}, rng, EXACT_TOLERANCE, exact=True)
    assert ran[algorithm] - before == 3


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("algorithm", (FAMILY,) + PIPELINED)
def test_fused_conv_epilogue(act, alpha, bias, algorithm, tf32, search, rng):
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    x, w = rng.standard_normal((3, 6, 70)), rng.standard_normal((10, 6, 5)) / np.sqrt(30)
    inputs = [x, w] + ([rng.standard_normal(10)] if bias else [])
    attrs = {"pads": [2, 1], **fused_attrs(act, alpha, "activation_params")}
    check_against_cpu(tf32, "FusedConv", [tf32_exact(v) for v in inputs], attrs, EXACT_TOLERANCE, domain=MS)
    assert ran[algorithm] - before == 1


@pytest.mark.parametrize("x_shape,w_shape", [((300, 3, 1000), (8, 3, 5)), ((300, 3, 999), (8, 3, 5)),
                                              ((300, 16, 128), (32, 16, 5))],
                         ids=["two stages, 16-byte rows", "two stages, unaligned rows", "three stages"])
@pytest.mark.parametrize("algorithm", (FAMILY, "implicit_gemm_1d_tf32_fine"))
def test_weight_ring_over_many_chunks(x_shape, w_shape, algorithm, tf32, search, rng):
    """Slices of several chunks each: the ring's buffers refilled while the warps multiply, dY's
    rows staged by 16-byte copies (length a multiple of 4) or one float at a time.  The inputs
    are small integers, so that every float32 sum is exact and one misread position shows."""
    force(tf32, algorithm)
    ran = search.stats(tf32).ran
    before = ran[algorithm]
    x, w = rng.integers(-3, 4, x_shape).astype(np.float64), rng.standard_normal(w_shape)
    dy = rng.integers(-3, 4, (x_shape[0], w_shape[0], x_shape[2])).astype(np.float64)
    expected = run_node("ConvGrad", [dy, x, w], attrs={"pads": [2, 2]}, domain=MS, outputs=["dW"])[0]
    got = run_node("ConvGrad", [v.astype(np.float32) for v in (dy, x, w)], attrs={"pads": [2, 2]}, domain=MS,
                   provider=tf32, outputs=["dW"])[0]
    np.testing.assert_array_equal(got, expected.astype(np.float32))
    assert ran[algorithm] - before == 1


@pytest.mark.parametrize("attrs,w_shape", [
    ({"strides": [2], "pads": [1, 1]}, (6, 4, 3)),
    ({"dilations": [2], "pads": [2, 2]}, (6, 4, 3)),
    ({"group": 2, "pads": [1, 1]}, (6, 2, 3)),
])
def test_other_keys_fall_through(attrs, w_shape, tf32, search, rng):
    force(tf32, FAMILY)
    before = runs(search, tf32)
    x, w, b = rng.standard_normal((2, 4, 30)), rng.standard_normal(w_shape), rng.standard_normal(6)
    check_every_direction(tf32, "Conv", x, w, b, attrs, rng)
    assert runs(search, tf32) == before


@pytest.mark.parametrize("direction", ["forward", "data", "weight"])
def test_offered_only_for_float32_with_tf32(direction, search):
    from minitrain.providers.cuda.conv import kernels as conv
    geom = geometry_for("conv", "Conv", (2, 16, 64), (32, 16, 5), {"pads": [2, 2]})
    mine = [a for a in conv.ALGORITHMS if getattr(a, "family", None) == FAMILY]
    assert [a.name for a in mine] == list(NAMES)

    def key(dtype, tf32):
        return search.ConvKey("Conv", direction, 2, geom, dtype, tf32, ())
    for algorithm in mine:
        assert algorithm.supports(key("float32", True))
        assert not algorithm.supports(key("float32", False))
        for dtype in ("float64", "float16", "bfloat16"):
            assert not algorithm.supports(key(dtype, True)), dtype


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_strict_providers_and_other_types_fall_through(dtype, search, rng):
    """Forced on the strict-FP32 provider (every type), or on the TF32 one in another type,
    the family leaves every primitive to the others."""
    provider = get_provider("cuda")
    force(provider, FAMILY)
    before = runs(search, provider)
    x, w = rng.standard_normal((2, 5, 40)).astype(dtype), rng.standard_normal((8, 5, 3)).astype(dtype)
    dy = rng.standard_normal((2, 8, 40)).astype(dtype)
    run_node("Conv", [x, w], attrs={"pads": [1, 1]}, provider=provider)
    run_node("ConvGrad", [dy, x, w], attrs={"pads": [1, 1]}, domain=MS, provider=provider)
    assert runs(search, provider) == before


def test_other_types_fall_through_on_tf32(tf32, search, rng):
    force(tf32, FAMILY)
    before = runs(search, tf32)
    for dtype in ("float64", "float16"):
        x, w = rng.standard_normal((2, 5, 40)).astype(dtype), rng.standard_normal((8, 5, 3)).astype(dtype)
        dy = rng.standard_normal((2, 8, 40)).astype(dtype)
        run_node("Conv", [x, w], attrs={"pads": [1, 1]}, provider=tf32)
        run_node("ConvGrad", [dy, x, w], attrs={"pads": [1, 1]}, domain=MS, provider=tf32)
    assert runs(search, tf32) == before


@pytest.mark.parametrize("algorithm", NAMES)
def test_weight_gradient_is_repeatable(algorithm, tf32, search, rng):
    force(tf32, algorithm)
    x, w = rng.standard_normal((8, 16, 512)).astype(np.float32), rng.standard_normal((32, 16, 5)).astype(np.float32)
    dy = rng.standard_normal((8, 32, 512)).astype(np.float32)
    attrs = {"pads": [2, 2]}
    first = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS, provider=tf32, outputs=["dW"])[0]
    for _ in range(3):
        again = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS, provider=tf32, outputs=["dW"])[0]
        assert np.array_equal(first, again)
