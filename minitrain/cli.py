"""The command line: `python -m minitrain train <example> [options]`,
`python -m minitrain train model.onnx --data digits|mnist1d --out DIR [options]`,
`python -m minitrain export <example> out.onnx [--checkpoint FILE]` and
`python -m minitrain gradcheck <op> --input SHAPE ... [--attr NAME=VALUE ...]`.

`train` runs examples/<example>.py (its file stem, e.g. lenet_digits) through the example's
`run(...)` function, with the common options below; each example ends by printing one line
`final test_accuracy=<value>` (or `final test_mse=<value>`).  Examples are found in ./examples
and in the examples/ folder of the source tree minitrain is installed from; an example is
named by its file stem only, never by a path.  Given an .onnx file instead (a path), `train`
trains that classifier on the built-in data set `--data` (minitrain.training.onnx_file) and writes the
trained model as <out>/<model stem>.onnx beside the checkpoint.  `export` writes an example's
model (its build_model() on inputs (N, *INPUT_SHAPE)) as an inference .onnx file, with the
parameters of a run's checkpoint or the seeded initial ones.  The ONNX commands need the
`onnx` extra.

Run folders: `--out DIR` refuses a DIR that already holds a run (metrics.jsonl, checkpoints)
unless `--resume` continues it from its checkpoint.mtc (on whichever --device this run uses)
or `--overwrite` deletes its run files and starts again.  A step whose loss is not finite
stops the run with a message; the checkpoints keep the last finished epoch.  `--profile
TRACE.json` times each node of the third training step and writes a Chrome trace.
`--precision` (fp32, tf32, bf16, fp16) is the precision of the sessions the run builds
(minitrain.autocast.precision).

`--distributed` trains data-parallel on every process of the MPI world: launch the command with
`mpiexec -n N` (the `distributed` extra puts it in the venv); with `--device cuda` each process
drives the GPU of its local rank.  `--batch-size` is then the global batch, split evenly over the
ranks; rank 0 alone prints and writes the run folder, and a run folder moves between runs of
any number of ranks, one process included (`--resume`).

A bad argument, whether argparse or the command finds it (a count below 1, a learning rate
that is not a positive number, an unknown example, a device this machine lacks, a precision
the device cannot compute in, an input or
attribute an op refuses), ends the program with the usage and one `error:` line, exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import re
import sys
import warnings

import numpy as np

from . import distributed
from .autocast import PRECISIONS, precision
from .errors import (DistributedUnavailableError, MinitrainError, PrecisionError, ProviderUnavailableError,
                     RunFolderError, TrainingDivergedError)
from .providers import get_provider
from .training.loop import PROFILE_VARIABLE

EXAMPLE_OPTIONS = ("epochs", "batch_size", "lr", "device", "seed", "out", "max_steps", "progress", "resume",
                   "overwrite")
EXAMPLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")


class UsageError(SystemExit):
    """A bad argument that the command found after parsing: `report_usage_errors` prints it as
    argparse prints its own (the usage, then `prog: error: message`) and the exit status is 2."""

    def __init__(self, message):
        super().__init__(2)
        self.message = message

    def __str__(self):
        return self.message


def report_usage_errors(parser, command, *args):
    """command(*args), with a UsageError it raises printed against `parser`'s usage."""
    try:
        return command(*args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        raise


def whole_number(minimum):
    """An argparse type: an integer >= minimum."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    parse.__name__ = f"integer >= {minimum}"
    return parse


def real_number(minimum, *, inclusive):
    """An argparse type: a finite number > minimum (>= when inclusive)."""
    bound = f"{'>=' if inclusive else '>'} {minimum:g}"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text}")
        return value
    parse.__name__ = f"number {bound}"
    return parse


COUNT = whole_number(1)
SEED = whole_number(0)
POSITIVE = real_number(0.0, inclusive=False)
NON_NEGATIVE = real_number(0.0, inclusive=True)


def unwritable_file(option, path):
    """Why `path`, a file to be written, is refused before any work is done (None: it is not)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{option} {path}: a folder, not a file"
    return None if os.path.isdir(folder) else f"{option} {path}: the folder {folder} does not exist"


def add_training_options(parser, defaults=None):
    """The options every example and `train` accept (defaults come from the example)."""
    defaults = defaults or {}
    parser.add_argument("--epochs", type=COUNT, default=defaults.get("epochs"), help="passes over the train set")
    parser.add_argument("--batch-size", type=COUNT, default=defaults.get("batch_size"),
                        help="samples per step (with --distributed: over all ranks together)")
    parser.add_argument("--lr", type=POSITIVE, default=defaults.get("lr"), help="peak learning rate")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="execution provider")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                        help="fp32, tf32 (CUDA's TF32 tensor cores), bf16 or fp16 (autocast, CUDA only; fp16 with "
                             "dynamic loss scaling)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of initialisation, shuffling and dropout")
    parser.add_argument("--out", default=None, help="run folder: metrics.jsonl, metrics.png, checkpoint.mtc and "
                                                     "checkpoint-best.mtc; refused when it holds a run already")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    runs.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    parser.add_argument("--max-steps", type=COUNT, default=None, help="cap the steps per epoch (smoke runs)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--profile", metavar="TRACE.json", default=None,
                        help="time every node of the third training step (GPU time on CUDA) and write a Chrome "
                             "trace (chrome://tracing, ui.perfetto.dev)")
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the processes of `mpiexec -n N` (each a GPU of its host with "
                             "--device cuda); --batch-size is the global batch, split evenly over the ranks")
    return parser


def _check_run_options(parser, args):
    if (args.resume or args.overwrite) and not args.out:
        parser.error(f"--{'resume' if args.resume else 'overwrite'} needs --out, the run folder")
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out {args.out}: a file, not a run folder")
    refused = args.profile and unwritable_file("--profile", args.profile)
    if refused:
        parser.error(refused)


def call_example(run, args):
    """run(**options) of an example; a refused run folder or a device this machine lacks is a
    UsageError, a diverged run ends the program with its message (exit status 1)."""
    saved = os.environ.get(PROFILE_VARIABLE)
    if getattr(args, "profile", None):
        os.environ[PROFILE_VARIABLE] = os.path.abspath(args.profile)
    try:
        with precision(getattr(args, "precision", "fp32")):
            return run(**{k: getattr(args, k) for k in EXAMPLE_OPTIONS})
    except PrecisionError as e:
        raise UsageError(f"--precision {args.precision}: {e}") from None
    except RunFolderError as e:
        raise UsageError(str(e)) from None
    except ProviderUnavailableError as e:
        raise UsageError(f"--device {args.device}: {e}") from None
    except TrainingDivergedError as e:
        raise SystemExit(f"error: {e}") from None
    finally:
        if saved is None:
            os.environ.pop(PROFILE_VARIABLE, None)
        else:
            os.environ[PROFILE_VARIABLE] = saved


def run_example(run, description, defaults, argv=None):
    """The `__main__` of an example: parse the common options and call run(**options)."""
    parser = add_training_options(argparse.ArgumentParser(description=description), defaults)
    args = parser.parse_args(argv)
    _check_run_options(parser, args)
    return report_usage_errors(parser, call_distributed if args.distributed else call_example, run, args)


def example_folders():
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(os.getcwd(), "examples"), os.path.join(os.path.dirname(here), "examples")]


def available_examples():
    names = set()
    for folder in example_folders():
        if os.path.isdir(folder):
            names.update(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))
    return sorted(names)


def load_example(name):
    """Import examples/<name>.py as a module; `name` is a file stem, not a path."""
    if not EXAMPLE_NAME.fullmatch(name):
        raise UsageError(f"example {name!r}: an example is named by its file stem, such as lenet_digits; "
                         f"available: {', '.join(available_examples()) or 'none found'}")
    for folder in example_folders():
        path = os.path.join(folder, f"{name}.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(f"minitrain_example_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if not hasattr(module, "run"):
                raise UsageError(f"example {name!r} ({path}) defines no run() function")
            return module
    raise UsageError(f"unknown example {name!r}; available: {', '.join(available_examples()) or 'none found'}")


# --------------------------------------------------------------------------- ONNX
def onnx_training(parser, args):
    """run(**options) that trains the .onnx file args.example on args.data; refused, with the
    parser's usage, without --data or --out."""
    from .errors import OnnxImportError, ShapeError
    from .training.onnx_file import DATASETS, train_onnx
    if not args.data:
        parser.error(f"training an .onnx model needs --data, the data set ({', '.join(DATASETS)})")
    if not args.out:
        parser.error("training an .onnx model needs --out, the run folder that receives the trained model")
    if not os.path.isfile(args.example):
        raise UsageError(f"no such ONNX file {args.example!r}")

    def run(**options):
        try:
            return train_onnx(args.example, args.data, **options)
        except ImportError as e:
            raise SystemExit(f"error: {e}") from None
        except (OnnxImportError, ShapeError) as e:
            raise UsageError(str(e)) from None
    return run


def export_command(args):
    """Write the example's model as an inference .onnx file."""
    from . import random as mt_random
    from .checkpoint import read
    from .errors import CheckpointError
    module = load_example(args.example)
    if not hasattr(module, "build_model") or not hasattr(module, "INPUT_SHAPE"):
        raise UsageError(f"example {args.example!r} defines no build_model() and INPUT_SHAPE to export")
    from .onnx import save
    from .onnx._backend import require_onnx
    try:
        require_onnx()
    except ImportError as e:
        raise SystemExit(f"error: {e}") from None
    refused = unwritable_file("output", args.output)
    if refused:
        raise UsageError(refused)
    mt_random.seed(args.seed)
    model = module.build_model()
    if args.checkpoint:
        try:
            _, arrays, _ = read(args.checkpoint)
        except CheckpointError as e:
            raise UsageError(str(e)) from None
        try:
            model.check_state_dict(arrays)
        except (ValueError, TypeError, KeyError) as e:
            raise UsageError(f"{args.checkpoint} does not hold a model of example {args.example!r}: "
                             f"{e}") from None
        model.load_state_dict(arrays)
    save(model, args.output, input_shape=module.INPUT_SHAPE)
    print(f"wrote {args.output}: input 'input' (N, {', '.join(map(str, module.INPUT_SHAPE))}), "
          f"{'parameters of ' + args.checkpoint if args.checkpoint else f'initial parameters (seed {args.seed})'}")
    return 0


# --------------------------------------------------------------------------- gradcheck
INPUT_FORMS = '"2,3,8,8" (a shape), "int:SHAPE:HIGH", "scalar:VALUE", "true", "false" or "none"'


def parse_input(text, rng):
    """An input from the command line: a shape "2,3,8,8" (float64 normal), "int:SHAPE:HIGH"
    (int64 in [0, HIGH)), "scalar:VALUE" (float64), "true"/"false" (bool scalar), or "none"
    (an absent optional input).  Anything else is a UsageError."""
    lowered = text.lower()
    if lowered == "none":
        return None
    if lowered in ("true", "false"):
        return np.array(lowered == "true")
    if lowered.startswith("scalar:"):
        value = text.split(":", 1)[1]
        try:
            return np.array(float(value))
        except ValueError:
            raise UsageError(f"--input {text!r}: {value!r} is not a number") from None
    if lowered.startswith("int:"):
        parts = text.split(":")
        if len(parts) != 3 or not parts[2].isdigit() or int(parts[2]) < 1:
            raise UsageError(f"--input {text!r}: expected int:SHAPE:HIGH with an integer HIGH >= 1, "
                             f"such as int:4:10")
        return rng.integers(0, int(parts[2]), _shape(parts[1], text), dtype=np.int64)
    return rng.standard_normal(_shape(text, text))


def _shape(text, spec):
    """A shape written "2,3,8", "2x3x8" or "(2, 3, 8)"; "" or "()" is a scalar's."""
    body = text.strip("()[] ").rstrip(",")
    if not body:
        return ()
    dims = [d.strip() for d in body.replace("x", ",").split(",")]
    if not all(d.isdigit() for d in dims):
        raise UsageError(f"--input {spec!r}: expected {INPUT_FORMS}")
    return tuple(int(d) for d in dims)


def parse_attr(op_type, domain, text):
    """NAME=VALUE converted by the kind the op's schema declares for NAME."""
    from .ops import get_schema
    if "=" not in text:
        raise UsageError(f"--attr expects NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    spec = get_schema(op_type, domain, None).attrs.get(name)
    if spec is None:
        return name, value             # the op's own check names the unknown attribute
    convert = {"int": int, "float": float, "string": str,
               "ints": lambda v: [int(x) for x in v.split(",") if x],
               "floats": lambda v: [float(x) for x in v.split(",") if x]}[spec.kind]
    try:
        return name, convert(value)
    except ValueError:
        raise UsageError(f"--attr {text!r}: {op_type}'s {name} is of kind {spec.kind}, {value!r} is not") from None


def input_indices(text):
    """An argparse type: input indices "0,1"."""
    pieces = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in pieces):
        raise argparse.ArgumentTypeError(f"expected input indices such as 0,1, got {text!r}")
    return [int(p) for p in pieces]


def gradcheck_command(args):
    """Check the op's gradient: 0 when it matches, 1 when it does not; a UsageError for an op,
    input or attribute the op refuses, and a line for each output without a gradient."""
    from .gradcheck import NoGradientWarning, gradcheck
    rng = np.random.default_rng(args.seed)
    inputs = [parse_input(t, rng) for t in args.input]
    try:
        attrs = dict(parse_attr(args.op, args.domain, a) for a in args.attr)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoGradientWarning)
            results = gradcheck(args.op, inputs, attrs, domain=args.domain, wrt=args.wrt, eps=args.eps,
                                rtol=args.rtol, atol=args.atol, seed=args.seed, outputs=args.output or None,
                                provider=args.provider)
    except AssertionError as e:
        print(f"gradcheck {args.op}: FAILED\n{e}")
        return 1
    except ProviderUnavailableError as e:
        raise UsageError(f"--provider {args.provider}: {e}") from None
    except (MinitrainError, ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    for w in caught:
        if issubclass(w.category, NoGradientWarning):
            print(f"gradcheck {w.message}")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    for i, (analytic, numeric) in results.items():
        err = float(np.max(np.abs(np.asarray(analytic) - numeric))) if numeric.size else 0.0
        print(f"gradcheck {args.op}: input #{i} shape {numeric.shape} ok, max abs error {err:.2e}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m minitrain", description="minitrain's command line")
    sub = parser.add_subparsers(dest="command", required=True)
    train = add_training_options(sub.add_parser("train", help="run a training example, or train an .onnx model"))
    train.add_argument("example", help=f"the example's file stem ({', '.join(available_examples())}), "
                                       "or an .onnx file to train on --data")
    train.add_argument("--data", choices=("digits", "mnist1d"), default=None,
                       help="the built-in data set an .onnx model trains on")
    export = sub.add_parser("export", help="write an example's model as an .onnx file")
    export.add_argument("example", help="the example's file stem")
    export.add_argument("output", help="the .onnx file to write")
    export.add_argument("--checkpoint", default=None, help="a checkpoint of a run of this example (checkpoint.mtc): "
                                                           "its parameters; default: the initial ones")
    export.add_argument("--seed", type=SEED, default=0, help="seed of the initial parameters")
    check = sub.add_parser("gradcheck", help="finite-difference check of one op's gradient")
    check.add_argument("op", help="op type, e.g. Conv")
    check.add_argument("--input", action="append", default=[], metavar="SPEC",
                       help='one per op input: "2,3,8,8", "int:4:10", "scalar:0.3", "true", "none"')
    check.add_argument("--shape", dest="input", action="append", help="alias of --input")
    check.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE", help="e.g. pads=1,1,1,1")
    check.add_argument("--domain", default="", help='"" (ONNX) or com.microsoft')
    check.add_argument("--output", action="append", default=[], help="outputs to check (default: all float)")
    check.add_argument("--wrt", type=input_indices, default=None, help="input indices to check, e.g. 0,1")
    check.add_argument("--eps", type=POSITIVE, default=1e-6, help="finite-difference step")
    check.add_argument("--rtol", type=NON_NEGATIVE, default=1e-4)
    check.add_argument("--atol", type=NON_NEGATIVE, default=1e-6)
    check.add_argument("--seed", type=SEED, default=0)
    check.add_argument("--provider", choices=("cpu", "cuda"), default="cpu",
                       help="where the gradient runs (cuda: also compared with the CPU kernels)")
    args = parser.parse_args(argv)
    if args.command == "gradcheck":
        if not args.input:
            check.error("gradcheck needs at least one --input")
        return report_usage_errors(check, gradcheck_command, args)
    if args.command == "export":
        return report_usage_errors(export, export_command, args)
    _check_run_options(train, args)
    if args.data and not args.example.endswith(".onnx"):
        train.error("--data trains an .onnx model; an example brings its own data")
    report_usage_errors(train, train_command, train, args)
    return 0


def train_command(parser, args):
    """Train the example or the .onnx file args.example."""
    run = onnx_training(parser, args) if args.example.endswith(".onnx") else load_example(args.example).run
    return call_distributed(run, args) if args.distributed else call_example(run, args)


def call_distributed(run, args):
    """call_example on every rank of the MPI world (`--distributed`): the sessions the run
    builds train data-parallel (they find the world), each rank on the GPU of its local rank
    with --device cuda.  Ranks other than 0 print nothing; the errors every rank meets alike
    (a refused argument or run folder, a device missing on some rank, a diverged run) end every
    rank, reported once by rank 0; any other error aborts the world (minitrain.distributed)."""
    try:
        world = distributed.init()
    except DistributedUnavailableError as e:
        raise UsageError(f"--distributed: {e}") from None
    try:
        if args.batch_size and args.batch_size % world.size:
            raise UsageError(f"--batch-size {args.batch_size} is the global batch and must split evenly over the "
                             f"{world.size} ranks")
        if args.device == "cuda":
            _check_device_on_every_rank(args.device)
        with contextlib.ExitStack() as quiet:
            if world.rank:
                quiet.enter_context(contextlib.redirect_stdout(quiet.enter_context(open(os.devnull, "w"))))
            return call_example(run, args)
    except SystemExit as e:
        if world.rank == 0 or e.code in (0, None):
            raise
        raise SystemExit(e.code if isinstance(e.code, int) else 1) from None


def _check_device_on_every_rank(device):
    """A UsageError on every rank when `device` is unavailable on any rank (each rank's GPU is
    that of its local rank, unless MINITRAIN_CUDA_DEVICE says otherwise)."""
    try:
        get_provider(device)
        problem = None
    except ProviderUnavailableError as e:
        problem = str(e)
    problems = [f"rank {rank}: {p}" for rank, p in enumerate(distributed.allgather_object(problem)) if p]
    if problems:
        raise UsageError(f"--device {device}: {'; '.join(problems)}")


if __name__ == "__main__":
    sys.exit(main())
