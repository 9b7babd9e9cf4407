"""Every exported model family's CUDA step is captured in a CUDA Graph: no node of its training
or evaluation plan runs on the CPU provider and nothing crosses between host and device per step
(the plans' placement, checked here with pycuda replaced by stand-ins), and on a GPU the
training and evaluation steps record, capture and replay, with the results of uncaptured ones."""
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")

from family_plans import INPUT, exported_session  # noqa: E402
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
