"""The loss/accuracy plot of a training run, as a PNG (needs matplotlib: an optional extra)."""


def plot_metrics(history, path):
    """Plot train/test loss and accuracy (or MSE) per epoch into `path`.  Returns the path, or
    None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    epochs = [r["epoch"] for r in history]
    accuracy = [k for k in ("train_accuracy", "test_accuracy") if k in history[0]]
    fig, axes = plt.subplots(1, 2 if accuracy else 1, figsize=(10 if accuracy else 5, 3.5), squeeze=False)
    for key in ("train_loss", "test_loss"):
        if key in history[0]:
            axes[0][0].plot(epochs, [r[key] for r in history], marker="o", label=key.replace("_", " "))
    axes[0][0].set(xlabel="epoch", ylabel="loss", yscale="log")
    axes[0][0].legend()
    if accuracy:
        for key in accuracy:
            axes[0][1].plot(epochs, [r[key] for r in history], marker="o", label=key.replace("_", " "))
        axes[0][1].set(xlabel="epoch", ylabel="accuracy")
        axes[0][1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
