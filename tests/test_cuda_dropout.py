"""Dropout and DropoutGrad on CUDA: the mask is Philox4x32-10's (checked against a NumPy
Philox that reproduces the published known-answer vectors), the kept fraction is close to
1 - ratio, output = x * mask / (1 - ratio), the seed attribute repeats a mask and the global
generator makes runs reproducible, DropoutGrad applies the forward mask, inference mode and
ratio 0 are the identity, device inputs stay on the device, bad input raises the CPU's errors."""
import numpy as np
import pytest

import minitrain.random
from cuda_parity import DTYPES
from minitrain import run_node
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
TRUE = np.array(True)
RTOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-14}    # an ulp: rounded twice


def philox4x32_10(counter, key):
    """Philox4x32-10 of uint64 arrays holding 32-bit words: four counter words, two key words."""
    m0, m1, w0, w1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
    low, shift = np.uint64(0xFFFFFFFF), np.uint64(32)
    c = [np.asarray(v, np.uint64) for v in counter]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + w0) & low, (k1 + w1) & low
        p0, p1 = c[0] * m0, c[2] * m1
        c = [(p1 >> shift) ^ c[1] ^ k0, p1 & low, (p0 >> shift) ^ c[3] ^ k1, p0 & low]
    return c


def reference_mask(n, seed, ratio):
    """The mask cuda/dropout.cu draws for n elements."""
    groups = np.arange(-(-n // 4), dtype=np.uint64)
    words = philox4x32_10([groups & np.uint64(0xFFFFFFFF), groups >> np.uint64(32), 0, 0],
                          (seed & 0xFFFFFFFF, seed >> 32))
    threshold = min(int(round(ratio * 2 ** 32)), 2 ** 32 - 1)
    return (np.stack(words, axis=1).reshape(-1)[:n] >= threshold)


def test_reference_philox_reproduces_the_known_answers():
    """Random123's kat_vectors for philox4x32_10."""
    cases = [([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
             ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
             ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0),
              [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]
    for counter, key, expected in cases:
        assert [int(v) for v in philox4x32_10(counter, key)] == expected


@pytest.mark.parametrize("shape", [(50, 40), (7,), (3, 5, 7), (1000, 1001)])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.9])
@pytest.mark.parametrize("dtype", DTYPES)
def test_training_mask_and_scaling(shape, ratio, dtype, rng):
    x = rng.standard_normal(shape).astype(dtype)
    seed = 12345678901234 + int(ratio * 100)
    ratio = float(np.array(ratio, dtype))      # what the kernel reads
    y, mask = run_node("Dropout", [x, np.array(ratio, dtype), TRUE], attrs={"seed": seed}, provider="cuda")
    assert y.dtype == dtype and mask.dtype == np.bool_ and mask.shape == shape
    np.testing.assert_array_equal(mask, reference_mask(x.size, seed, ratio).reshape(shape))
    if x.size >= 2000:
        assert abs(mask.mean() - (1 - ratio)) < 4 * np.sqrt(ratio * (1 - ratio) / x.size) + 1e-3
    expected = (x.astype(np.float64) * mask / (1 - ratio)).astype(dtype)
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(np.float64), rtol=RTOL[dtype])
    assert np.all(y[~mask] == 0)
    dy = rng.standard_normal(shape).astype(dtype)
    (dx,) = run_node("DropoutGrad", [dy, mask, np.array(ratio, dtype), TRUE], domain=MS, provider="cuda")
    np.testing.assert_allclose(dx.astype(np.float64), (dy.astype(np.float64) * mask / (1 - ratio)).astype(dtype)
                               .astype(np.float64), rtol=RTOL[dtype])


def test_seed_attribute_repeats_and_global_generator_is_seedable(rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    inputs = [x, np.array(0.5, np.float32), TRUE]
    a = run_node("Dropout", inputs, attrs={"seed": 7}, provider="cuda")[1]
    b = run_node("Dropout", inputs, attrs={"seed": 7}, provider="cuda")[1]
    c = run_node("Dropout", inputs, attrs={"seed": 8}, provider="cuda")[1]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    minitrain.random.seed(3)
    first = run_node("Dropout", inputs, provider="cuda")[1]
    second = run_node("Dropout", inputs, provider="cuda")[1]
    assert not np.array_equal(first, second), "the global generator advances"
    minitrain.random.seed(3)
    assert np.array_equal(run_node("Dropout", inputs, provider="cuda")[1], first)
    state = minitrain.random.get_state()
    after = run_node("Dropout", inputs, provider="cuda")[1]
    minitrain.random.set_state(state)
    assert np.array_equal(run_node("Dropout", inputs, provider="cuda")[1], after)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inference_mode_and_zero_ratio_are_identity(dtype, rng):
    x = rng.standard_normal((3, 4)).astype(dtype)
    for inputs in ([x], [x, np.array(0.5, dtype)], [x, np.array(0.5, dtype), np.array(False)],
                   [x, np.array(0.0, dtype), TRUE]):
        y, mask = run_node("Dropout", inputs, provider="cuda")
        np.testing.assert_array_equal(y, x)
        assert mask.dtype == np.bool_ and mask.all()
    (y,) = run_node("Dropout", [x, np.array(0.5, dtype), TRUE], outputs=["output"], provider="cuda")
    assert y.shape == x.shape
    dy, mask = rng.standard_normal((3, 4)).astype(dtype), np.zeros((3, 4), bool)
    for extra in ([], [np.array(0.5, dtype)], [np.array(0.5, dtype), np.array(False)], [np.array(0.0, dtype), TRUE]):
        (dx,) = run_node("DropoutGrad", [dy, mask, *extra], domain=MS, provider="cuda")
        np.testing.assert_array_equal(dx, dy)


def test_non_contiguous_and_device_inputs(rng):
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    wide = rng.standard_normal((40, 60))
    x = wide[:, ::2]
    y, mask = run_node("Dropout", [x, np.array(0.3), TRUE], attrs={"seed": 11}, provider="cuda")
    np.testing.assert_allclose(y, x * mask / 0.7, rtol=1e-14)
    y_dev, mask_dev = run_node("Dropout", [cuda.from_numpy(np.ascontiguousarray(x)), np.array(0.3), TRUE],
                               attrs={"seed": 11}, provider="cuda")
    assert cuda.is_native(y_dev) and cuda.is_native(mask_dev)
    np.testing.assert_array_equal(cuda.to_numpy(mask_dev), mask)
    (dx,) = run_node("DropoutGrad", [cuda.from_numpy(np.ones_like(x)), mask_dev, np.array(0.3), TRUE], domain=MS,
                     provider="cuda")
    assert cuda.is_native(dx)
    np.testing.assert_allclose(cuda.to_numpy(dx), mask / 0.7, rtol=1e-14)


def test_bad_input_raises_the_cpu_errors(rng):
    x = rng.standard_normal((3, 4))
    assert_same_error("Dropout", [x, np.array(1.0), TRUE])
    assert_same_error("Dropout", [x, np.array([0.1, 0.2]), TRUE])
    assert_same_error("Dropout", [x, np.array(0.1), np.array(1)])
    assert_same_error("DropoutGrad", [x, np.ones((2, 2), bool)], domain=MS)
    assert_same_error("DropoutGrad", [x, np.ones((3, 4), bool), np.array(-0.5), TRUE], domain=MS)
