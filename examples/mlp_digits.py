"""Train a 2-layer MLP on the 8x8 digits with plain SGD, through the graph API alone.

It shows the engine's moving parts without the training front end: a forward Graph, the
gradient graph built by autodiff, a scheduled plan run by the Executor, and an SGD update in
NumPy.  The parameters are fed as graph inputs, so each step is a pure function of its feeds.
"""
import argparse

import numpy as np

from minitrain import Executor, Graph
from minitrain.autodiff import build_gradient_graph
from minitrain.data import load_digits
from minitrain.scheduler import schedule


def build_mlp(hidden):
    """Forward graph: x (N, 64) -> Gemm -> Relu -> Gemm -> logits -> mean cross-entropy."""
    g = Graph(name="mlp_digits")
    g.add_input("x", np.float32, ("N", 64))
    g.add_input("labels", np.int64, ("N",))
    for name, shape in (("w1", (hidden, 64)), ("b1", (hidden,)), ("w2", (10, hidden)), ("b2", (10,))):
        g.add_input(name, np.float32, shape)
    h = g.add_node("Relu", [g.add_node("Gemm", ["x", "w1", "b1"], attrs={"transB": 1})])
    logits = g.add_node("Gemm", [h, "w2", "b2"], ["logits"], attrs={"transB": 1})
    g.add_node("SoftmaxCrossEntropyLoss", [logits, "labels"], ["loss", ""])
    g.outputs = ["logits", "loss"]
    return g


def init_params(hidden, rng):
    """PyTorch's default Linear init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    def uniform(shape, fan_in):
        bound = 1 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)
    return {"w1": uniform((hidden, 64), 64), "b1": uniform((hidden,), 64),
            "w2": uniform((10, hidden), hidden), "b2": uniform((10,), hidden)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="execution provider")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    data = load_digits()
    x_train, x_test = data.x_train.reshape(-1, 64), data.x_test.reshape(-1, 64)
    forward = build_mlp(args.hidden)
    params = init_params(args.hidden, rng)
    train_graph, grads = build_gradient_graph(forward, "loss", list(params))
    train = Executor(schedule(train_graph, ["loss"] + [grads[p] for p in params], args.device))
    predict = Executor(schedule(forward, ["logits"], args.device))

    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for start in range(0, len(order), args.batch_size):
            batch = order[start:start + args.batch_size]
            out = train.run({"x": x_train[batch], "labels": data.y_train[batch], **params})
            for name in params:
                params[name] -= args.lr * out[grads[name]]
            losses.append(float(out["loss"]))
        logits = predict.run({"x": x_test, **params})["logits"]
        accuracy = float(np.mean(logits.argmax(1) == data.y_test))
        print(f"epoch {epoch + 1:3d}  train loss {np.mean(losses):.4f}  test accuracy {accuracy:.4f}")
    print(f"final test_accuracy={accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
