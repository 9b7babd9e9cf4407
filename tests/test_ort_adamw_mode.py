"""minitrain.optim.AdamW's two modes: PyTorch's AdamW (mode="torch", ONNX Runtime's adam_mode
0) and Hugging Face's (mode="huggingface", adam_mode 1, what onnxruntime-training's artifacts
use), against float64 references of each, and against ONNX Runtime's AdamWOptimizer kernel."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import OpAttributeError, OptimizerArgumentError
from minitrain.optim import AdamW

LR, BETAS, EPS, DECAY = 0.05, (0.8, 0.99), 1e-6, 0.1


def reference(w, grads, mode, max_norm=None):
    """Steps of AdamW in float64 (`mode` "torch" or "huggingface")."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    (b1, b2), w = BETAS, w.copy()
    for t, g in enumerate(grads, 1):
        if max_norm is not None:
            g = g * min(1.0, max_norm / (np.sqrt((g * g).sum()) + 1e-6))
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        if mode == "torch":
            w = w * (1 - LR * DECAY)
            w = w - LR / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + EPS)
        else:
            w = w - LR * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + EPS)
            w = w * (1 - LR * DECAY)
    return w


@pytest.mark.parametrize("max_norm", [None, 0.5])
@pytest.mark.parametrize("mode", ["torch", "huggingface"])
def test_adamw_modes_follow_their_formulas(mode, max_norm, rng):
    w = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(6)]
    ours = w.copy()
    optimizer = AdamW(lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY, mode=mode, max_grad_norm=max_norm)
    optimizer.attach({"w": ours})
    for g in grads:
        optimizer.step({"w": g})
    np.testing.assert_allclose(ours, reference(w, grads, mode, max_norm), rtol=1e-12, atol=1e-14)
    assert optimizer.attrs()["adam_mode"] == {"torch": 0, "huggingface": 1}[mode]


@pytest.mark.parametrize("mode", ["torch", "huggingface"])
def test_adamw_equals_onnx_runtimes_adamw_optimizer(mode, rng):
    w, m, v = rng.standard_normal((5,)), rng.standard_normal((5,)), rng.random(5)
    g = rng.standard_normal((5,))
    ours, theirs = [a.copy() for a in (w, m, v)], [a.copy() for a in (w, m, v)]
    run_node("AdamOptimizer", [np.array(LR), np.array(3), ours[0], g, ours[1], ours[2]], domain="com.microsoft",
             attrs={"beta1": BETAS[0], "beta2": BETAS[1], "epsilon": EPS, "weight_decay": DECAY,
                    "decoupled_weight_decay": 1, "adam_mode": AdamW.MODES[mode]})
    run_node("AdamWOptimizer", [np.array([LR]), np.array([3]), theirs[0], g, theirs[1], theirs[2]],
             domain="com.microsoft", attrs={"alpha": BETAS[0], "beta": BETAS[1], "epsilon": EPS,
                                            "weight_decay": DECAY, "adam_mode": AdamW.MODES[mode]})
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_bad_modes():
    with pytest.raises(OptimizerArgumentError, match="AdamW: mode must be one of"):
        AdamW(lr=0.1, mode="keras")
    args = [np.array(0.1), np.array(1), np.ones(2), np.ones(2), np.zeros(2), np.zeros(2)]
    with pytest.raises(OpAttributeError, match="adam_mode"):
        run_node("AdamOptimizer", args, domain="com.microsoft", attrs={"adam_mode": 1})
    with pytest.raises(OpAttributeError, match="adam_mode"):
        run_node("AdamOptimizer", args, domain="com.microsoft", attrs={"adam_mode": 2, "decoupled_weight_decay": 1})
