"""The CUDA provider's kernel registry and placement without a GPU: `run_stubbed(code)` runs
`code` in a subprocess where pycuda is replaced by stand-ins, so the CUDA modules import (and
register their kernels) and plans can be scheduled on ["cuda", "cpu"]; no kernel runs there.
The code prints one line of JSON, which is returned."""
import json
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
PYCUDA_MODULES = ("pycuda", "pycuda.driver", "pycuda.gpuarray", "pycuda.compiler", "pycuda.tools",
                  "pycuda.autoinit", "pycuda.elementwise", "pycuda.reduction", "pycuda.characterize")
STUBS = ("import sys\nfrom unittest import mock\n"
         f"sys.modules.update({{name: mock.MagicMock(name=name) for name in {PYCUDA_MODULES!r}}})\n")


def run_stubbed(code, timeout=600):
    """The JSON value that `code`, run with pycuda stubbed, prints last."""
    path = os.pathsep.join([os.path.dirname(TESTS), TESTS, os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", STUBS + code], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONPATH": path}, cwd=TESTS)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
