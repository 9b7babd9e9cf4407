"""Runtime ISA dispatch (minitrain/_ext/dispatch.py): CPUID/XCR0 decoding, the choice of level,
MINITRAIN_CPU_LEVEL, and the kernel tests' core checks run at every level this CPU has."""
import os
import subprocess
import sys

import pytest

import minitrain
from minitrain import _ext
from minitrain._ext import dispatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The core checks of each kernel module (conv, conv_direct, conv_depthwise, pool, avg_pool_flat, activation,
# softmax; resize, sample_normalization, sum_to_shape, where and pointwise_activation's erf and clip): values against references and gradients against finite differences, forward and
# backward, float32 and float64, vector bodies and tails.
CORE_CHECKS = [
    "tests/test_conv.py::test_conv_matrix[1-g1-2-1-p1]",
    "tests/test_conv.py::test_conv_matrix[2-g1-1-1-p1]",
    "tests/test_conv.py::test_conv_matrix[2-g1-2-1-asym]",
    "tests/test_conv.py::test_conv_matrix[2-g2-2-2-p1]",
    "tests/test_conv.py::test_conv_matrix[2-depthwise-1-2-SAME_UPPER]",
    "tests/test_conv.py::test_conv_matrix[3-g1-1-1-p1]",
    "tests/test_conv.py::test_conv_transpose_matrix[2-g1-2-1-p1]",
    "tests/test_conv.py::test_conv_transpose_matrix[2-g1-2-1-out_pad]",
    "tests/test_conv.py::test_conv_transpose_matrix[2-g2-1-2-asym]",
    "tests/test_conv.py::test_gemm_and_direct_kernels_agree",
    "tests/test_conv.py::test_both_grid_layouts_agree_with_the_reference",
    "tests/test_conv.py::test_special_paths_against_reference",
    "tests/test_conv.py::test_conv_transpose_edge_geometry",
    "tests/test_conv.py::test_depthwise_kernels_against_reference",
    "tests/test_conv.py::test_depthwise_conv_transpose_matches_the_gemm_route",
    "tests/test_pool.py::test_max_pool_k2_matches_reference",
    "tests/test_pool.py::test_average_pool_rows_match_general_loop_and_adjoint",
    "tests/test_pool.py::test_max_pool_gradcheck",
    "tests/test_pool.py::test_average_pool_gradcheck",
    "tests/test_op_table.py::test_forward[GlobalAveragePool-v1--cpu-float64]",
    "tests/test_op_table.py::test_forward[GlobalMaxPool-v1--cpu-float64]",
    "tests/test_op_table.py::test_gradient[GlobalAveragePool-v1--cpu-float64]",
    "tests/test_op_table.py::test_gradient[GlobalMaxPool-v1--cpu-float64]",
    "tests/test_op_table.py::test_forward[MaxPool-v12--cpu-float32]",
    "tests/test_op_table.py::test_forward[AveragePool-v19--cpu-float32]",
    "tests/test_op_table.py::test_forward[MaxPoolGrad-v9--cpu-float32]",
    "tests/test_op_table.py::test_forward[AveragePoolGrad-v9--cpu-float32]",
    "tests/test_avg_pool_flat.py::test_flat_pool_and_grad_match_window_loop",
    "tests/test_avg_pool_flat.py::test_flat_pool_gradcheck",
    "tests/test_op_table.py::test_gradient[Relu-v6--cpu-float64]",
    "tests/test_op_table.py::test_gradient[Sigmoid-v6--cpu-float64]",
    "tests/test_op_table.py::test_gradient[Tanh-v6--cpu-float64]",
    "tests/test_op_table.py::test_gradient[LeakyRelu-v6--cpu-float64]",
    "tests/test_op_table.py::test_gradient[ms.QuickGelu-v1--cpu-float64]",
    "tests/test_activation.py::test_gradient_kernels_match_formulas",
    "tests/test_activation.py::test_forward_matches_numpy",
    "tests/test_activation.py::test_streamed_gradient_matches_the_plain_one",
    "tests/test_softmax.py::test_forward_and_gradient_values",
    "tests/test_op_table.py::test_gradient[Softmax-v1-12-cpu-float64]",
    "tests/test_op_table.py::test_gradient[Softmax-v13--cpu-float64]",
    "tests/test_op_table.py::test_gradient[LogSoftmax-v1-12-cpu-float64]",
    "tests/test_op_table.py::test_gradient[LogSoftmax-v13--cpu-float64]",
    "tests/test_softmax.py::test_float32_exp_is_accurate_in_loop_bodies_and_tails",
    "tests/test_softmax.py::test_streamed_rows_match_the_plain_ones",
    "tests/test_cpu_family_kernels.py",
]


def fake_cpu(features, xcr0):
    """A CPUID reader reporting `features` (names of dispatch._CPUID_BITS) and an XCR0 reader
    returning `xcr0`."""
    def read_cpuid(leaf, subleaf):
        registers = [0, 0, 0, 0]
        for name, (f_leaf, f_subleaf, register, bit) in dispatch._CPUID_BITS.items():
            if name in features and (f_leaf, f_subleaf) == (leaf, subleaf):
                registers[register] |= 1 << bit
        return tuple(registers)
    return read_cpuid, lambda: xcr0


V2 = {"cx16", "lahf_lm", "popcnt", "sse3", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "lzcnt", "movbe", "osxsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("cpu, xcr0, levels", [
    (V4, 0xE7, ("baseline", "avx2", "avx512")),
    (V4, 0x07, ("baseline", "avx2")),                # the OS saves YMM but not the ZMM/opmask state
    (V4, 0x03, ("baseline",)),                       # ... nor the YMM state
    (V4 - {"osxsave"}, 0xE7, ("baseline",)),         # no OSXSAVE: XCR0 is not read at all
    (V4 - {"avx512vl"}, 0xE7, ("baseline", "avx2")),
    (V3 - {"movbe"}, 0x07, ("baseline",)),
    (V3, 0x07, ("baseline", "avx2")),
])
def test_levels_follow_cpuid_and_the_os_register_state(cpu, xcr0, levels):
    read_cpuid, read_xcr0 = fake_cpu(cpu, xcr0)
    if "osxsave" not in cpu:
        def read_xcr0():
            raise AssertionError("XGETBV faults without OSXSAVE")
    features = dispatch.x86_features(read_cpuid, read_xcr0)
    assert dispatch.cpu_levels(features, is_x86=True) == levels


def test_a_cpu_below_the_baseline_is_refused_by_name():
    features = dispatch.x86_features(*fake_cpu(V2 - {"popcnt"}, 0))
    with pytest.raises(ImportError, match="x86-64-v2.*popcnt"):
        dispatch.cpu_levels(features, is_x86=True)


def test_other_architectures_run_their_baseline():
    assert dispatch.cpu_levels(frozenset(), is_x86=False) == ("baseline",)


def test_choice_of_level():
    runnable = ("baseline", "avx2")
    assert dispatch.choose_level(runnable, None) == "avx2"
    assert dispatch.choose_level(runnable, "") == "avx2"
    assert dispatch.choose_level(runnable, "baseline") == "baseline"
    with pytest.warns(RuntimeWarning, match="MINITRAIN_CPU_LEVEL=avx512.*baseline, avx2; running avx2"):
        assert dispatch.choose_level(runnable, "avx512") == "avx2"
    with pytest.raises(ValueError, match="MINITRAIN_CPU_LEVEL='sse9' is not an ISA level"):
        dispatch.choose_level(runnable, "sse9")


def test_this_process_runs_the_chosen_level_under_the_plain_names():
    info = minitrain.cpu_info()
    assert info.level == dispatch.LEVEL and info.level in info.runnable
    if not os.environ.get(dispatch.LEVEL_VARIABLE):
        assert info.level == info.runnable[-1]
    assert f"minitrain CPU kernels: {info.level}" in str(info)
    assert dispatch.HOT_KERNELS >= {"activation", "avg_pool_flat", "conv", "conv_direct", "pool", "softmax"}
    for name in dispatch.HOT_KERNELS:
        module = getattr(_ext, name)
        assert module.__name__ == f"minitrain._ext.{info.level}.{name}"
        assert sys.modules[f"minitrain._ext.{name}"] is module
    if dispatch.cpuid.IS_X86:
        assert _ext.conv_direct.simd_bytes() == {"baseline": 16, "avx2": 32, "avx512": 64}[info.level]


def run_level(level, *args):
    """Run python with MINITRAIN_CPU_LEVEL=level (capturing its output), in the directory that
    holds the minitrain under test, so that the child imports the same build (a checkout's or an
    installed wheel's)."""
    env = dict(os.environ, MINITRAIN_CPU_LEVEL=level)
    home = os.path.dirname(os.path.dirname(os.path.abspath(minitrain.__file__)))
    return subprocess.run([sys.executable, *args], cwd=home, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("level", dispatch.LEVELS)
def test_core_kernel_checks_at_each_level(level):
    if level not in minitrain.cpu_info().runnable:
        pytest.skip(f"this CPU or build cannot run {level}")
    shown = run_level(level, "-c", "import minitrain; print(minitrain.__file__, minitrain.cpu_info().level)")
    assert shown.returncode == 0 and shown.stdout.split() == [minitrain.__file__, level], shown.stderr
    checks = [os.path.join(ROOT, check) for check in CORE_CHECKS]
    result = run_level(level, "-m", "pytest", "-q", "-p", "no:cacheprovider", *checks)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_level_above_the_cpu_warns_and_runs_the_best():
    missing = [level for level in dispatch.LEVELS if level not in minitrain.cpu_info().runnable]
    if not missing:
        pytest.skip("this CPU runs every level")
    result = run_level(missing[-1], "-c", "import minitrain; print(minitrain.cpu_info().level)")
    assert result.returncode == 0 and result.stdout.split() == [minitrain.cpu_info().runnable[-1]]
    assert "RuntimeWarning" in result.stderr


def test_unknown_level_name_fails_the_import():
    result = run_level("avx1024", "-c", "import minitrain")
    assert result.returncode != 0
    assert "MINITRAIN_CPU_LEVEL='avx1024' is not an ISA level" in result.stderr

