"""1D CNN on MNIST-1D (>= 94% test accuracy, the MNIST-1D paper's CNN figure; typically 97%).

Four conv-BatchNorm-ReLU layers in two stages with max pooling (40 -> 20 -> 10 steps), then a
linear classifier, trained with AdamW, a linear warm-up and a cosine decay on the 4,000
procedurally generated training signals.  About 15 seconds on two cores.
"""
import minitrain
from minitrain import nn
from minitrain.cli import run_example
from minitrain.data import load_mnist1d
from minitrain.training.recipes import train_classifier

DEFAULTS = {"epochs": 20, "batch_size": 64, "lr": 3e-3}
INPUT_SHAPE = (1, 40)  # per sample: build_model() takes (N, *INPUT_SHAPE)


def conv_block(c_in, c_out, k):
    return [nn.Conv1d(c_in, c_out, k, padding=k // 2), nn.BatchNorm1d(c_out), nn.Relu()]


def build_model():
    return nn.Sequential(*conv_block(1, 32, 5), *conv_block(32, 32, 5), nn.MaxPool1d(2),
                         *conv_block(32, 64, 3), *conv_block(64, 64, 3), nn.MaxPool1d(2),
                         nn.Flatten(), nn.Linear(64 * 10, 10))


def run(epochs=None, batch_size=None, lr=None, device="cpu", seed=0, out=None, max_steps=None, progress=True,
        resume=False, overwrite=False):
    """Train and return the final test accuracy."""
    epochs, batch_size, lr = epochs or DEFAULTS["epochs"], batch_size or DEFAULTS["batch_size"], lr or DEFAULTS["lr"]
    minitrain.random.seed(seed)
    data = load_mnist1d()
    return train_classifier(build_model(), data, INPUT_SHAPE, epochs=epochs,
                            batch_size=batch_size, lr=lr, weight_decay=1e-2, device=device, seed=seed, out=out,
                            max_steps=max_steps, progress=progress, resume=resume, overwrite=overwrite)


if __name__ == "__main__":
    run_example(run, __doc__.splitlines()[0], DEFAULTS)
