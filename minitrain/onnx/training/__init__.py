"""onnxruntime.training.api in minitrain: run the four artifacts that
onnxruntime.training.artifacts.generate_artifacts writes (training, eval and optimizer models,
checkpoint) with minitrain's kernels.  An ONNX Runtime training loop switches by its import:

    from minitrain.onnx.training import CheckpointState, Module, Optimizer, LinearLRScheduler

    state = CheckpointState.load_checkpoint("artifacts/checkpoint")
    module = Module("artifacts/training_model.onnx", state, "artifacts/eval_model.onnx", device="cpu")
    optimizer = Optimizer("artifacts/optimizer_model.onnx", module)
    loss = module(x, labels); optimizer.step(); module.lazy_reset_grad()
    CheckpointState.save_checkpoint(state, "checkpoint", include_optimizer_state=True)

Checkpoints are ONNX Runtime's files, so either runtime resumes the other's.  Needs the `onnx`
package (and `flatbuffers` to write checkpoints): `pip install minitrain[ort]`."""
from .checkpoint_state import CheckpointState, Parameter, Parameters, Properties
from .module import Module
from .optimizer import LinearLRScheduler, Optimizer

__all__ = ["CheckpointState", "Parameter", "Parameters", "Properties", "Module", "Optimizer", "LinearLRScheduler"]
