"""minitrain.threads: the kernels' thread count and the OpenMP spin default it sets before
the first extension loads (checked in fresh interpreters, since the runtime reads it once)."""
import os
import subprocess
import sys

import pytest

import minitrain
from minitrain.threads import SPIN_COUNT

def fresh_import(shown, **settings):
    """The words a fresh interpreter prints of `shown` (an expression) after `import minitrain`,
    with GOMP_SPINCOUNT and OMP_WAIT_POLICY unset unless `settings` sets them."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(settings)
    out = subprocess.run([sys.executable, "-c", f"import minitrain, os; print({shown})"], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def fresh_env(**settings):
    """What a fresh `import minitrain` leaves of GOMP_SPINCOUNT and OMP_WAIT_POLICY."""
    return fresh_import("os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY')", **settings)


def test_bounded_spin_by_default():
    assert fresh_env() == [str(SPIN_COUNT), "None"]


@pytest.mark.parametrize("policy", ["PASSIVE", "ACTIVE"])
def test_users_wait_policy_wins(policy):
    assert fresh_env(OMP_WAIT_POLICY=policy) == ["None", policy]


def test_users_spin_count_wins():
    assert fresh_env(GOMP_SPINCOUNT="7") == ["7", "None"]


@pytest.mark.parametrize("value,expected", [("3", 3), ("4,2", 4), ("0", None), ("-2", None), ("two", None),
                                            ("100000000", "bound")])
def test_thread_count_from_omp_num_threads(value, expected):
    """OMP_NUM_THREADS' first entry when it is a count >= 1, at most 4 per core; anything else
    means all cores."""
    got, cores = (int(v) for v in fresh_import("minitrain.get_num_threads(), os.cpu_count()", OMP_NUM_THREADS=value))
    assert got == {None: cores, "bound": 4 * cores}.get(expected, expected)


def test_set_num_threads():
    old = minitrain.get_num_threads()
    try:
        minitrain.set_num_threads(3)
        assert minitrain.get_num_threads() == 3
        with pytest.raises(ValueError, match="set_num_threads: n must be >= 1, got 0"):
            minitrain.set_num_threads(0)
        assert minitrain.get_num_threads() == 3
        with pytest.warns(RuntimeWarning, match="set_num_threads: 1000000000 threads is more than 4 per core"):
            minitrain.set_num_threads(10 ** 9)
        assert minitrain.get_num_threads() == 4 * (os.cpu_count() or 1)
    finally:
        minitrain.set_num_threads(old)
