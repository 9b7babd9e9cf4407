"""Training beside a busy core: minitrain's jobs quiet and with a busy loop pinned to one core.

Each job runs in a fresh process, once quiet and once beside `python -c "while True: pass"`
pinned (taskset) to the last core this process may use; variants (source trees and environment
settings) are interleaved round by round (A quiet, A loaded, B quiet, B loaded, A ..., ...), so
a before/after comparison sees the same background load.  Reported per job and variant: the
median over rounds of the wall time and of the process's CPU time (user + system, all its
threads; CPU time well above wall time x busy cores means threads spinning), and loaded/quiet.

Jobs: `main` is `python -m minitrain train lenet_digits` (its whole run, import included);
`lenet` is bench/train.py's LeNet-5 step (`--cases lenet5_b64 --rounds 3`, minitrain's ms per
step as it reports it, and the whole process's wall and CPU time).

    python bench/contention.py [--rounds 3] [--jobs main,lenet]
                               [--variant LABEL=TREE[,VAR=VALUE...]] ...

A variant's TREE is a minitrain source tree (its compiled extensions built in place), put first
on PYTHONPATH; VAR=VALUE pairs are set in the job's environment (e.g. OMP_WAIT_POLICY=PASSIVE).
Without --variant, the one variant is this tree as it is.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
BUSY_LOOP = "while True: pass"


def parse_variant(text):
    """LABEL=TREE[,VAR=VALUE...] -> (label, tree, {VAR: VALUE})."""
    label, _, rest = text.partition("=")
    tree, *pairs = rest.split(",")
    if not label or not tree or not all("=" in p for p in pairs):
        raise argparse.ArgumentTypeError(f"--variant expects LABEL=TREE[,VAR=VALUE...], got {text!r}")
    return label, os.path.abspath(tree), dict(p.split("=", 1) for p in pairs)


def job_command(job, tree, scratch):
    if job == "main":
        return [sys.executable, "-m", "minitrain", "train", "lenet_digits", "--no-progress"]
    return [sys.executable, train_script(tree), "--cases", "lenet5_b64", "--rounds", "3",
            "--out", os.path.join(scratch, "train.md")]


def train_script(tree):
    """The tree's training-step benchmark: bench/train.py, or bench_train.py in older trees."""
    for name in ("train.py", "bench_train.py"):
        path = os.path.join(tree, "bench", name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no bench/train.py in {tree}")


def step_ms(job, output):
    """bench/train.py's minitrain ms per step (None for the main job)."""
    if job != "lenet":
        return None
    match = re.search(r"^\| lenet5_b64 \| \d+ \| ([0-9.]+) \|", output, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no LeNet-5 row in bench/train.py's output:\n{output[-2000:]}")
    return float(match.group(1))


def run_job(job, tree, env_settings, scratch):
    """(wall s, CPU s of the process and its threads, step ms or None) of one run of `job`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.update(env_settings)
    start = time.perf_counter()
    proc = subprocess.Popen(job_command(job, tree, scratch), cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{job} exited with {proc.returncode}:\n{output[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, step_ms(job, output)


def with_busy_core(fn):
    """fn() with a busy loop pinned to the last core this process may use, stopped after."""
    core = max(os.sched_getaffinity(0))
    busy = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(0.2)
        return fn()
    finally:
        busy.kill()
        busy.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", default="main,lenet")
    parser.add_argument("--variant", type=parse_variant, action="append", default=[])
    args = parser.parse_args()
    variants = args.variant or [("this tree", TREE, {})]
    jobs = args.jobs.split(",")
    results = {}                     # (job, label, load) -> [(wall, cpu, step), ...]
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            for job in jobs:
                for label, tree, settings in variants:
                    for load in ("quiet", "loaded"):
                        def once():
                            return run_job(job, tree, settings, scratch)
                        got = once() if load == "quiet" else with_busy_core(once)
                        results.setdefault((job, label, load), []).append(got)
                        step = f", step {got[2]:.2f} ms" if got[2] is not None else ""
                        print(f"round {r + 1} {job} {label} {load}: wall {got[0]:.2f} s, CPU {got[1]:.2f} s{step}",
                              flush=True)
    print(f"\nMedians over {args.rounds} rounds (load average at the end: {os.getloadavg()[0]:.2f}):\n")
    print("| job | variant | quiet wall s | quiet CPU s | loaded wall s | loaded CPU s | step ms quiet / loaded "
          "| loaded/quiet |")
    print("|---|---|---|---|---|---|---|---|")
    for job in jobs:
        for label, _, _ in variants:
            q, l = results[(job, label, "quiet")], results[(job, label, "loaded")]
            med = [[statistics.median(run[i] for run in rs) if rs[0][i] is not None else None for i in range(3)]
                   for rs in (q, l)]
            (qw, qc, qs), (lw, lc, ls) = med
            steps = f"{qs:.2f} / {ls:.2f}" if qs is not None else "-"
            slowdown = (ls / qs) if qs is not None else (lw / qw)
            print(f"| {job} | {label} | {qw:.2f} | {qc:.2f} | {lw:.2f} | {lc:.2f} | {steps} | {slowdown:.2f} |")


if __name__ == "__main__":
    main()
