"""Train an .onnx classifier on a built-in data set and write the trained model back as .onnx:
what `python -m minitrain train model.onnx --data digits` runs.

The model is imported with `load` and trained as an nn.GraphModule, its parameters the
floating-point initializers that some node differentiates (nn.graph_module.trainable_initializers:
BatchNormalization's running statistics are state, updated by a training-mode export's
BatchNormalization and left as they are by an inference-mode one), with the classifier examples' recipe (AdamW, warm-up, cosine decay,
mean cross-entropy; see training/recipes.py).  Its first input takes a batch of samples,
reshaped to the model's per-sample shape when the sizes agree (a model of flat (N, 64) inputs
trains on the 8x8 digits); its first output holds the class scores.  The run folder is
`fit`'s (metrics, checkpoint.mtc, checkpoint-best.mtc), and `<model stem>.onnx` beside the
checkpoint is the model with the parameters of the last checkpoint (written by rank 0 alone in
a data-parallel run).
"""
from __future__ import annotations

import os

import numpy as np

from .. import distributed
from .. import random as mt_random
from ..checkpoint import read
from ..data import load_digits, load_mnist1d
from ..data.digits import Split
from ..errors import ShapeError
from ..nn.graph_module import GraphModule
from ..onnx import load, save
from .loop import CHECKPOINT
from .recipes import train_classifier

# data set -> (loader, default epochs, batch size and peak learning rate), as in its example
DATASETS = {
    "digits": (load_digits, {"epochs": 20, "batch_size": 32, "lr": 3e-3}),
    "mnist1d": (load_mnist1d, {"epochs": 20, "batch_size": 64, "lr": 3e-3}),
}
WEIGHT_DECAY = 1e-4


def train_onnx(model, data, *, out, epochs=None, batch_size=None, lr=None, device="cpu", seed=0,
               max_steps=None, progress=True, resume=False, overwrite=False):
    """Train `model` (an .onnx path) on the data set named `data` with the run folder `out`;
    writes `<out>/<model stem>.onnx` and returns the final test accuracy."""
    if data not in DATASETS:
        raise ValueError(f"unknown data set {data!r}; built in: {sorted(DATASETS)}")
    loader, defaults = DATASETS[data]
    graph = load(model)
    split, input_shape = fit_to_model(graph, loader(), data)
    mt_random.seed(seed)
    accuracy = train_classifier(
        GraphModule(graph), split, input_shape, epochs=epochs or defaults["epochs"],
        batch_size=batch_size or defaults["batch_size"], lr=lr or defaults["lr"], weight_decay=WEIGHT_DECAY,
        device=device, seed=seed, out=out, max_steps=max_steps, progress=progress, resume=resume,
        overwrite=overwrite)
    if distributed.is_main():
        _, trained, _ = read(os.path.join(out, CHECKPOINT))
        path = os.path.join(out, os.path.splitext(os.path.basename(os.fspath(model)))[0] + ".onnx")
        save(with_initializers(graph, trained), path)
        print(f"wrote {path}")
    return accuracy


def fit_to_model(graph, split, data_name):
    """(split, per-sample input shape): the data's inputs cast to the model input's dtype and
    reshaped to its per-sample shape; ShapeError naming both when their sizes differ."""
    if not graph.inputs or graph.inputs[0].shape is None:
        raise ShapeError(f"model {graph.name!r} has no input of known rank")
    source = graph.inputs[0]
    per_sample = tuple(source.shape[1:])
    sample = split.x_train.shape[1:]
    if not all(isinstance(d, int) for d in per_sample) or int(np.prod(per_sample)) != int(np.prod(sample)):
        raise ShapeError(f"model input {source.name!r} takes samples of shape {per_sample}; the {data_name} "
                         f"samples are {sample} ({int(np.prod(sample))} values)")

    def fitted(x):
        return np.ascontiguousarray(x.reshape((len(x),) + per_sample), dtype=source.dtype)
    return Split(fitted(split.x_train), split.y_train, fitted(split.x_test), split.y_test), per_sample


def with_initializers(graph, arrays):
    """A copy of `graph` whose initializers named in `arrays` hold those values."""
    trained = graph.copy()
    unknown = sorted(set(arrays) - set(trained.initializers))
    if unknown:
        raise ValueError(f"graph {graph.name!r} has no initializers {unknown}")
    trained.initializers.update((name, np.asarray(a)) for name, a in arrays.items())
    return trained
