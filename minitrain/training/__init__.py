"""Training: TrainingSession (compiled forward + loss + backward + optimizer), and `fit`, the
epoch loop with a progress bar, a JSON-lines metrics log and a PNG plot."""
from .session import TrainingSession

__all__ = ["TrainingSession"]
