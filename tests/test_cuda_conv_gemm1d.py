"""The implicit-GEMM 1-D convolutions (providers/cuda/conv/gemm1d.py) against the CPU kernels.

Each case is forced to the algorithm (search mode "fixed") and checked in every element type:
the forward with its bias, and the three gradients; the run counters prove that the algorithm
took each primitive (forward, data, weight) rather than the next one in the ranking.  The
shapes cover odd lengths, tiles cut by the length and by the channel counts, pads on one side,
pads wider than the kernel (the data gradient's pad then negative), k from 1 to 9, batch 1,
ConvTranspose with unit stride, and the 1D CNN's three layers; the keys the algorithm leaves to
the others (strides, dilations, groups) fall through to them.  FusedConv runs its bias and
activation in the algorithm's epilogue, and after the convolution for the algorithms that do
not fuse them (conv/epilogue.py)."""
import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from test_fusion import ACTS, fused_attrs
from minitrain import run_node
from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
NAMES = ("implicit_gemm_1d", "implicit_gemm_1d_fine")


def force(algorithm):
    options = get_provider("cuda").conv_search
    options.mode, options.algorithm = "fixed", algorithm


def runs(search):
    ran = search.stats(get_provider("cuda")).ran
    return sum(ran[name] for name in NAMES)


def check_every_direction(op, x, w, b, attrs, rng, dtypes=DTYPES):
    y = run_node(op, [x, w, b], attrs=attrs)[0]
    dy = rng.standard_normal(y.shape)
    check_parity(op, [x, w, b], attrs, dtypes=dtypes)
    check_parity(op + "Grad", [dy, x, w], attrs, domain=MS, dtypes=dtypes)


SHAPES = [   # x, w, attrs
    ((2, 3, 37), (5, 3, 3), {"pads": [1, 1]}),
    ((1, 1, 300), (16, 1, 7), {"pads": [3, 3]}),                   # the 1D CNN's first layer, batch 1
    ((3, 10, 45), (9, 10, 1), {}),                                 # k 1
    ((2, 4, 20), (70, 4, 9), {"pads": [0, 4]}),                    # two channel tiles, pad at the end only
    ((1, 17, 260), (3, 17, 5), {"pads": [6, 2]}),                  # pad above k - 1: the data pad is -2
    ((2, 13, 33), (11, 13, 4), {"pads": [2, 1]}),                  # even k, uneven pads
    ((2, 6, 9), (7, 6, 8), {"pads": [0, 0]}),                      # output shorter than a tile
    ((2, 5, 513), (12, 5, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 40, 31), (20, 40, 6), {"pads": [5, 5]}),                  # several input-channel chunks
    ((2, 3, 257), (9, 3, 3), {"auto_pad": "SAME_UPPER"}),          # a second tile of one position
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", SHAPES)
def test_every_direction_matches_the_cpu(x_shape, w_shape, attrs, search, rng):
    force("implicit_gemm_1d")
    before = runs(search)
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_every_direction("Conv", x, w, b, attrs, rng)
    assert runs(search) - before == 3 * len(DTYPES)   # per dtype: the forward, the data and weight gradients


@pytest.mark.parametrize("k", range(1, 10))
def test_every_kernel_width(k, search, rng):
    force("implicit_gemm_1d")
    before = runs(search)
    x, w, b = rng.standard_normal((2, 7, 29)), rng.standard_normal((6, 7, k)), rng.standard_normal(6)
    check_every_direction("Conv", x, w, b, {"pads": [k // 2, (k - 1) // 2]}, rng, dtypes=("float64", "float32"))
    assert runs(search) - before == 3 * 2


CNN1D = [   # bench/cases.py's CNN1D layers at batch 3
    ((3, 1, 1024), (16, 1, 7), {"pads": [3, 3]}),
    ((3, 16, 512), (32, 16, 5), {"pads": [2, 2]}),
    ((3, 32, 256), (64, 32, 3), {"pads": [1, 1]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CNN1D)
def test_cnn1d_layers(x_shape, w_shape, attrs, search, rng):
    force("implicit_gemm_1d")
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_every_direction("Conv", x, w, b, attrs, rng, dtypes=("float32",))


def test_conv_transpose_unit_stride(search, rng):
    """ConvTranspose runs the data primitive forward and the forward primitive for its dX."""
    force("implicit_gemm_1d")
    before = runs(search)
    x, w, b = rng.standard_normal((2, 6, 40)), rng.standard_normal((6, 5, 5)), rng.standard_normal(5)
    check_every_direction("ConvTranspose", x, w, b, {"pads": [1, 3]}, rng)
    assert runs(search) - before == 3 * len(DTYPES)


def test_the_fine_instance(search, rng):
    """The instance with small channel chunks and more weight slices, alone: several chunks
    of input channels, several slices."""
    force("implicit_gemm_1d_fine")
    ran = search.stats(get_provider("cuda")).ran
    before = ran["implicit_gemm_1d_fine"]
    x, w, b = rng.standard_normal((4, 40, 300)), rng.standard_normal((36, 40, 5)), rng.standard_normal(36)
    check_every_direction("Conv", x, w, b, {"pads": [2, 2]}, rng, dtypes=("float64", "float32"))
    assert ran["implicit_gemm_1d_fine"] - before == 3 * 2


@pytest.mark.parametrize("attrs,w_shape", [
    ({"strides": [2], "pads": [1, 1]}, (6, 4, 3)),
    ({"dilations": [2], "pads": [2, 2]}, (6, 4, 3)),
    ({"group": 2, "pads": [1, 1]}, (6, 2, 3)),
])
def test_other_keys_fall_through(attrs, w_shape, search, rng):
    force("implicit_gemm_1d")
    before = runs(search)
    x, w, b = rng.standard_normal((2, 4, 30)), rng.standard_normal(w_shape), rng.standard_normal(6)
    check_every_direction("Conv", x, w, b, attrs, rng, dtypes=("float32",))
    assert runs(search) == before


@pytest.mark.parametrize("algorithm", NAMES)
def test_weight_gradient_is_repeatable(algorithm, search, rng):
    force(algorithm)
    x, w = rng.standard_normal((8, 16, 512)).astype(np.float32), rng.standard_normal((32, 16, 5)).astype(np.float32)
    dy = rng.standard_normal((8, 32, 512)).astype(np.float32)
    attrs = {"pads": [2, 2]}
    first = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
    for _ in range(3):
        again = run_node("ConvGrad", [dy, x, w], attrs=attrs, domain=MS, provider="cuda", outputs=["dW"])[0]
        assert np.array_equal(first, again)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("algorithm", ["implicit_gemm_1d", "im2col_gemm", "direct_tiled"])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv_epilogue(act, alpha, algorithm, bias, search, rng):
    """FusedConv forced to the fused epilogue (implicit_gemm_1d) and to algorithms that add the
    bias and activation after the convolution matches the CPU."""
    force(algorithm)
    ran = search.stats(get_provider("cuda")).ran
    before = ran[algorithm]
    x, w = rng.standard_normal((3, 6, 70)), rng.standard_normal((10, 6, 5)) / np.sqrt(30)
    inputs = [x, w] + ([rng.standard_normal(10)] if bias else [])
    attrs = {"pads": [2, 1], **fused_attrs(act, alpha, "activation_params")}
    check_parity("FusedConv", inputs, attrs, domain=MS)
    assert ran[algorithm] - before == len(DTYPES)
