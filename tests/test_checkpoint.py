"""Checkpoints: round trip, bitwise resume, atomic writes under a simulated crash, bad files."""
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import minitrain
from minitrain import checkpoint, nn
from minitrain.errors import CheckpointError
from minitrain.optim import Adam, SGD
from minitrain.training import TrainingSession


def make_session(seed=0, optimizer=None):
    minitrain.random.seed(seed)
    model = nn.Sequential(nn.Conv1d(1, 4, 3, padding=1), nn.BatchNorm1d(4), nn.Relu(), nn.MaxPool1d(2),
                          nn.Flatten(), nn.Dropout(0.3), nn.Linear(16, 3))
    return TrainingSession(model, nn.CrossEntropyLoss(), optimizer or Adam(0.01, weight_decay=0.01),
                           input_shape=(1, 8))


def batches(count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((10, 1, 8)).astype(np.float32), rng.integers(0, 3, 10)) for _ in range(count)]


def snapshot(session):
    state = {f"model/{k}": v for k, v in session.model.state_dict().items()}
    state.update({f"optim/{k}": v for k, v in session.optimizer.state_dict()["arrays"].items()})
    return state


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_round_trip_restores_everything(tmp_path):
    s = make_session()
    for x, y in batches(3):
        s.train_step(x, y)
    path = tmp_path / "ck.mtc"
    s.save(path, extra={"epoch": 2, "note": "hi"})
    saved, rng_state = snapshot(s), minitrain.random.get_state()
    for x, y in batches(2, seed=1):
        s.train_step(x, y)
    minitrain.random.seed(123)
    assert s.load(path) == {"epoch": 2, "note": "hi"}
    assert_same(snapshot(s), saved)
    assert s.step_count == 3 and minitrain.random.get_state() == rng_state
    with zipfile.ZipFile(path) as archive:
        meta = json.loads(archive.read("checkpoint.json"))
    assert meta["format"] == "minitrain-checkpoint" and meta["version"] == checkpoint.VERSION and meta["step"] == 3


def test_resume_continues_the_loss_curve_bitwise(tmp_path):
    data = batches(8)
    reference = make_session()
    losses = []
    for i, (x, y) in enumerate(data):
        if i == 4:
            reference.save(tmp_path / "mid.mtc")
        losses.append(reference.train_step(x, y))
    resumed = make_session(seed=99)          # different initial weights: the checkpoint replaces them
    resumed.load(tmp_path / "mid.mtc")
    resumed_losses = [resumed.train_step(x, y) for x, y in data[4:]]
    assert resumed_losses == losses[4:]
    assert_same(snapshot(resumed), snapshot(reference))


def test_crash_during_save_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    s = make_session()
    path = tmp_path / "ck.mtc"
    s.save(path)
    good = path.read_bytes()
    s.train_step(*batches(1)[0])
    calls = []

    def failing_write(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        return real_write(*args, **kwargs)
    real_write = np.lib.format.write_array
    monkeypatch.setattr(np.lib.format, "write_array", failing_write)
    with pytest.raises(OSError, match="simulated"):
        s.save(path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ck.mtc"], "the temporary file is removed"


def test_hard_kill_during_save_leaves_the_old_checkpoint(tmp_path):
    path = tmp_path / "ck.mtc"
    make_session().save(path)
    good = path.read_bytes()
    script = f"""
import os, numpy as np, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_checkpoint import make_session
s = make_session(seed=5)
real = np.lib.format.write_array
count = [0]
def dying(*a, **k):
    count[0] += 1
    if count[0] == 4:
        os._exit(17)          # the process dies in the middle of writing
    return real(*a, **k)
np.lib.format.write_array = dying
s.save({str(path)!r})
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 17, result.stderr
    assert path.read_bytes() == good
    s = make_session(seed=7)
    s.load(path)                # still a valid checkpoint


def _corrupt_variants(tmp_path, good):
    def write(name, data):
        p = tmp_path / name
        p.write_bytes(data)
        return p
    meta_only = tmp_path / "other.zip"
    with zipfile.ZipFile(meta_only, "w") as z:
        z.writestr("checkpoint.json", json.dumps({"format": "something-else", "version": 1}))
    future = tmp_path / "future.mtc"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(future, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "checkpoint.json":
                meta = json.loads(data)
                meta["version"] = 99
                data = json.dumps(meta)
            dst.writestr(item, data)
    no_meta = tmp_path / "nometa.zip"
    with zipfile.ZipFile(no_meta, "w") as z:
        z.writestr("weights.npy", b"123")
    raw = good.read_bytes()
    return {
        "truncated": (write("truncated.mtc", raw[: len(raw) // 2]), "truncated or corrupt"),
        "truncated_tail": (write("tail.mtc", raw[:-10]), "truncated or corrupt"),
        "foreign_bytes": (write("foreign.bin", b"\x89PNG\r\n\x1a\n" + bytes(200)), "truncated or corrupt"),
        "empty": (write("empty.mtc", b""), "truncated or corrupt"),
        "foreign_zip": (meta_only, "not a minitrain checkpoint"),
        "no_meta": (no_meta, "not a minitrain checkpoint"),
        "future_version": (future, "version 99"),
        "missing": (tmp_path / "absent.mtc", "no such checkpoint"),
    }


def test_bad_files_raise_and_leave_the_session_untouched(tmp_path):
    s = make_session()
    s.train_step(*batches(1)[0])
    good = tmp_path / "good.mtc"
    s.save(good)
    s.train_step(*batches(1, seed=3)[0])
    before, step, rng = snapshot(s), s.step_count, minitrain.random.get_state()
    for name, (path, message) in _corrupt_variants(tmp_path, good).items():
        with pytest.raises(CheckpointError, match=message):
            s.load(path)
        assert_same(snapshot(s), before)
        assert s.step_count == step and minitrain.random.get_state() == rng, name


def test_checkpoint_of_another_model_or_optimizer_is_rejected(tmp_path):
    s = make_session()
    path = tmp_path / "ck.mtc"
    s.save(path)
    minitrain.random.seed(0)
    other_model = nn.Sequential(nn.Flatten(), nn.Linear(8, 3))
    other = TrainingSession(other_model, nn.CrossEntropyLoss(), Adam(0.01), input_shape=(1, 8))
    before = snapshot(other)
    with pytest.raises(CheckpointError, match="does not fit"):
        other.load(path)
    assert_same(snapshot(other), before)
    sgd = make_session(optimizer=SGD(0.1, momentum=0.9))
    with pytest.raises(CheckpointError, match="Adam"):
        sgd.load(path)


def grouped_session(bias_lr):
    """No weight decay and their own lr on the biases."""
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 6), nn.Relu(), nn.Linear(6, 3))
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    optimizer = SGD([{"params": weights}, {"params": biases, "lr": bias_lr, "weight_decay": 0}], lr=0.1,
                    momentum=0.9, weight_decay=0.01)
    return TrainingSession(model, nn.CrossEntropyLoss(), optimizer, input_shape=(1, 8))


def test_parameter_groups_survive_a_checkpoint(tmp_path):
    s = grouped_session(0.5)
    for x, y in batches(2):
        s.train_step(x, y)
    s.optimizer.param_groups[1]["lr"] = 0.25
    path = tmp_path / "ck.mtc"
    s.save(path)
    resumed = grouped_session(0.5)
    resumed.load(path)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [0.1, 0.25]
    assert_same(snapshot(resumed), snapshot(s))
    for x, y in batches(2, seed=1):
        assert resumed.train_step(x, y) == s.train_step(x, y)
    assert_same(snapshot(resumed), snapshot(s))
    other = TrainingSession(grouped_session(0.5).model, nn.CrossEntropyLoss(), SGD(0.1, momentum=0.9),
                            input_shape=(1, 8))
    with pytest.raises(CheckpointError, match="parameter groups"):
        other.load(path)


def _with_meta(good, path, change):
    """A copy of checkpoint `good` whose checkpoint.json went through `change(meta)`: every
    CRC is valid, only the metadata is wrong."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "checkpoint.json":
                meta = json.loads(data)
                change(meta)
                data = json.dumps(meta)
            dst.writestr(item, data)
    return path


BAD_META = {
    "step_count_text": (lambda m: m["optimizer"].update(step_count="many"), "step_count"),
    "step_count_negative": (lambda m: m["optimizer"].update(step_count=-1), "step_count"),
    "step_count_float": (lambda m: m["optimizer"].update(step_count=2.5), "step_count"),
    "no_optimizer": (lambda m: m.pop("optimizer"), "'optimizer'"),
    "optimizer_not_a_dict": (lambda m: m.update(optimizer=[1]), "'optimizer'"),
    "no_extra": (lambda m: m.pop("extra"), "'extra'"),
    "extra_not_a_dict": (lambda m: m.update(extra=3), "'extra'"),
    "no_rng": (lambda m: m.pop("rng"), "'rng'"),
    "bad_rng": (lambda m: m.update(rng={"bit_generator": "PCG64", "state": 5}), "'rng'"),
    "no_step": (lambda m: m.pop("step"), "'step'"),
    "array_names_not_a_list": (lambda m: m.update(model_arrays="0.weight"), "'model_arrays'"),
    "groups_not_a_list": (lambda m: m["optimizer"].update(groups="all"), "'optimizer.groups'"),
    "group_lr_text": (lambda m: m["optimizer"]["groups"][0].update(lr="fast"), "lr"),
    "group_members_differ": (lambda m: m["optimizer"]["groups"][0]["params"].pop(), "parameter groups"),
}


@pytest.mark.parametrize("name", sorted(BAD_META))
def test_bad_metadata_is_refused_before_the_session_changes(tmp_path, name):
    change, words = BAD_META[name]
    s = make_session()
    s.train_step(*batches(1)[0])
    good = tmp_path / "good.mtc"
    s.save(good)
    s.train_step(*batches(1, seed=3)[0])
    before, step, rng = snapshot(s), s.step_count, minitrain.random.get_state()
    with pytest.raises(CheckpointError, match=words):
        s.load(_with_meta(good, tmp_path / f"{name}.mtc", change))
    assert_same(snapshot(s), before)
    assert s.step_count == step and minitrain.random.get_state() == rng


def test_save_fsyncs_the_folder_after_the_rename(tmp_path, monkeypatch):
    """The rename is durable only once the folder's entry is on disk."""
    import stat
    synced = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.append(("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file", len(renamed)))
        return real_fsync(fd)

    renamed = []

    def replace(*args):
        renamed.append(args)
        return real_replace(*args)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    make_session().save(tmp_path / "ck.mtc")
    assert synced == [("file", 0), ("dir", 1)]
