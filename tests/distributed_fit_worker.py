"""The fit() run that tests/test_distributed_fit.py moves between world sizes: a float64 MLP
(no Dropout, no BatchNorm, so that N ranks on the shares of each global batch train exactly as
one process on the whole batches) trained with SGD-momentum for EPOCHS epochs (the total) in the
run folder OUT.

    python distributed_fit_worker.py OUT EPOCHS fresh|resume RESULT.json [--distributed] [--dropout]

With --distributed (under mpiexec) it joins the MPI world and trains data-parallel; --dropout
puts a Dropout layer in the MLP (each rank draws its own masks).  Rank 0 writes the final parameters, the history fit returned and the samples each rank trained on to
RESULT.json."""
import json
import sys

import numpy as np

import minitrain
from minitrain import distributed, nn
from minitrain.data import ArrayDataset, DataLoader
from minitrain.optim import SGD
from minitrain.training import TrainingSession, fit

TRAIN, TEST, GLOBAL_BATCH = 40, 8, 8


class RecordingDataset(ArrayDataset):
    """An ArrayDataset that keeps the indices of the samples it served."""

    def __init__(self, *arrays):
        super().__init__(*arrays)
        self.served = []

    def batch(self, indices):
        self.served.extend(int(i) for i in indices)
        return super().batch(indices)


def train(out_dir, epochs, resume, data_parallel=False, dropout=False):
    """fit() over the run folder `out_dir`; returns {"params", "history", "served"}, served: the
    indices each rank trained on, in rank order."""
    minitrain.random.seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((TRAIN + TEST, 6))
    y = ((x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 0.5)).astype(np.int64)
    hidden = [nn.Linear(6, 16), nn.Tanh()] + ([nn.Dropout(0.3)] if dropout else [])
    model = nn.Sequential(*hidden, nn.Linear(16, 3)).to_dtype(np.float64)
    session = TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1, momentum=0.9), input_shape=(6,),
                              data_parallel=data_parallel)
    dataset = RecordingDataset(x[:TRAIN], y[:TRAIN])
    loader = DataLoader(dataset, GLOBAL_BATCH, shuffle=True, seed=3)
    history = fit(session, loader, epochs=epochs, test=(x[TRAIN:], y[TRAIN:]), out_dir=out_dir, resume=resume,
                  progress=False)
    session.pull()
    served = distributed.allgather_object(dataset.served) if data_parallel else [dataset.served]
    return {"params": {name: p.data.tolist() for name, p in model.named_parameters()}, "history": history,
            "served": served}


def main(out_dir, epochs, mode, result_path, *flags):
    data_parallel = "--distributed" in flags
    if data_parallel:
        distributed.init()
    result = train(out_dir, int(epochs), mode == "resume", data_parallel, "--dropout" in flags)
    if distributed.is_main():
        with open(result_path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
