"""Runtime ISA dispatch: which build of the hot kernels this process runs, chosen once at import.

setup.py builds the hot kernels once per ISA level into minitrain._ext.<level>: baseline
(x86-64-v2), avx2 (x86-64-v3) and avx512 (x86-64-v4) on x86-64, baseline alone elsewhere.  A
level can run when it was built, the CPU has its instructions (CPUID) and the OS saves the
registers they use (XCR0, read with XGETBV: the YMM state for avx2, the opmask and ZMM state too
for avx512; a CPU with AVX-512 under an OS or hypervisor that does not save ZMM registers runs
avx2).  The highest such level runs.  MINITRAIN_CPU_LEVEL=baseline|avx2|avx512 asks for a lower
one; asking for a level this machine cannot run warns and runs the highest it can (so one job
script works on every node of a mixed cluster), and a name that is no level is an error.
"""
import importlib
import os
import pkgutil
import platform
import warnings
from dataclasses import dataclass
from typing import Optional

from . import cpuid

LEVELS = ("baseline", "avx2", "avx512")
LEVEL_VARIABLE = "MINITRAIN_CPU_LEVEL"

# feature -> (CPUID leaf, subleaf, register: 0 eax, 1 ebx, 2 ecx, 3 edx; bit)
_CPUID_BITS = {
    "sse3": (1, 0, 2, 0), "ssse3": (1, 0, 2, 9), "fma": (1, 0, 2, 12), "cx16": (1, 0, 2, 13),
    "sse4_1": (1, 0, 2, 19), "sse4_2": (1, 0, 2, 20), "movbe": (1, 0, 2, 22), "popcnt": (1, 0, 2, 23),
    "osxsave": (1, 0, 2, 27), "avx": (1, 0, 2, 28), "f16c": (1, 0, 2, 29),
    "bmi1": (7, 0, 1, 3), "avx2": (7, 0, 1, 5), "bmi2": (7, 0, 1, 8), "avx512f": (7, 0, 1, 16),
    "avx512dq": (7, 0, 1, 17), "avx512cd": (7, 0, 1, 28), "avx512bw": (7, 0, 1, 30),
    "avx512vl": (7, 0, 1, 31),
    "lahf_lm": (0x80000001, 0, 2, 0), "lzcnt": (0x80000001, 0, 2, 5),
}
_XCR0_AVX = 0x06        # SSE and upper-YMM state
_XCR0_AVX512 = 0xE6     # those, plus opmask, upper ZMM0-15 and ZMM16-31 state

# What each level's -march needs (x86-64-v2, -v3, -v4), with the OS state as pseudo-features.
_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse3", "sse4_1", "sse4_2", "ssse3"})
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "lzcnt", "movbe", "os_avx"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "os_avx512"}
X86_LEVEL_NEEDS = {"baseline": _V2, "avx2": _V3, "avx512": _V4}


def x86_features(read_cpuid=cpuid.cpuid, read_xcr0=cpuid.xcr0):
    """Names of the x86 features the CPU reports (keys of _CPUID_BITS), plus os_avx / os_avx512
    when XCR0 says the OS saves the AVX / AVX-512 register state."""
    registers = {}
    found = set()
    for name, (leaf, subleaf, register, bit) in _CPUID_BITS.items():
        if (leaf, subleaf) not in registers:
            registers[leaf, subleaf] = read_cpuid(leaf, subleaf)
        if registers[leaf, subleaf][register] >> bit & 1:
            found.add(name)
    state = read_xcr0() if "osxsave" in found else 0
    if state & _XCR0_AVX == _XCR0_AVX:
        found.add("os_avx")
    if state & _XCR0_AVX512 == _XCR0_AVX512:
        found.add("os_avx512")
    return frozenset(found)


def cpu_levels(features, is_x86):
    """The levels this CPU can run, lowest first (baseline alone off x86, where it is the
    architecture's base ISA).  ImportError when an x86 CPU lacks even the baseline."""
    if not is_x86:
        return ("baseline",)
    missing = X86_LEVEL_NEEDS["baseline"] - features
    if missing:
        raise ImportError(f"minitrain's kernels need an x86-64-v2 CPU; this one lacks {', '.join(sorted(missing))}")
    return tuple(level for level in LEVELS if X86_LEVEL_NEEDS[level] <= features)


def kernel_names(level):
    """Names of the kernel modules built for `level` (empty when it was not built)."""
    package = importlib.import_module(f"{__package__}.{level}")
    return frozenset(module.name for module in pkgutil.iter_modules(package.__path__))


def built_levels():
    """The levels with every hot kernel built, lowest first."""
    hot = kernel_names("baseline")
    if not hot:
        raise ImportError("minitrain's kernels are not built: pip install . (or python setup.py build_ext --inplace)")
    return tuple(level for level in LEVELS if kernel_names(level) >= hot)


def choose_level(runnable, requested):
    """The level to run: `requested` (MINITRAIN_CPU_LEVEL's value, None or "" for none) when it
    is in `runnable`, else the highest of `runnable` (with a warning when one was requested)."""
    best = runnable[-1]
    if not requested:
        return best
    if requested not in LEVELS:
        raise ValueError(f"{LEVEL_VARIABLE}={requested!r} is not an ISA level: use one of {', '.join(LEVELS)}")
    if requested not in runnable:
        warnings.warn(f"{LEVEL_VARIABLE}={requested}: this machine can run only {', '.join(runnable)}; "
                      f"running {best}", RuntimeWarning, stacklevel=2)
        return best
    return requested


@dataclass(frozen=True)
class CpuInfo:
    """The ISA level whose kernels run and what the machine offers (print it for a summary)."""
    level: str                  # the level whose kernels run
    runnable: tuple             # levels this CPU and this build can run, lowest first
    built: tuple                # levels this build has
    requested: Optional[str]    # MINITRAIN_CPU_LEVEL, when set
    machine: str                # platform.machine()
    features: frozenset         # x86 features found (CPUID, os_* from XCR0); empty off x86
    sanitizers: tuple           # MINITRAIN_SANITIZE of the build, () for a normal one

    def __str__(self):
        lines = [f"minitrain CPU kernels: {self.level} (runnable here: {', '.join(self.runnable)}; "
                 f"built: {', '.join(self.built)})",
                 f"machine: {self.machine}; {LEVEL_VARIABLE}={self.requested or '(unset)'}"]
        if self.features:
            lines.append(f"x86 features: {' '.join(sorted(self.features))}")
        if self.sanitizers:
            lines.append(f"built with sanitizers: {', '.join(self.sanitizers)}")
        return "\n".join(lines)


def _detect():
    features = x86_features() if cpuid.IS_X86 else frozenset()
    built = built_levels()
    runnable = tuple(level for level in cpu_levels(features, cpuid.IS_X86) if level in built)
    requested = os.environ.get(LEVEL_VARIABLE) or None
    return CpuInfo(level=choose_level(runnable, requested), runnable=runnable, built=built,
                   requested=requested, machine=platform.machine(), features=features,
                   sanitizers=tuple(name for name in cpuid.SANITIZE.split(",") if name))


INFO = _detect()
LEVEL = INFO.level
HOT_KERNELS = kernel_names("baseline")


def cpu_info():
    """Which ISA level's kernels run in this process, and what the CPU and build offer."""
    return INFO
