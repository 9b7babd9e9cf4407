"""`fit`: the epoch loop around a TrainingSession, with what a person watching wants.

Per epoch: a tqdm progress bar with the running loss and accuracy (when tqdm is installed and
`progress` is on), a one-line summary on stdout, and one JSON object appended to
`<out_dir>/metrics.jsonl`.  After each epoch a checkpoint (`<out_dir>/checkpoint.mtc`, holding
the data loader's order too) lets `fit(..., resume=True)` carry on where a run stopped; at the
end `<out_dir>/metrics.png` plots loss and accuracy (when matplotlib is installed).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from .plot import plot_metrics


def _progress(iterable, total, enabled, desc):
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return iterable
        return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)
    return iterable


def evaluate(session, x, y, *, task="classification", batch_size=512):
    """Loss and accuracy (classification) or loss alone (regression, where the loss is the
    MSE) of the inference plan over (x, y), in chunks of batch_size."""
    total_loss, correct = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        loss, out = session.evaluate(xb, yb)
        total_loss += loss * len(xb)
        if task == "classification":
            correct += int(np.sum(out.argmax(axis=1) == yb))
    metrics = {"test_loss": total_loss / len(x)}
    if task == "classification":
        metrics["test_accuracy"] = correct / len(x)
    else:
        metrics["test_mse"] = metrics["test_loss"]
    return metrics


def fit(session, loader, *, epochs, test=None, task="classification", out_dir=None, progress=True,
        max_steps=None, resume=False, log=print):
    """Train for `epochs` epochs over `loader` ((inputs, targets) batches); evaluate on
    `test` = (x, y) after each epoch.  task: "classification" (accuracy) or "regression"
    (test_mse).  max_steps caps the batches per epoch (smoke runs).  Returns the list of
    per-epoch metric dicts."""
    history, first_epoch = [], 0
    checkpoint_path = os.path.join(out_dir, "checkpoint.mtc") if out_dir else None
    metrics_path = os.path.join(out_dir, "metrics.jsonl") if out_dir else None
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    if resume and checkpoint_path and os.path.exists(checkpoint_path):
        extra = session.load(checkpoint_path)
        loader.load_state_dict(extra["loader"])
        first_epoch = extra["epoch"]
        history = extra.get("history", [])
        log(f"resumed from {checkpoint_path} after epoch {first_epoch} (step {session.step_count})")
    elif metrics_path and os.path.exists(metrics_path):
        os.remove(metrics_path)
    for epoch in range(first_epoch, epochs):
        start = time.perf_counter()
        loss_sum, seen, correct = 0.0, 0, 0
        steps = len(loader) if max_steps is None else min(len(loader), max_steps)
        bar = _progress(loader, steps, progress, f"epoch {epoch + 1}/{epochs}")
        for i, (xb, yb) in enumerate(bar):
            if i == steps:
                break
            loss = session.train_step(xb, yb)
            loss_sum += loss * len(xb)
            seen += len(xb)
            if task == "classification":
                correct += int(np.sum(session.last_output.argmax(axis=1) == yb))
            if bar is not loader:
                postfix = {"loss": f"{loss_sum / seen:.4f}"}
                if task == "classification":
                    postfix["acc"] = f"{correct / seen:.3f}"
                bar.set_postfix(postfix, refresh=False)
        if bar is not loader:
            bar.close()
        record = {"epoch": epoch + 1, "step": session.step_count, "lr": session.optimizer.current_lr(),
                  "train_loss": loss_sum / max(seen, 1)}
        if task == "classification":
            record["train_accuracy"] = correct / max(seen, 1)
        if test is not None:
            record.update(evaluate(session, test[0], test[1], task=task))
        record["seconds"] = time.perf_counter() - start
        history.append(record)
        log("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))
        if metrics_path:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if checkpoint_path:
            session.save(checkpoint_path, extra={"epoch": epoch + 1, "loader": loader.state_dict(),
                                                 "history": history})
    if out_dir and history:
        plot_metrics(history, os.path.join(out_dir, "metrics.png"))
    return history
