"""Every cuda/*.cu compiles with nvcc, here and in CI (no GPU needed), with the -D flags the
provider passes (launch.py's DEFINES), and instantiates each of its kernels for the four
element types (<name>_f16, _bf16, _f32, _f64), the names the CUDA provider loads (the casts for a
bool source too, <name>_b8); copies that only move bytes are instantiated per element width
instead (<name>_w1, _w2, _w4, _w8), and the TF32 tensor-core kernels for float32 alone.  Skipped
where nvcc is not on the PATH.  The constants Python shares with the sources are checked
against them here too, with or without nvcc."""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from minitrain.ops.fused import ACTIVATIONS, CONV_ACTIVATIONS, GRADIENT_ACTIVATIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = os.path.join(ROOT, "cuda")
SOURCES = sorted(glob.glob(os.path.join(CUDA, "*.cu")))
HEADERS = sorted(glob.glob(os.path.join(CUDA, "*.cuh")))


def _launch_module():
    """providers/cuda/launch.py, read by path: importing the package needs pycuda and a GPU."""
    spec = importlib.util.spec_from_file_location(
        "cuda_launch", os.path.join(ROOT, "minitrain", "providers", "cuda", "launch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DEFINES = _launch_module().DEFINES
INSTANTIATIONS = ({"f16", "bf16", "f32", "f64"}, {"f16", "bf16", "f32", "f64", "b8"}, {"w1", "w2", "w4", "w8"})
UNTYPED = {"spin"}      # kernels that touch no tensor (timing.cu)
ONE_TYPE = {"conv_gemm1d_tf32.cu": {"f32"}}    # sources of one element type (TF32 tensor cores take float32)


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """The PTX of every source (compiled in parallel once), by file name."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH")
    folder = tmp_path_factory.mktemp("ptx")

    def compile_one(source):
        out = folder / (os.path.basename(source) + ".ptx")
        defines = [f"-D{name}={value}" for name, value in DEFINES.items()]
        result = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", "-O3", "-I", CUDA, "-Werror",
                                 "all-warnings", *defines, "-o", str(out), source], capture_output=True, text=True)
        return os.path.basename(source), result, out

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return {name: (result, out) for name, result, out in pool.map(compile_one, SOURCES)}


def test_there_are_cuda_sources():
    assert SOURCES, f"no .cu files in {CUDA}"


@pytest.mark.parametrize("source", [os.path.basename(s) for s in SOURCES])
def test_source_compiles_for_every_element_type(ptx, source):
    result, out = ptx[source]
    assert result.returncode == 0, f"nvcc failed on {source}:\n{result.stderr}"
    entries = set(re.findall(r"\.entry\s+(\w+)", out.read_text()))
    assert entries, f"{source} defines no kernel"
    instantiations = (ONE_TYPE[source],) if source in ONE_TYPE else INSTANTIATIONS
    families = {}
    for entry in entries - UNTYPED:
        stem, _, suffix = entry.rpartition("_")
        assert stem and any(suffix in names for names in instantiations), \
            f"{source}: kernel {entry!r} is not named <name>_f16|bf16|f32|f64 (or _b8, or _w1|w2|w4|w8)"
        families.setdefault(stem, set()).add(suffix)
    incomplete = {stem: sorted(found) for stem, found in families.items() if found not in instantiations}
    assert not incomplete, f"{source}: kernels not instantiated for every element type: {incomplete}"


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(DEFINES))
def test_python_constants_reach_the_sources_only_as_flags(name):
    """Each constant of DEFINES is used by a source, which requires it from the command line
    (#error without it) and never gives it a value of its own."""
    texts = {os.path.basename(p): _read(p) for p in SOURCES + HEADERS}
    users = [f for f, text in texts.items() if re.search(rf"\b{name}\b", text)]
    assert users, f"{name} is passed to nvcc but no cuda/ source uses it"
    for file in users:
        assert not re.search(rf"#define\s+{name}\b", texts[file]), f"{file} defines {name} itself"
    assert any(re.search(rf"#ifndef\s+{name}\s*\n#error", texts[f]) for f in users), \
        f"no source refuses to compile without -D{name}"


def test_fused_activation_codes_follow_ops_fused():
    """The activation switches (activation.cuh's activate, fused.cu's activation_grad) number
    the activations in ops/fused.py's order, which is how the CUDA fused kernels pass them:
    `activate` serves FusedConv's activations, `activation_grad` the fused gradient ops', each
    switch's default being its last code."""
    text = _read(os.path.join(CUDA, "activation.cuh")) + _read(os.path.join(CUDA, "fused.cu"))
    codes = {name: code for code, name in enumerate(ACTIVATIONS)}
    forward_functors = {"Clip": "ClipBounds"}
    for function, served in (("activate", CONV_ACTIVATIONS), ("activation_grad", GRADIENT_ACTIVATIONS)):
        grad = function == "activation_grad"
        body = re.search(rf"{function}\(int code[^{{]*{{(.*?)\n}}", text, re.S).group(1)
        cases = [(int(code), op) for code, op in re.findall(r"case (\d+): return (\w+)<", body)]
        default = re.search(r"default: return (\w+)<", body).group(1)
        expected = sorted((codes[n], ACTIVATIONS[n] if grad else forward_functors.get(n, n)) for n in served)
        assert cases == expected[:-1], f"fused.cu's {function} cases {cases} differ from ops/fused.py's {expected}"
        assert default == expected[-1][1]


SIXTEEN_BIT_SOURCE = """
#include "common.cuh"
extern "C" __global__ void k(__nv_bfloat16* b, __half* h) { %s }
"""


@pytest.mark.parametrize("body,compiles", [
    ("b[0] = from_acc<__nv_bfloat16>(to_acc(b[1]) + to_acc(b[2]));"
     "h[0] = from_acc<__half>(to_acc(h[1]) * 2.0f);", True),
    ("b[0] = b[1] + b[2];", False),
    ("h[0] = h[1] * h[2];", False),
    ("float f = b[1]; b[0] = f;", False),
    ("h[0] = 1.0f;", False),
])
def test_sixteen_bit_types_compute_only_through_the_accumulation_type(tmp_path, body, compiles):
    """common.cuh switches off half's and bfloat16's operators and implicit conversions: a
    kernel computes in acc_t, never rounding each step to 16 bits."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH")
    source = tmp_path / "probe.cu"
    source.write_text(SIXTEEN_BIT_SOURCE % body)
    result = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", "-I", CUDA, "-o", str(tmp_path / "probe.ptx"),
                             str(source)], capture_output=True, text=True)
    assert (result.returncode == 0) == compiles, result.stderr


def test_no_sixteen_bit_header_comes_before_common_header():
    """The switches of common.cuh apply only where it includes cuda_fp16.h and cuda_bf16.h
    first: a file that includes either itself does so after common.cuh."""
    for path in SOURCES + HEADERS:
        if os.path.basename(path) == "common.cuh":
            continue
        includes = re.findall(r'#include\s*[<"]([\w./]+)[>"]', _read(path))
        first = next((i for i, name in enumerate(includes) if name in ("cuda_fp16.h", "cuda_bf16.h")), None)
        if first is not None:
            assert "common.cuh" in includes[:first], \
                f"{os.path.basename(path)} includes {includes[first]} before common.cuh"
