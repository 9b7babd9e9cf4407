"""Build minitrain's Cython CPU core: ext/<stem>.pyx becomes minitrain._ext.<stem>.

The hot kernels (HOT_KERNELS) are built once per ISA level instead, from the same C that Cython
generates, into minitrain._ext.<level>.<stem>: on x86-64 `baseline` (-march=x86-64-v2), `avx2`
(-march=x86-64-v3: AVX2, FMA) and `avx512` (-march=x86-64-v4: AVX-512 F/BW/CD/DQ/VL); on any
other machine (aarch64, where NEON is part of the base ISA) one `baseline` level for the
compiler's default target.  minitrain/_ext/dispatch.py picks the level once at import.  The
other kernels build at the baseline level, and cpuid (which must run on any CPU to decide) for
the plain architecture.  No build uses -march=native, so a wheel runs on any CPU of its platform.

MINITRAIN_SANITIZE=address,undefined (or one of them) compiles everything with
-fsanitize=<list> -fno-omit-frame-pointer at -O1, and `build` then defaults to build/sanitize so the
sanitized objects never mix with a normal build's.  An in-place build_ext writes the sanitized
modules over the normal ones: rebuild with --force without the variable to get them back.

OpenMP is used where the compiler supports it (-fopenmp); elsewhere the extensions build
single-threaded and a warning says so.  CUDA sources in cuda/ ship as package data.
"""
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy
from setuptools import Extension, setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))

HOT_KERNELS = ("activation", "avg_pool_flat", "batchnorm", "broadcast", "conv", "conv_depthwise", "conv_direct",
               "gemm_narrow", "loss", "pointwise_activation", "pool", "resize", "sample_normalization", "softmax",
               "sum_to_shape", "transpose", "where")
PLAIN_ARCH_KERNELS = ("cpuid",)
SANITIZERS = ("address", "undefined")


def isa_levels():
    """Level name -> the compiler flags of that level, for the machine this builds on."""
    if platform.machine().lower() in ("x86_64", "amd64") and sys.maxsize > 2 ** 32:
        return {"baseline": ["-march=x86-64-v2"], "avx2": ["-march=x86-64-v3"],
                "avx512": ["-march=x86-64-v4"]}
    return {"baseline": []}


def requested_sanitizers(value):
    """The sanitizers a MINITRAIN_SANITIZE value names, in order; SystemExit on an unknown one."""
    names = [name.strip() for name in (value or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in SANITIZERS]
    if unknown:
        raise SystemExit(f"MINITRAIN_SANITIZE={value!r}: unknown sanitizer(s) {', '.join(unknown)}; "
                         f"use a comma-separated list of {', '.join(SANITIZERS)}")
    return names


def sanitizer_flags(names):
    """Compiler and linker flags of the sanitizers `names` (none for an empty list)."""
    if not names:
        return []
    return [f"-fsanitize={','.join(names)}", "-fno-omit-frame-pointer"]


SANITIZE = requested_sanitizers(os.environ.get("MINITRAIN_SANITIZE"))


def compiler_supports_openmp():
    """Try to compile and link a tiny OpenMP program with the default C compiler."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "omp.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n")
        try:
            result = subprocess.run([cc, "-fopenmp", src, "-o", os.path.join(tmp, "omp")],
                                    capture_output=True)
        except OSError:
            return False
        return result.returncode == 0


class build_py_with_cuda(build_py):
    """Copy cuda/*.cu into the package (minitrain/cuda/) so a non-editable install finds them."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "minitrain", "cuda")
        os.makedirs(target, exist_ok=True)
        for src in glob.glob(os.path.join(HERE, "cuda", "*.cu")) + glob.glob(os.path.join(HERE, "cuda", "*.cuh")):
            shutil.copy(src, target)


class build_sanitized_apart(build):
    """`build` whose default directory is build/sanitize when MINITRAIN_SANITIZE is set."""

    def initialize_options(self):
        super().initialize_options()
        if SANITIZE:
            self.build_base = os.path.join("build", "sanitize")


def level_source(stem, level, generated_c):
    """A one-line C file that includes Cython's output for `stem`, one per level: the levels then
    compile from distinct paths, so their object files do not overwrite each other."""
    path = os.path.join("build", "isa", level, f"{stem}_{level}.c")
    text = f'/* {stem} kernels built for the {level} ISA level (setup.py). */\n#include "{os.path.basename(generated_c)}"\n'
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path) or open(path).read() != text:     # an unchanged file keeps its mtime
        with open(path, "w") as f:
            f.write(text)
    return path


def with_included(headers):
    """`headers` (the ones Cython found a .pyx naming, directly or through its .pxi files) and
    the headers they #include "...", transitively."""
    found, pending = set(), list(headers)
    while pending:
        header = pending.pop()
        if header in found or not os.path.exists(header):
            continue
        found.add(header)
        with open(header) as f:
            pending += [os.path.join(os.path.dirname(header), name)
                        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M)]
    return sorted(found)


def extensions():
    from Cython.Build import cythonize     # a build requirement, not needed to import this file

    # Sanitized builds compile at -O1, as ASan advises (-O3 with the checks took 2.5x as long),
    # and keep Python's -g for line numbers in reports; others drop it (-g0: 7x smaller modules).
    # Functions start on 64-byte boundaries: otherwise an unrelated change elsewhere in a module
    # can shift a hot loop across a fetch boundary and move its speed (docs/measurements.md, "Function alignment").
    optimization = ["-O1"] if SANITIZE else ["-O3", "-g0", "-falign-functions=64"]
    compile_args = optimization + ["-ffast-math", "-fno-finite-math-only"] + sanitizer_flags(SANITIZE)
    link_args = sanitizer_flags(SANITIZE)
    if compiler_supports_openmp():
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
    else:
        warnings.warn("minitrain: the C compiler has no OpenMP; building single-threaded kernels")
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("MT_SANITIZE", f'"{",".join(SANITIZE)}"')]

    def extension(name, sources, arch_flags, depends=()):
        return Extension(name, sources, include_dirs=[numpy.get_include(), "ext"], depends=list(depends),
                         extra_compile_args=compile_args + arch_flags, extra_link_args=link_args,
                         define_macros=macros)

    levels = isa_levels()
    pyx_files = sorted(glob.glob(os.path.join("ext", "*.pyx")))
    generated = cythonize(
        [extension(f"minitrain._ext.{os.path.splitext(os.path.basename(pyx))[0]}", [pyx], [])
         for pyx in pyx_files],
        language_level=3, compiler_directives={
            "boundscheck": False, "wraparound": False, "cdivision": True,
            "initializedcheck": False, "nonecheck": False,
        })
    exts = []
    for ext in generated:
        stem = ext.name.rsplit(".", 1)[1]
        ext.depends = with_included(ext.depends)        # rebuilt when a header it reads changes
        if stem in HOT_KERNELS:
            c_file = ext.sources[0]
            exts += [extension(f"minitrain._ext.{level}.{stem}", [level_source(stem, level, c_file)],
                               flags, depends=[c_file] + ext.depends)
                     for level, flags in levels.items()]
        else:
            ext.extra_compile_args += [] if stem in PLAIN_ARCH_KERNELS else levels["baseline"]
            exts.append(ext)
    return exts


if __name__ == "__main__":
    setup(ext_modules=extensions(),
          cmdclass={"build": build_sanitized_apart, "build_py": build_py_with_cuda})
