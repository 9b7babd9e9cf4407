"""The step-replay state machine (minitrain/step_replay.py) that the CPU arena and CUDA capture
share: per signature a warm-up, recording runs until ready, then replays; a replay that differs
from its recording records again, up to max_records; a failure while recording turns replay
off for the plan; the signatures are an LRU of max_signatures."""
import logging

import pytest

from minitrain.step_replay import StepReplay


class CountingExecutor:
    """Stands in for an Executor: counts its plain runs."""

    class plan:
        class graph:
            name = "counting"

    def __init__(self):
        self.plain = 0

    def place_inputs(self, fed):
        return fed

    def execute(self, inputs, dims, dims_key):
        self.plain += 1
        return {"y": "plain"}


class Replay(StepReplay):
    """Records in `record_runs` runs; replays match their recording while `matches` holds."""
    what = "test replay"
    max_records = 2

    def __init__(self, executor, record_runs=1, fail=None):
        super().__init__(executor)
        self.record_runs, self.fail = record_runs, fail
        self.matches = True
        self.calls = []

    def record(self, sig, fed, dims, dims_key):
        self.calls.append(("record", dims_key))
        if self.fail is not None:
            raise self.fail
        return {"y": "recorded"}, sig.runs - 1 >= self.record_runs

    def replay(self, sig, fed, dims, dims_key):
        self.calls.append(("replay", dims_key))
        return {"y": "replayed"}, self.matches


def run(replay, key=(), times=1):
    return [replay.run({}, dict(key), key)["y"] for _ in range(times)]


def test_a_signature_warms_up_records_until_ready_then_replays():
    replay = Replay(CountingExecutor(), record_runs=2)
    assert run(replay, times=5) == ["plain", "recorded", "recorded", "replayed", "replayed"]
    sig, = replay.signatures.values()
    assert sig.ready and sig.records == 1 and replay.stats["warmups"] == 1 and replay.stats["replays"] == 2


def test_a_replay_unlike_its_recording_records_again_then_turns_the_signature_off(caplog):
    replay = Replay(CountingExecutor())
    run(replay, times=3)
    replay.matches = False
    with caplog.at_level(logging.INFO, logger=replay.logger.name):
        results = run(replay, times=5)
    assert results == ["replayed", "recorded", "replayed", "plain", "plain"]
    sig, = replay.signatures.values()
    assert sig.off and sig.records == 2 and replay.stats["diverged"] == 2 and not replay.disabled
    assert sum("test replay off for plan 'counting'" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("failures,survives", [((), False), ((RuntimeError,), True)])
def test_a_failure_while_recording_turns_the_plan_off_where_it_is_survivable(failures, survives):
    executor = CountingExecutor()
    replay = Replay(executor, fail=RuntimeError("no capture here"))
    replay.failures = failures
    run(replay)
    if not survives:
        with pytest.raises(RuntimeError, match="no capture here"):
            run(replay)
        assert replay.disabled is None
        return
    assert run(replay) == ["plain"] and executor.plain == 2
    assert replay.disabled == "RuntimeError: no capture here" and not replay.signatures
    assert run(replay, times=3) == ["plain"] * 3 and not replay.signatures


def test_signatures_are_an_lru_of_max_signatures():
    replay = Replay(CountingExecutor())
    replay.max_signatures = 2
    for key in [(("N", 1),), (("N", 2),), (("N", 1),), (("N", 3),)]:
        run(replay, key)
    assert list(replay.signatures) == [(("N", 1),), (("N", 3),)]
