"""LeNet-style CNN on the 8x8 digits shipped with minitrain (>= 97% test accuracy).

Two conv-BatchNorm-ReLU-maxpool stages (8x8 -> 4x4 -> 2x2), then two fully connected layers
with dropout, trained with AdamW, a linear warm-up and a cosine decay.  A few seconds on
two cores.
"""
import minitrain
from minitrain import nn
from minitrain.cli import run_example
from minitrain.data import load_digits
from minitrain.training.recipes import train_classifier

DEFAULTS = {"epochs": 20, "batch_size": 32, "lr": 3e-3}
INPUT_SHAPE = (1, 8, 8)  # per sample: build_model() takes (N, *INPUT_SHAPE)


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Relu(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.Relu(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.Relu(), nn.Dropout(0.25), nn.Linear(64, 10))


def run(epochs=None, batch_size=None, lr=None, device="cpu", seed=0, out=None, max_steps=None, progress=True,
        resume=False, overwrite=False):
    """Train and return the final test accuracy."""
    epochs, batch_size, lr = epochs or DEFAULTS["epochs"], batch_size or DEFAULTS["batch_size"], lr or DEFAULTS["lr"]
    minitrain.random.seed(seed)
    data = load_digits()
    return train_classifier(build_model(), data, INPUT_SHAPE, epochs=epochs,
                            batch_size=batch_size, lr=lr, weight_decay=1e-4, device=device, seed=seed, out=out,
                            max_steps=max_steps, progress=progress, resume=resume, overwrite=overwrite)


if __name__ == "__main__":
    run_example(run, __doc__.splitlines()[0], DEFAULTS)
