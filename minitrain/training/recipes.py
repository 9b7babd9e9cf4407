"""The recipe the classifier examples share: AdamW with a linear warm-up over the first 5% of
the steps and a cosine decay, mean cross-entropy, `fit`, and the `final test_accuracy=` line.
After minitrain.distributed.init() (the CLI's --distributed) the session trains data-parallel
and batch_size is the global batch."""
from .. import distributed, nn, optim
from ..data import ArrayDataset, DataLoader
from .loop import fit
from .session import TrainingSession


def train_classifier(model, data, input_shape, *, epochs, batch_size, lr, weight_decay, device="cpu",
                     seed=0, out=None, max_steps=None, progress=True, resume=False, overwrite=False):
    """Train `model` on `data` (a data.Split), print `final test_accuracy=<value>` and return it."""
    loader = DataLoader(ArrayDataset(data.x_train, data.y_train), batch_size, shuffle=True, seed=seed)
    total = epochs * min(len(loader), max_steps or len(loader))
    warmup = max(1, total // 20)
    schedule = optim.LinearWarmup(warmup, optim.CosineLR(max(1, total - warmup)))
    session = TrainingSession(model, nn.CrossEntropyLoss(),
                              optim.AdamW(lr, weight_decay=weight_decay, schedule=schedule),
                              input_shape=input_shape, device=device, data_parallel=distributed.world() is not None)
    history = fit(session, loader, epochs=epochs, test=(data.x_test, data.y_test), out_dir=out,
                  progress=progress, max_steps=max_steps, resume=resume, overwrite=overwrite)
    accuracy = history[-1]["test_accuracy"]
    print(f"final test_accuracy={accuracy:.4f}")
    return accuracy
