"""`fit`: the epoch loop around a TrainingSession, with what a person watching wants.

Per epoch: a tqdm progress bar with the running loss and accuracy (when tqdm is installed and
`progress` is on), a one-line summary on stdout, and one JSON object appended to
`<out_dir>/metrics.jsonl`.  After each epoch a checkpoint (`<out_dir>/checkpoint.mtc`, holding
the data loader's order too) lets `fit(..., resume=True)` carry on where a run stopped, and
`<out_dir>/checkpoint-best.mtc` keeps the epoch with the best monitored metric; at the end
`<out_dir>/metrics.png` plots loss and accuracy (when matplotlib is installed).

Run folder rules: a folder that already holds a run is refused unless `resume` (continue from
its checkpoint) or `overwrite` (delete its run files and start again) is given.  A step whose
loss is not finite stops the run with TrainingDivergedError; the checkpoints keep the last
finished epoch.

Each epoch's line reports training steps per second.  With `profile` (or the environment
variable MINITRAIN_PROFILE, which the CLI's --profile sets) the third step is run node by node
with each node timed and written as a Chrome trace to that path.

Steps are queued without waiting for the device (`train_step(..., wait=False)`): the loop reads
each step's loss and output LAG steps later, so on a GPU the host prepares the next steps while
the device runs this one.

A data-parallel session (`TrainingSession(..., data_parallel=True)` after
`minitrain.distributed.init()`) trains on every rank of the MPI world: the loader is sharded
(`DataLoader.shard`: its batch_size is the global batch), the loss and accuracy reported are
sums over the ranks (each step's, so a loss that is not finite on one rank stops them all at the
same step), the test set is split over the ranks and its metrics summed, and BatchNorm running
statistics are averaged over the ranks before each evaluation and checkpoint.  Rank 0 alone
logs, draws the progress bar and writes the run folder (after a barrier); on resume it reads the
checkpoint and hands its contents to the other ranks, so a checkpoint moves freely between runs
of any number of ranks, one process included.  The checkpoint keeps every rank's random stream
too: resumed on as many ranks, a run goes on bitwise, Dropout masks included.
"""
from __future__ import annotations

import collections
import json
import math
import os
import time

import numpy as np

from .. import checkpoint
from ..errors import RunFolderError, TrainingDivergedError
from .plot import plot_metrics
from .ranks import Ranks

CHECKPOINT, BEST, METRICS, PLOT = "checkpoint.mtc", "checkpoint-best.mtc", "metrics.jsonl", "metrics.png"
RUN_FILES = (CHECKPOINT, BEST, METRICS, PLOT)
LAG = 4
PROFILED_STEP = 2           # after kernel compilation and convolution searches
PROFILE_VARIABLE = "MINITRAIN_PROFILE"


def _progress(iterable, total, enabled, desc):
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return iterable
        return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)
    return iterable


def evaluate(session, x, y, *, task="classification", batch_size=512):
    """Run the inference plan over (x, y) in chunks of batch_size and return a dict:
    {"test_loss", "test_accuracy"} for task="classification" (accuracy: the share of rows whose
    largest output is the label), {"test_loss", "test_mse"} for task="regression" (test_mse
    repeats the mean loss, which is the MSE for an MSELoss)."""
    if len(x) == 0:
        raise ValueError("evaluate: the test set is empty")
    return _test_metrics(_evaluation_sums(session, x, y, task, batch_size), task)


def _evaluation_sums(session, x, y, task, batch_size=512):
    """[summed loss, correct rows, rows] of the inference plan over (x, y)."""
    total_loss, correct = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        loss, out = session.evaluate(xb, yb)
        total_loss += loss * len(xb)
        if task == "classification":
            correct += int(np.sum(out.argmax(axis=1) == yb))
    return [total_loss, correct, len(x)]


def _test_metrics(sums, task):
    total_loss, correct, count = sums
    metrics = {"test_loss": float(total_loss / count)}
    if task == "classification":
        metrics["test_accuracy"] = float(correct / count)
    else:
        metrics["test_mse"] = metrics["test_loss"]
    return metrics


def prepare_run_folder(out_dir, *, resume=False, overwrite=False):
    """Apply the run folder rules to `out_dir` (see the module docstring) and create it."""
    if resume and overwrite:
        raise RunFolderError("fit: resume and overwrite exclude each other")
    existing = [name for name in RUN_FILES if os.path.exists(os.path.join(out_dir, name))]
    if resume:
        if CHECKPOINT not in existing:
            raise RunFolderError(f"{out_dir}: no {CHECKPOINT} to resume from")
    elif existing:
        if not overwrite:
            raise RunFolderError(f"{out_dir} already holds a run ({', '.join(existing)}); resume it "
                                 "(--resume) or replace it (--overwrite)")
        for name in existing:
            os.remove(os.path.join(out_dir, name))
    os.makedirs(out_dir, exist_ok=True)


def default_monitor(task, test):
    """The metric checkpoint-best.mtc follows and whether larger is better."""
    if test is None:
        return "train_loss", False
    return ("test_accuracy", True) if task == "classification" else ("test_mse", False)


def _write_metrics(path, history):
    with open(path, "w") as f:
        f.writelines(json.dumps(record) + "\n" for record in history)


def fit(session, loader, *, epochs, test=None, task="classification", out_dir=None, progress=True,
        max_steps=None, resume=False, overwrite=False, log=print, profile=None):
    """Train `session` for `epochs` epochs over `loader` and return the per-epoch metrics.

    session: a TrainingSession.  loader: an iterable of (inputs, targets) batches with len()
    (minitrain.data.DataLoader; its order is saved in checkpoints when out_dir is given; a
    data-parallel session needs a DataLoader, which fit shards over the ranks).
    epochs: the total count (a resumed run trains the ones left).  test: (x, y) arrays
    evaluated after each epoch (see `evaluate`), or None.  task: "classification" (accuracy
    is reported) or "regression" (test_mse).  out_dir: a folder for metrics.jsonl,
    checkpoint.mtc (after each epoch), checkpoint-best.mtc (the best epoch by test_accuracy,
    test_mse or, without a test set, train_loss) and metrics.png; None writes nothing.
    progress: a tqdm bar per epoch (when tqdm is installed).  max_steps: at most this many
    batches per epoch (smoke runs).  resume: continue the run in out_dir from its checkpoint;
    overwrite: delete the run files in out_dir and start again (a folder that holds a run is
    refused without one of them; not both).  log: called with each line to print (the epoch
    summaries).  profile: a path for the Chrome trace of the third step, timed node by node
    (default: the MINITRAIN_PROFILE environment variable).

    Each epoch's dict holds epoch, step, lr, train_loss, steps_per_s, train_accuracy
    (classification), skipped_steps (fp16 loss scaling: updates skipped so far; the bar
    shows this epoch's), the `evaluate` metrics when `test` is given, and seconds.  A
    non-finite loss raises TrainingDivergedError; the checkpoints keep the last finished
    epoch."""
    profile = profile or os.environ.get(PROFILE_VARIABLE)
    ranks = Ranks(session)
    if ranks.world:
        loader.shard(ranks.rank, ranks.size)
        if not ranks.main:
            log, progress = _quiet, False
    if test is not None and len(test[0]) == 0:
        raise ValueError("fit: the test set is empty; pass test=None to train without evaluation")
    if len(loader) == 0:
        raise ValueError("fit: the loader yields no batches")
    if resume and not out_dir:
        raise RunFolderError("fit: resume needs the out_dir of the run to continue")
    history, first_epoch = [], 0
    monitor, larger_is_better = default_monitor(task, test)
    best = None
    paths = {name: os.path.join(out_dir, name) for name in RUN_FILES} if out_dir else None
    if out_dir:
        ranks.on_main(prepare_run_folder, out_dir, resume=resume, overwrite=overwrite)
    if resume:
        extra = checkpoint.restore(session, ranks.on_main(checkpoint.read, paths[CHECKPOINT]), paths[CHECKPOINT])
        ranks.restore_random_streams(extra.get("random_states"))
        loader.load_state_dict(extra["loader"])
        first_epoch = extra["epoch"]
        history = extra.get("history", [])
        best = extra.get("best")
        ranks.on_main(_write_metrics, paths[METRICS], history)     # drops an epoch logged after the checkpoint
        log(f"resumed from {paths[CHECKPOINT]} after epoch {first_epoch} (step {session.step_count})")
    elif ranks.world:
        loader.load_state_dict(ranks.broadcast(loader.state_dict()))    # one order on every rank, even unseeded
    if test is not None:
        test = (test[0][ranks.rank::ranks.size], test[1][ranks.rank::ranks.size])
    for epoch in range(first_epoch, epochs):
        start = time.perf_counter()
        loss_sum, seen, correct, skipped = 0.0, 0, 0, 0
        steps = len(loader) if max_steps is None else min(len(loader), max_steps)
        bar = _progress(loader, steps, progress, f"epoch {epoch + 1}/{epochs}")
        queued = collections.deque()        # (step, pending loss, labels) read LAG steps later

        def settle(keep):
            nonlocal loss_sum, seen, correct, skipped
            while len(queued) > keep:
                step, pending, yb = queued.popleft()
                right = int(np.sum(pending.values["output"].argmax(axis=1) == yb)) if task == "classification" else 0
                step_loss, step_seen, step_correct = ranks.sum([float(pending) * len(yb), len(yb), right])
                if not math.isfinite(step_loss):
                    if bar is not loader:
                        bar.close()
                    kept = f"{paths[CHECKPOINT]} keeps epoch {epoch}" if out_dir and epoch else "no checkpoint"
                    raise TrainingDivergedError(f"epoch {epoch + 1}, step {step + 1}: the loss is "
                                                f"{step_loss / step_seen}; training stopped ({kept})")
                loss_sum += float(step_loss)
                seen += int(step_seen)
                correct += int(step_correct)
                skipped += session.loss_scale is not None and bool(pending.values["found_inf"])
                if bar is not loader:
                    postfix = {"loss": f"{loss_sum / seen:.4f}"}
                    if task == "classification":
                        postfix["acc"] = f"{correct / seen:.3f}"
                    if skipped:
                        postfix["skipped"] = skipped
                    bar.set_postfix(postfix, refresh=False)

        for i, (xb, yb) in enumerate(bar):
            if i == steps:
                break
            if profile and epoch == first_epoch and i == min(PROFILED_STEP, steps - 1):
                loss = session.profile_step(xb, yb, profile if ranks.main else None, fetch_output=True)
                log(f"wrote a Chrome trace of one step to {profile}")
            else:
                loss = session.train_step(xb, yb, wait=False, fetch_output=True)
            queued.append((i, loss, np.asarray(yb)))
            settle(LAG)
        settle(0)
        train_seconds = time.perf_counter() - start
        if bar is not loader:
            bar.close()
        if ranks.world:
            session.average_batchnorm_statistics()
        record = {"epoch": epoch + 1, "step": session.step_count, "lr": session.optimizer.current_lr(),
                  "train_loss": loss_sum / max(seen, 1), "steps_per_s": steps / train_seconds}
        if task == "classification":
            record["train_accuracy"] = correct / max(seen, 1)
        if session.loss_scale is not None:
            record["skipped_steps"] = session.skipped_steps
        if test is not None:
            record.update(_test_metrics(ranks.sum(_evaluation_sums(session, test[0], test[1], task)), task))
        record["seconds"] = time.perf_counter() - start
        history.append(record)
        log("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))
        if out_dir:
            value = record[monitor]
            improved = best is None or (value > best["value"] if larger_is_better else value < best["value"])
            if improved:
                best = {"metric": monitor, "value": value, "epoch": epoch + 1}
            extra = {"epoch": epoch + 1, "loader": loader.state_dict(), "history": history, "best": best}
            if ranks.world:
                extra["random_states"] = ranks.random_states()
            ranks.barrier()
            ranks.on_main(_write_epoch, session, paths, record, extra, improved)
    if out_dir and history:
        ranks.on_main(plot_metrics, history, paths[PLOT])
    return history


def _quiet(line):
    """The log of a rank other than 0: rank 0 speaks for the run."""


def _write_epoch(session, paths, record, extra, improved):
    """Append the epoch's record to metrics.jsonl and write its checkpoint (and the best one)."""
    with open(paths[METRICS], "a") as f:
        f.write(json.dumps(record) + "\n")
    session.save(paths[CHECKPOINT], extra=extra)
    if improved:
        session.save(paths[BEST], extra=extra)
