"""Shared fixtures: a seeded random generator, thread counts, the C compiler and instruction
sets for tests that build ext/*.h into small programs, the CUDA convolution search with its
options restored, and the CUDA marker's skip where no GPU is.  The kernels run exactly the
threads a test sets: dynamic adjustment to the machine's load is off unless a test turns it on."""
import os
import shutil
import subprocess

import numpy as np
import pytest

os.environ.setdefault("OMP_DYNAMIC", "false")

EXT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ext")


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


@pytest.fixture
def search():
    """The CUDA convolution search (its module), with the default provider's conv_search
    options restored and the rankings cleared around the test."""
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.conv import search as conv_search
    provider = get_provider("cuda")
    saved = provider.conv_search
    provider.conv_search = type(saved).of(saved)
    conv_search.clear_cache()
    yield conv_search
    provider.conv_search = saved
    conv_search.clear_cache()


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []


@pytest.fixture
def run_c(tmp_path):
    """run_c(source, flags): compile a C program that includes ext/*.h with `flags` and run it;
    its stdout, asserting exit status 0.  Skips without a C compiler, or when a flag asks for
    an instruction set (-mavx512f, -mavx, -mfma) this CPU lacks."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    flags_here = _cpu_flags()

    def run(source, flags):
        for flag in flags:
            isa = {"-mavx512f": "avx512f", "-mavx": "avx", "-mfma": "fma"}.get(flag)
            if isa and isa not in flags_here:
                pytest.skip(f"this CPU lacks {isa}")
        src, exe = tmp_path / "prog.c", tmp_path / "prog"
        src.write_text(source)
        subprocess.run([cc, *flags, "-I", EXT, str(src), "-o", str(exe), "-lm"], check=True, capture_output=True)
        result = subprocess.run([str(exe)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout
        return result.stdout
    return run


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
