"""Every cuda/*.cu compiles with nvcc, here and in CI (no GPU needed), and instantiates each
of its kernels for the three element types (<name>_f16, _f32, _f64), the names the CUDA
provider loads; copies that only move bytes are instantiated per element width instead
(<name>_w1, _w2, _w4, _w8).  Skipped where nvcc is not on the PATH."""
import glob
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

CUDA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda")
SOURCES = sorted(glob.glob(os.path.join(CUDA, "*.cu")))
INSTANTIATIONS = ({"f16", "f32", "f64"}, {"w1", "w2", "w4", "w8"})
UNTYPED = {"spin"}      # kernels that touch no tensor (timing.cu)


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """The PTX of every source (compiled in parallel once), by file name."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH")
    folder = tmp_path_factory.mktemp("ptx")

    def compile_one(source):
        out = folder / (os.path.basename(source) + ".ptx")
        result = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", "-O3", "-I", CUDA, "-Werror",
                                 "all-warnings", "-o", str(out), source], capture_output=True, text=True)
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
    families = {}
    for entry in entries - UNTYPED:
        stem, _, suffix = entry.rpartition("_")
        assert stem and any(suffix in names for names in INSTANTIATIONS), \
            f"{source}: kernel {entry!r} is not named <name>_f16|f32|f64 (or _w1|w2|w4|w8)"
        families.setdefault(stem, set()).add(suffix)
    incomplete = {stem: sorted(found) for stem, found in families.items() if found not in INSTANTIATIONS}
    assert not incomplete, f"{source}: kernels not instantiated for every element type: {incomplete}"
