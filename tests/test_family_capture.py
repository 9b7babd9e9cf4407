"""Every exported model family's CUDA step is captured in a CUDA Graph: no node of its training
or evaluation plan runs on the CPU provider and nothing crosses between host and device per step
(the plans' placement, checked here with pycuda replaced by stand-ins), and on a GPU the
training and evaluation steps record, capture and replay, with the results of uncaptured ones."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")

from family_plans import BENCH_INPUT, INPUT, MODES, exported_session  # noqa: E402
from model_families import CLASSES, FAMILIES  # noqa: E402
from stubbed_cuda import run_stubbed  # noqa: E402


def test_the_cuda_plans_of_every_family_run_on_the_device_only():
    found = run_stubbed("import json\nfrom family_plans import cuda_blockers\n"
                        f"print(json.dumps(cuda_blockers({list(FAMILIES)!r})))")
    assert len(found) == len(FAMILIES) * 4
    blocked = {plan: why for plan, why in found.items() if why != [[], None]}
    assert blocked == {}


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["training", "eval"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_step_is_captured_and_replayed(family, mode):
    rng = np.random.default_rng(0)
    labels = (INPUT[0],) + (INPUT[2:] if family == "unet" else ())
    data = [(rng.standard_normal(INPUT).astype(np.float32), rng.integers(0, CLASSES, labels)) for _ in range(5)]
    plain = exported_session(family, mode, "cuda", capture=False)
    captured = exported_session(family, mode, "cuda")
    assert [s.provider for s in captured.train_plan.steps if s.provider != "cuda"] == []
    for x, y in data:
        np.testing.assert_allclose(captured.train_step(x, y), plain.train_step(x, y), rtol=1e-5)
    for x, _ in data:
        np.testing.assert_allclose(captured.eval_step(x), plain.eval_step(x), rtol=1e-4, atol=1e-5)
    for graphs in (captured._train.graphs, captured._eval_executor(False)[0].graphs):
        assert graphs.disabled is None
        assert graphs.stats["captures"] == 1 and graphs.stats["replays"] == len(data) - 3


def test_the_bench_unet_plans_run_on_the_device_only():
    found = run_stubbed("import json\nfrom family_plans import BENCH_INPUT, cuda_blockers\n"
                        "print(json.dumps(cuda_blockers(['unet'], BENCH_INPUT)))")
    assert found == {f"unet/{mode}/{plan}": [[], None] for mode in MODES for plan in ("train", "eval")}


def bench_batch(seed=0):
    """A batch as bench/model_families.py feeds U-Net: images and per-pixel int64 labels."""
    rng = np.random.default_rng(seed)
    n, _, h, w = BENCH_INPUT
    return rng.standard_normal(BENCH_INPUT).astype(np.float32), rng.integers(0, CLASSES, (n, h, w))


def test_a_per_pixel_training_step_copies_its_scalars_only_to_the_host(monkeypatch):
    """U-Net's output (N, C, H, W) is what a step would copy to the host by far: train_step
    leaves it on the device until last_output asks for it, unless fetch_output asks for it."""
    session = exported_session("unet", "training", "cpu", input_shape=BENCH_INPUT)
    fetched, results = [], []
    fetch_async = session._provider.fetch_async
    monkeypatch.setattr(session._provider, "fetch_async",
                        lambda values: fetched.append({k: np.shape(v) for k, v in values.items()})
                        or fetch_async(values))
    for seed in range(2):
        results.append((session.train_step(*bench_batch(seed)), session.last_output))
    monkeypatch.undo()
    assert fetched == [{"loss": (), "norm": ()}] * 2
    twin = exported_session("unet", "training", "cpu", input_shape=BENCH_INPUT)
    for seed, (loss, output) in enumerate(results):
        pending = twin.train_step(*bench_batch(seed), wait=False, fetch_output=True)
        assert loss == pytest.approx(float(pending), rel=1e-6)
        assert output.shape == (BENCH_INPUT[0], CLASSES) + BENCH_INPUT[2:]
        np.testing.assert_allclose(output, pending.values["output"], rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_the_bench_unet_step_is_captured_and_copies_its_scalars_only():
    """bench/model_families.py's U-Net session (batch and size, device-resident feeds): its
    step is captured and replayed, copies no more than its scalars to the host per step, and
    gives the uncaptured step's loss and output; a fetched output outlives the next replay."""
    plain = exported_session("unet", "training", "cuda", input_shape=BENCH_INPUT, capture=False)
    captured = exported_session("unet", "training", "cuda", input_shape=BENCH_INPUT)
    device = captured._provider
    fetched = []
    for seed in range(5):
        x, y = bench_batch(seed)
        pending = captured.train_step(device.from_numpy(x), device.from_numpy(y), wait=False, fetch_output=seed == 3)
        if seed == 3:
            fetched = [pending, plain.train_step(x, y), plain.last_output]
        else:
            assert float(pending) == pytest.approx(plain.train_step(x, y), rel=1e-5)
            np.testing.assert_allclose(captured.last_output, plain.last_output, rtol=1e-4, atol=1e-5)
    pending, loss, output = fetched
    assert float(pending) == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(pending.values["output"], output, rtol=1e-4, atol=1e-5)
    graphs = captured._train.graphs
    assert graphs.disabled is None
    assert graphs.stats["captures"] == 1 and graphs.stats["replays"] == 2 and graphs.stats["plain"] == 0
    fetches = [sorted(buffers) for _, buffers, _ in device._fetch_ring.slots[:5]]
    assert fetches == [["loss", "norm"]] * 3 + [["loss", "norm", "output"], ["loss", "norm"]]
