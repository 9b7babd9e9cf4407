"""Shape subgraphs computed at run time on CUDA (minitrain/shape_folding.py): Shape reads the
dims of a device tensor into host memory, the int64 ops after it run on the CPU, Reshape reads
their result there; nothing is copied between host and device for them, the step is still
captured in a CUDA Graph and replayed, at two batch sizes, beside PyTorch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from test_shape_folding import batch_moved_session, train_beside_torch  # noqa: E402

pytestmark = pytest.mark.cuda


def test_run_time_shape_on_cuda_stays_captured():
    model, session = batch_moved_session(device="cuda")
    placed = {(s.node.op_type, s.provider) for s in session.train_plan.steps}
    assert {("Shape", "cuda"), ("Gather", "cpu"), ("Concat", "cpu"), ("Reshape", "cuda")} <= placed
    assert not {op for op, _ in placed} & {"MemcpyFromHost", "MemcpyToHost"}
    train_beside_torch(model, session, batches=(4, 4, 4, 4, 3, 3, 3, 3, 4), rel=1e-4)
    graphs = session._train.graphs
    assert graphs.disabled is None and graphs.stats["captures"] == 2 and graphs.stats["replays"] >= 2
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    expected = model.eval()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(session.eval_step(x), expected, rtol=1e-4, atol=1e-5)
