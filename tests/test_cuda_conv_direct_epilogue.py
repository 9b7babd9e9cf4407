"""FusedConv on the direct algorithms (direct, direct_tiled, direct_tiled_r1, direct_rows),
which apply the bias and the activation in their forward kernels' epilogue: each forced in turn
(search mode "fixed") on 2-D convolutions they take, with and without a bias, every activation
and element type, against the CPU."""
import numpy as np
import pytest
from cuda_parity import DTYPES, check_parity
from test_fusion import ACTS, fused_attrs

from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
CASES = {   # name: (x shape, w shape, attrs, the algorithms that take it)
    "3x3": ((3, 6, 17, 19), (8, 6, 3, 3), {"pads": [1, 1, 1, 1]},
            ["direct", "direct_tiled", "direct_tiled_r1", "direct_rows"]),
    "1x1": ((2, 4, 16, 16), (6, 4, 1, 1), {}, ["direct", "direct_tiled", "direct_tiled_r1"]),
    "depthwise": ((2, 6, 15, 15), (6, 1, 3, 3), {"group": 6, "strides": [2, 1], "pads": [1, 1, 1, 1]},
                  ["direct", "direct_tiled", "direct_tiled_r1", "direct_rows"]),
}
RUNS = [(case, algorithm) for case, (*_, algorithms) in CASES.items() for algorithm in algorithms]


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("case,algorithm", RUNS)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv_epilogue_of_the_direct_algorithms(act, alpha, case, algorithm, bias, search, rng):
    x_shape, w_shape, attrs, _ = CASES[case]
    options = get_provider("cuda").conv_search
    options.mode, options.algorithm = "fixed", algorithm
    ran = search.stats(get_provider("cuda")).ran
    before = ran[algorithm]
    fan_in = int(np.prod(w_shape[1:]))
    inputs = [rng.standard_normal(x_shape), rng.standard_normal(w_shape) / np.sqrt(fan_in)]
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]))
    check_parity("FusedConv", inputs, {**attrs, **fused_attrs(act, alpha, "activation_params")}, domain=MS)
    assert ran[algorithm] - before == len(DTYPES)
