"""The table-driven error inputs of every registered op (cases in error_inputs.py), run in
child processes so that a crash or a hang fails its case instead of the test run.

The cases run in two children at once (CI has two cores); a child that dies or stops
answering takes the case it was running with it, and a new child carries on after it."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import error_inputs
from minitrain.ops import registered_ops
from minitrain.ops.schema import MS_DOMAIN as MS
from minitrain.registry import registered_kernels

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = error_inputs.cases()
CHILD_TIMEOUT_S = 300


def _run_children(first, last, script=os.path.join(HERE, "error_inputs.py"), timeout=CHILD_TIMEOUT_S):
    """Results of cases first..last-1: {index: (status, detail)}."""
    results = {}
    while first < last:
        command = [sys.executable, script, str(first), str(last)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            output, ending = done.stdout, f"the child died (exit status {done.returncode}): {done.stderr[-500:]}"
        except subprocess.TimeoutExpired as e:
            output = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            ending = f"no answer within {timeout} s"
        begun = None
        for line in output.splitlines():
            words = line.split(" ", 3)
            if words[0] == "begin":
                begun = int(words[1])
            elif words[0] == "end":
                results[int(words[1])] = (words[2], words[3] if len(words) > 3 else "")
                begun = None
        if begun is None:
            begun = max(results, default=first - 1) + 1
            if begun >= last:
                break
        results[begun] = ("fail", ending)
        first = begun + 1
    return results


@pytest.fixture(scope="module")
def results():
    middle = len(CASES) // 2
    with ThreadPoolExecutor(2) as pool:
        halves = list(pool.map(lambda bounds: _run_children(*bounds), [(0, middle), (middle, len(CASES))]))
    return {**halves[0], **halves[1]}


FAKE_CHILD = """
import os, signal, sys, time
for i in range(int(sys.argv[1]), int(sys.argv[2])):
    print(f"begin {i}", flush=True)
    if i == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    if i == 3:
        time.sleep(60)
    print(f"end {i} ok ran", flush=True)
"""


def test_a_crash_or_a_hang_fails_only_its_case(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(FAKE_CHILD)
    results = _run_children(0, 5, str(script), timeout=3)
    assert [results[i][0] for i in range(5)] == ["ok", "fail", "ok", "fail", "ok"]
    assert "died" in results[1][1] and "no answer" in results[3][1]


def test_every_registered_op_has_a_sample():
    """Every op a user can run on the CPU (the copies the scheduler inserts between devices
    have CUDA kernels only; ops that tests register in domains of their own are not minitrain's);
    fused ops may have one too."""
    on_cpu = {(k.domain, k.op_type) for k in registered_kernels() if k.provider == "cpu"}
    ops = {(domain, op) for domain, op in registered_ops() if domain in ("", MS) and (domain, op) in on_cpu}
    assert ops == {key for key in error_inputs.SAMPLES if key[0] != error_inputs.FUSED}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case.id for case in CASES])
def test_error_input(index, results):
    status, detail = results.get(index, ("fail", "no result"))
    assert status == "ok", f"{CASES[index].id} (expect {CASES[index].expect}): {detail}"
