"""The exported model families' sessions and what their plans run off the device.

`exported_session` builds a family's TrainingSession from its ONNX export as a user does (at
INPUT, or at the shape bench/model_families.py exports: BENCH_INPUT);
`off_device` lists the steps of a plan that would stop its CUDA Graph capture or cost a host
round trip per step: nodes on another provider than the device and the copies between them.
`cuda_blockers` says what would stop the capture of each family's plans on CUDA (it runs
without a GPU where pycuda is stubbed: stubbed_cuda.py).
"""
import io

INPUT = (4, 3, 8, 8)
BENCH_INPUT = (64, 3, 64, 64)
MODES = ("training", "eval")


def exported_session(family, mode, device, opset=17, input_shape=INPUT, **kwargs):
    """A session training `family` from its export at `input_shape` in `mode` ("training" or
    "eval"); U-Net's targets are per pixel."""
    import onnx
    import torch

    from minitrain import nn, optim
    from minitrain.training import TrainingSession
    from model_families import build
    model = build(family)
    model.train(mode == "training")
    f = io.BytesIO()
    export_mode = torch.onnx.TrainingMode.TRAINING if mode == "training" else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, (torch.zeros(input_shape),), f, training=export_mode, opset_version=opset, dynamo=False,
                      do_constant_folding=False)
    if family == "unet":
        kwargs.setdefault("target_shape", tuple(input_shape[2:]))
    return TrainingSession.from_onnx(onnx.load_from_string(f.getvalue()), nn.CrossEntropyLoss(), optim.SGD(0.05),
                                     device=device, **kwargs)


def off_device(plan, device):
    """'op_type node' of each step that runs on another provider than `device`, or copies."""
    return [f"{s.node.op_type} {s.node.name}" for s in plan.steps
            if s.provider != device or s.node.op_type in ("MemcpyFromHost", "MemcpyToHost")]


def cuda_blockers(families, input_shape=INPUT):
    """family/mode/plan -> (steps off the device, capture_blocker's reason or None), the
    families exported at `input_shape`."""
    from minitrain.providers import get_provider
    from minitrain.providers.cuda.capture.step_graph import capture_blocker
    provider = get_provider("cuda")
    found = {}
    for family in families:
        for mode in MODES:
            session = exported_session(family, mode, "cuda", input_shape=input_shape)
            for what, plan in (("train", session.train_plan), ("eval", session._eval_executor(True)[0].plan)):
                found[f"{family}/{mode}/{what}"] = (off_device(plan, "cuda"), capture_blocker(plan, provider))
    return found
