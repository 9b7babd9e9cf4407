"""minitrain.threads: the kernels' thread count, its dynamic adjustment to the cores other
processes hold, and the OpenMP wait settings it leaves as the user has them (checked in fresh
interpreters, since the runtime reads them once)."""
import os
import subprocess
import sys
import time

import pytest

import minitrain
from minitrain.cpu_load import FreeCores
from minitrain.threads import kernel_threads, usable_cores

OMP_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OMP_DYNAMIC", "OMP_DISPLAY_ENV")


def fresh_run(code, affinity=None, **settings):
    """A fresh interpreter's run of `code`, with the OpenMP variables unset unless `settings`
    sets them (OMP_DYNAMIC false unless given), on the CPU ids `affinity` (default: ours)."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
    env["OMP_DYNAMIC"] = "false"
    env.update(settings)
    pin = (lambda: os.sched_setaffinity(0, affinity)) if affinity else None
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          preexec_fn=pin)


def fresh_import(shown, affinity=None, **settings):
    """The words a fresh interpreter prints of `shown` (an expression) after `import minitrain`."""
    return fresh_run(f"import minitrain, os; print({shown})", affinity, **settings).stdout.split()


def fresh_env(**settings):
    """What a fresh `import minitrain` leaves of GOMP_SPINCOUNT and OMP_WAIT_POLICY."""
    return fresh_import("os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY')", **settings)


def test_openmp_wait_is_left_to_the_runtime():
    assert fresh_env() == ["None", "None"]


@pytest.mark.parametrize("policy", ["PASSIVE", "ACTIVE"])
def test_users_wait_policy_is_kept(policy):
    assert fresh_env(OMP_WAIT_POLICY=policy) == ["None", policy]


def test_users_spin_count_is_kept():
    assert fresh_env(GOMP_SPINCOUNT="7") == ["7", "None"]


@pytest.mark.skipif(len(usable_cores()) < 2, reason="needs two cores")
def test_default_count_is_the_cores_this_process_may_use():
    """Under taskset (or a container's CPU set) the kernels use the cores the process may run
    on, not every core of the machine."""
    one = usable_cores()[:1]
    assert fresh_import("minitrain.get_num_threads()", affinity=one) == ["1"]
    assert fresh_import("minitrain.get_num_threads()") == [str(len(usable_cores()))]


def test_dynamic_setting():
    assert fresh_import("minitrain.get_dynamic()", OMP_DYNAMIC="false") == ["False"]
    assert fresh_import("minitrain.get_dynamic()", OMP_DYNAMIC="") == ["True"]
    with pytest.raises(TypeError, match="set_dynamic: enabled must be True or False, got 'yes'"):
        minitrain.set_dynamic("yes")


class FakeMachine:
    """/proc/stat of two cores, a clock and this process's CPU time, advanced by hand."""

    def __init__(self):
        self.now, self.own, self.ticks = 0.0, 0.0, [0, 0]

    def run(self, seconds, own_cores, other_cores):
        self.now += seconds
        self.own += seconds * own_cores
        busy = own_cores + other_cores
        for cpu in range(2):
            self.ticks[cpu] += round(100 * seconds * min(1.0, max(0.0, busy - cpu)))

    def stat(self):
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        lines += [f"cpu{cpu} {t // 2} 0 {t - t // 2} 999 5 0 0 0 0 0" for cpu, t in enumerate(self.ticks)]
        return "\n".join(lines + ["intr 1 2 3", "ctxt 7"])


@pytest.mark.parametrize("own,others,free", [(0.0, 0.0, 2), (2.0, 0.0, 2), (1.0, 1.0, 1), (0.0, 1.0, 1),
                                             (1.0, 0.3, 2), (0.2, 2.0, 1)])
def test_free_cores(own, others, free):
    """The cores other processes leave free: busy time less this process's own, in cores."""
    machine = FakeMachine()
    cores = FreeCores([0, 1], window=0.25, read_stat=machine.stat, clock=lambda: machine.now,
                      own_cpu=lambda: machine.own)
    machine.run(0.1, own, others)
    assert cores.current() == 2            # not a window yet: the last measure stands
    machine.run(1.0, own, others)
    assert cores.current() == free


def test_free_cores_without_proc_stat():
    def unreadable():
        raise OSError("no /proc here")
    assert FreeCores([0, 1, 2], window=0.0, read_stat=unreadable).current() == 3


@pytest.mark.skipif(len(usable_cores()) < 2 or not os.path.exists("/proc/stat"),
                    reason="needs two cores and /proc/stat")
def test_fewer_threads_beside_a_busy_core():
    """A process spinning on one of our cores takes a thread off the kernels' count."""
    old, dynamic = minitrain.get_num_threads(), minitrain.get_dynamic()
    cores = len(usable_cores())
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: os.sched_setaffinity(0, usable_cores()[-1:]))
    try:
        minitrain.set_dynamic(True)
        minitrain.set_num_threads(cores)
        time.sleep(0.5)
        kernel_threads()                   # starts a window with the busy loop running throughout
        time.sleep(0.5)
        assert kernel_threads() < cores == minitrain.get_num_threads()
        minitrain.set_dynamic(False)
        assert kernel_threads() == cores
    finally:
        busy.kill()
        busy.wait()
        minitrain.set_num_threads(old)
        minitrain.set_dynamic(dynamic)


@pytest.mark.parametrize("value,expected", [("3", 3), ("4,2", 4), ("0", None), ("-2", None), ("two", None),
                                            ("100000000", "bound")])
def test_thread_count_from_omp_num_threads(value, expected):
    """OMP_NUM_THREADS' first entry when it is a count >= 1, at most 4 per core; anything else
    means the usable cores."""
    got, cores, usable = (int(v) for v in fresh_import("minitrain.get_num_threads(), os.cpu_count(), "
                                                       "len(os.sched_getaffinity(0))", OMP_NUM_THREADS=value))
    assert got == {None: usable, "bound": 4 * cores}.get(expected, expected)


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
