"""Build minitrain's Cython CPU core: every ext/*.pyx becomes minitrain._ext.<stem>.

OpenMP is used where the compiler supports it (-fopenmp); elsewhere the extensions
build single-threaded and a warning says so.  CUDA sources in cuda/ ship as package data.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


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


def extensions():
    compile_args = ["-O3", "-ffast-math", "-fno-finite-math-only", "-march=native"]
    link_args = []
    if os.environ.get("MINITRAIN_PORTABLE"):
        compile_args.remove("-march=native")
    if compiler_supports_openmp():
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
    else:
        warnings.warn("minitrain: the C compiler has no OpenMP; building single-threaded kernels")
    exts = []
    for pyx in sorted(glob.glob(os.path.join("ext", "*.pyx"))):
        stem = os.path.splitext(os.path.basename(pyx))[0]
        exts.append(Extension(
            f"minitrain._ext.{stem}", [pyx],
            include_dirs=[numpy.get_include(), "ext"],
            depends=sorted(glob.glob(os.path.join("ext", "*.h"))),     # rebuilt when a header changes
            extra_compile_args=compile_args, extra_link_args=link_args,
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        ))
    return cythonize(exts, language_level=3, compiler_directives={
        "boundscheck": False, "wraparound": False, "cdivision": True,
        "initializedcheck": False, "nonecheck": False,
    })


setup(ext_modules=extensions(), cmdclass={"build_py": build_py_with_cuda})
