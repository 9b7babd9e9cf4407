"""Shared fixtures: a seeded random generator, and the CUDA marker's skip where no GPU is."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Runs the test with minitrain on one thread, then on two."""
    from minitrain import get_num_threads, set_num_threads
    old = get_num_threads()
    set_num_threads(request.param)
    yield request.param
    set_num_threads(old)


def pytest_collection_modifyitems(config, items):
    try:
        import pycuda.driver as cuda
        cuda.init()
        has_gpu = cuda.Device.count() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and pycuda")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
