"""Training: TrainingSession (compiled forward + loss + backward + optimizer), and `fit`, the
epoch loop with a progress bar, a JSON-lines metrics log and a PNG plot."""
from .loop import evaluate, fit
from .plot import plot_metrics
from .session import TrainingSession

__all__ = ["TrainingSession", "fit", "evaluate", "plot_metrics"]
