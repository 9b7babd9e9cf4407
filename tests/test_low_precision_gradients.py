"""SGDOptimizer, AdamOptimizer and InPlaceAccumulator reading float16 and bfloat16 gradients of
float32 parameters (the gradients of a mixed-precision plan, minitrain/autocast.py): the update,
the gradient norm and the accumulated buffer are exactly those of the gradients' float32 Casts,
on the CPU and on CUDA (whose kernels are also checked against the CPU's); a 16-bit gradient of
tensors of another type, or a 16-bit parameter or state among float32 ones, is a DTypeError
naming the input."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.bfloat16 import BFLOAT16_TYPES
from minitrain.errors import DTypeError
from minitrain.providers import get_provider

MS = "com.microsoft"
SHAPES = [(3, 4), (5,), (70001,), (0,), (2, 3, 3, 3)]
LOW = [np.dtype(np.float16), *BFLOAT16_TYPES]
OPTIMIZERS = {  # name: (op, attributes, state tensors per parameter)
    "sgd": ("SGDOptimizer", {"weight_decay": 0.01}, 0),
    "momentum": ("SGDOptimizer", {"momentum": 0.9, "max_norm": 0.5}, 1),
    "nesterov": ("SGDOptimizer", {"momentum": 0.8, "nesterov": 1}, 1),
    "adam": ("AdamOptimizer", {"weight_decay": 0.01, "max_norm": 0.5}, 2),
    "adamw": ("AdamOptimizer", {"decoupled_weight_decay": 1, "weight_decay": 0.05}, 2),
    "hf_adamw": ("AdamOptimizer", {"decoupled_weight_decay": 1, "weight_decay": 0.05, "adam_mode": 1,
                                   "max_norm": 0.5}, 2),
}


def _head(op, step):
    lr = np.array(0.05 if op == "SGDOptimizer" else 0.01, np.float32)
    return [lr, np.array(step, np.int64)] if op == "AdamOptimizer" else [lr]


def _problem(rng, states, low):
    """float32 parameters and state; gradients alternately `low` and float32, as a plan's
    LOW-op weights sit beside BatchNorm's float32 scale and bias."""
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    state = [(np.abs(rng.standard_normal(s)) if k else np.zeros(s)).astype(np.float32)
             for k in range(states) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * 0.1).astype(low if k % 2 == 0 else np.float32)
              for k, s in enumerate(SHAPES)] for _ in range(3)]
    return params, state, grads


def _train(op, attrs, params, state, grad_steps, to_device, provider):
    """Three updates from copies of `params` and `state`; returns (norms, tensors) on the host."""
    tensors = [to_device(t.copy()) for t in params + state]
    count, norms = len(params), []
    for step, grads in enumerate(grad_steps, 1):
        inputs = _head(op, step) + tensors[:count] + [to_device(g) for g in grads] + tensors[count:]
        (norm,) = run_node(op, inputs, attrs=attrs, domain=MS, provider=provider)
        norms.append(norm)
    return norms, tensors


@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_cpu_update_equals_that_of_the_float32_cast(name, low, rng):
    op, attrs, states = OPTIMIZERS[name]
    params, state, grads = _problem(rng, states, low)
    norms, tensors = _train(op, attrs, params, state, grads, np.asarray, "cpu")
    widened = [[g.astype(np.float32) for g in step] for step in grads]
    cast_norms, cast_tensors = _train(op, attrs, params, state, widened, np.asarray, "cpu")
    assert all(n.dtype == np.float32 for n in norms) and norms == cast_norms
    for k, (a, b) in enumerate(zip(tensors, cast_tensors)):
        assert a.dtype == np.float32 and np.array_equal(a, b), f"{name} tensor #{k}"


@pytest.mark.parametrize("tensors,message", [
    ([np.ones(3), np.ones(3, np.float16)], "gradient #0 has dtype float16; expected the learning rate's float64"),
    ([np.ones(3, np.float16), np.ones(3, np.float16)], "tensor #0 (a parameter or its state) has dtype float16"),
    ([np.ones(3, np.float32), np.ones(3, np.float16), np.ones(3, np.float16)],
     "tensor #2 (a parameter or its state) has dtype float16"),
    ([np.ones(3, np.float32), np.ones(3, np.float64)], "gradient #0 has dtype float64; expected the learning "
                                                       "rate's float32 or float16"),
])
def test_mixed_types_other_than_low_gradients_are_refused(tensors, message):
    lr = np.array(0.1, np.float64 if tensors[0].dtype == np.float64 else np.float32)
    attrs = {"momentum": 0.9} if len(tensors) == 3 else {}
    with pytest.raises(DTypeError, match="SGDOptimizer") as error:
        run_node("SGDOptimizer", [lr, *tensors], attrs=attrs, domain=MS)
    assert message in str(error.value)


@pytest.mark.cuda
@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_cuda_update_equals_that_of_the_float32_cast_and_the_cpu(name, low, rng):
    """One launch over 16-bit and float32 gradients: bitwise the update of their float32 Casts
    on the device, and the CPU's update within float32 rounding."""
    cuda = get_provider("cuda")
    op, attrs, states = OPTIMIZERS[name]
    params, state, grads = _problem(rng, states, low)
    norms, tensors = _train(op, attrs, params, state, grads, cuda.from_numpy, "cuda")
    widened = [[g.astype(np.float32) for g in step] for step in grads]
    cast_norms, cast_tensors = _train(op, attrs, params, state, widened, cuda.from_numpy, "cuda")
    cpu_norms, cpu_tensors = _train(op, attrs, params, state, grads, np.asarray, "cpu")
    for n, cast_n, cpu_n in zip(norms, cast_norms, cpu_norms):
        assert cuda.to_numpy(n) == cuda.to_numpy(cast_n)
        np.testing.assert_allclose(cuda.to_numpy(n), cpu_n, rtol=1e-5)
    for k, (a, b, c) in enumerate(zip(tensors, cast_tensors, cpu_tensors)):
        assert np.array_equal(cuda.to_numpy(a), cuda.to_numpy(b)), f"{name} tensor #{k}"
        np.testing.assert_allclose(cuda.to_numpy(a), c, rtol=1e-5, atol=1e-5, err_msg=f"{name} tensor #{k}")


@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("scale", [None, 0.375])
def test_cpu_accumulator_adds_the_float32_cast(low, scale, rng):
    buffer = rng.standard_normal((4, 70)).astype(np.float32)
    value = rng.standard_normal((4, 70)).astype(low)
    tail = [] if scale is None else [np.array(scale, np.float32)]
    widened = buffer.copy()
    run_node("InPlaceAccumulator", [widened, value.astype(np.float32), *tail], domain=MS)
    run_node("InPlaceAccumulator", [buffer, value, *tail], domain=MS)
    assert buffer.dtype == np.float32 and np.array_equal(buffer, widened)


@pytest.mark.parametrize("buffer,value,message", [
    (np.ones(3), np.ones(3, np.float16), "input 'value' has dtype float16; expected the buffer's float64"),
    (np.ones(3, np.float32), np.ones(3), "input 'value' has dtype float64; expected the buffer's float32 or float16"),
])
def test_accumulator_refuses_other_mixed_types(buffer, value, message):
    with pytest.raises(DTypeError, match="InPlaceAccumulator") as error:
        run_node("InPlaceAccumulator", [buffer, value], domain=MS)
    assert message in str(error.value)


@pytest.mark.cuda
@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("scale", [None, 0.375])
def test_cuda_accumulator_adds_the_float32_cast(low, scale, rng):
    cuda = get_provider("cuda")
    buffer = rng.standard_normal((4, 70001)).astype(np.float32)
    value = rng.standard_normal((4, 70001)).astype(low)
    tail = [] if scale is None else [cuda.from_numpy(np.array(scale, np.float32))]
    widened, mixed = cuda.from_numpy(buffer), cuda.from_numpy(buffer)
    run_node("InPlaceAccumulator", [widened, cuda.from_numpy(value.astype(np.float32)), *tail], domain=MS,
             provider="cuda")
    run_node("InPlaceAccumulator", [mixed, cuda.from_numpy(value), *tail], domain=MS, provider="cuda")
    assert np.array_equal(cuda.to_numpy(mixed), cuda.to_numpy(widened))
    cpu = buffer.copy()
    run_node("InPlaceAccumulator", [cpu, value, *[np.array(scale, np.float32)][:len(tail)]], domain=MS)
    np.testing.assert_allclose(cuda.to_numpy(mixed), cpu, rtol=1e-6, atol=1e-6)
