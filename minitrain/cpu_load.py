"""How many of this process's cores are left free by the other processes, measured from /proc/stat.

Over a window of at least `window` seconds: the busy time of the cores in this process's
affinity mask, less this process's own CPU time (its threads, spinning ones included), is the
time other processes held them; divided by the window, the cores they held.  Busy time is
user, nice, system, interrupt and steal time (a hypervisor's stolen time is a core we do not
have either).  Where /proc/stat cannot be read, every core counts as free.
"""
import math
import os
import time

PROC_STAT = "/proc/stat"
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)   # user nice system . . irq softirq steal of a "cpuN" line


def busy_seconds(cores, text):
    """The busy seconds since boot of `cores` (CPU ids) in /proc/stat's text."""
    ticks = 0
    for line in text.splitlines():
        name, _, fields = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            values = fields.split()
            ticks += sum(int(values[i]) for i in BUSY_FIELDS if i < len(values))
    return ticks / os.sysconf("SC_CLK_TCK")


def read_proc_stat():
    with open(PROC_STAT) as f:
        return f.read()


class FreeCores:
    """The number of cores (of `cores`, CPU ids) that other processes left free over the last
    window, as a whole number >= 1, measured again when `current()` finds it `window` old."""

    def __init__(self, cores, window, read_stat=read_proc_stat, clock=time.monotonic,
                 own_cpu=time.process_time):
        self.cores = frozenset(cores)
        self.window = window
        self._read_stat, self._clock, self._own_cpu = read_stat, clock, own_cpu
        self._free = len(self.cores)
        self._last = self._sample()

    def _sample(self):
        try:
            busy = busy_seconds(self.cores, self._read_stat())
        except (OSError, ValueError, IndexError):
            busy = None
        return self._clock(), self._own_cpu(), busy

    def current(self):
        last = self._last
        if self._clock() - last[0] >= self.window:
            now = self._sample()
            self._last = now
            if now[2] is not None and last[2] is not None:
                others = max(0.0, (now[2] - last[2]) - (now[1] - last[1])) / (now[0] - last[0])
                self._free = max(1, min(len(self.cores), math.floor(len(self.cores) - others + 0.5)))
        return self._free
