"""Convolutional autoencoder on the 8x8 digits: Conv2d down, ConvTranspose2d up (test MSE
below 0.015; the mean image alone scores about 0.07).

The encoder halves the resolution twice with strided convolutions (8x8 -> 4x4 -> 2x2 x 8
channels: a 32-number code for 64 pixels), the decoder doubles it back with transposed convolutions and ends in a sigmoid; the
loss is the mean squared error against the input.  A few seconds on two cores.
"""
import numpy as np

import minitrain
from minitrain import nn, optim
from minitrain.cli import run_example
from minitrain.data import ArrayDataset, DataLoader, load_digits
from minitrain.training import TrainingSession, fit

DEFAULTS = {"epochs": 30, "batch_size": 32, "lr": 3e-3}
MSE_THRESHOLD = 0.015
INPUT_SHAPE = (1, 8, 8)  # per sample: build_model() takes (N, *INPUT_SHAPE)


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.Relu(),
        nn.Conv2d(16, 8, 3, stride=2, padding=1), nn.Relu(),
        nn.ConvTranspose2d(8, 16, 3, stride=2, padding=1, output_padding=1), nn.Relu(),
        nn.ConvTranspose2d(16, 1, 3, stride=2, padding=1, output_padding=1), nn.Sigmoid())


def run(epochs=None, batch_size=None, lr=None, device="cpu", seed=0, out=None, max_steps=None, progress=True,
        resume=False, overwrite=False):
    """Train and return the final test MSE."""
    epochs, batch_size, lr = epochs or DEFAULTS["epochs"], batch_size or DEFAULTS["batch_size"], lr or DEFAULTS["lr"]
    minitrain.random.seed(seed)
    data = load_digits()
    loader = DataLoader(ArrayDataset(data.x_train, data.x_train), batch_size, shuffle=True, seed=seed)
    total = epochs * min(len(loader), max_steps or len(loader))
    schedule = optim.LinearWarmup(max(1, total // 20), optim.CosineLR(max(1, total - total // 20)))
    session = TrainingSession(build_model(), nn.MSELoss(), optim.Adam(lr, schedule=schedule),
                              input_shape=INPUT_SHAPE, device=device,
                              data_parallel=minitrain.distributed.world() is not None)   # --distributed
    history = fit(session, loader, epochs=epochs, test=(data.x_test, data.x_test), task="regression",
                  out_dir=out, progress=progress, max_steps=max_steps, resume=resume, overwrite=overwrite)
    mse = history[-1]["test_mse"]
    baseline = float(np.mean((data.x_test - data.x_train.mean(axis=0)) ** 2))
    print(f"mean-image baseline MSE {baseline:.4f}; target < {MSE_THRESHOLD}")
    print(f"final test_mse={mse:.5f}")
    return mse


if __name__ == "__main__":
    run_example(run, __doc__.splitlines()[0], DEFAULTS)
