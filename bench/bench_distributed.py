"""Data-parallel training step: minitrain on 1 and 2 ranks, beside PyTorch's DistributedDataParallel.

For LeNet-5 and the 1D CNN of cases.MODEL_CASES, one step = forward, mean softmax cross-entropy,
backward, gradients averaged over the ranks, plain SGD update.  Each world is started by mpiexec,
one process per rank (per GPU with --device cuda, GPU = local rank); in each, minitrain's
data-parallel session (an all-reduce per gradient bucket in the step, NCCL on a second CUDA
stream that overlaps the backward pass, MPI on the CPU; a plain
session on one rank) and torch's DistributedDataParallel (NCCL on CUDA, gloo on the CPU; a plain
model on one rank, initialised from the MPI rank and size with a TCP rendezvous on localhost)
train the same model from the same weights on the same batches, device-resident.  Their
first-step losses are checked to agree, then they are timed in interleaved rounds: a barrier,
STEPS steps queued, a synchronize; a round's time per step is the slowest rank's, the figure the
median over rounds.

    --device cuda: 1 GPU against 2 GPUs at each batch of --batches per GPU (default 256,1024);
                   the issue's targets are printed beside the figures.
    --device cpu:  1 process x 2 threads against 2 ranks x 1 thread, at each --batches as the
                   global batch (default 256; each of the 2 ranks trains on half).

    --buckets 1,2,3: on 2 ranks, minitrain also with each of these counts of gradient buckets
                   (TrainingSession's gradient_buckets; its default is what the tables above use),
                   timed in the same rounds, and the all-reduce time that each leaves exposed
                   (exposed_all_reduce_seconds): on CUDA what the device waits for the collective
                   stream, the part of the all-reduces that the backward pass does not hide; on
                   the CPU, where the buckets are summed in turn, the whole all-reduce.

    --tf32:        on CUDA, float32 GEMMs and convolutions may use TF32 on both sides (PyTorch's
                   allow_tf32 flags and minitrain's use_tf32; PyTorch's own default allows it in
                   cuDNN convolutions); without it both run strict FP32.

    python bench/bench_distributed.py --device cuda [--steps 100] [--rounds 5] [--batches 256,1024] [--buckets 1,2,3]
                                      [--tf32] [--out FILE]
    python bench/bench_distributed.py --device cpu [--steps 20] [--rounds 3] [--batches 256] [--out FILE]

Writes bench/results/distributed_{cuda,cpu}.md (distributed_cuda_tf32.md with --tf32) by default,
with the device names.  Needs the `distributed` extra (mpiexec and mpi4py); torch is optional on the CPU (its columns read n/a).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import markdown_table, optional_torch, report, threads_from_argv  # noqa: E402

THREADS = threads_from_argv(default=1)     # a worker's threads, set before numpy loads

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import minitrain  # noqa: E402
from minitrain import distributed, nn, optim  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402
from minitrain.training.data_parallel import DEFAULT_BUCKETS  # noqa: E402

from cases import MODEL_CASES, make_inputs, with_batch  # noqa: E402
from train import minitrain_model, torch_model  # noqa: E402

RESULT = "RESULT "      # prefix of the lines a world's rank 0 prints for the driver
TARGET_SCALING, TARGET_VS_DDP = 1.8, 0.35     # at batch 1024 per GPU: 2-GPU / 1-GPU throughput, 2-GPU step / DDP's
TF32 = "--tf32" in sys.argv


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def mpiexec():
    """mpiexec beside the interpreter (the venv of the `distributed` extra), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


# --------------------------------------------------------------------------- one world (every rank)
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_world(torch, world, device):
    """torch.distributed on the MPI world's ranks (rendezvous over TCP on localhost); None on one
    rank, where the plain model is the baseline."""
    if world.size == 1:
        return None
    port = distributed.broadcast_object(free_port() if world.rank == 0 else None)
    torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo",
                                         init_method=f"tcp://127.0.0.1:{port}", rank=world.rank,
                                         world_size=world.size)
    return torch.distributed


def minitrain_runner(case, device, world, buckets=None):
    """(model, step, synchronize, exposed) of minitrain's session on this rank's batch, its
    gradients all-reduced in `buckets` buckets (None: the session's default); exposed() measures
    exposed_all_reduce_seconds."""
    minitrain.random.seed(0)
    model = minitrain_model(case)
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(case.lr), input_shape=case.input_shape[1:],
                              device=device, data_parallel=world.size > 1, gradient_buckets=buckets,
                              use_tf32=TF32 and device == "cuda")
    provider = session._provider
    data = make_inputs(case, seed=world.rank)
    x, y = provider.from_numpy(data["x"]), provider.from_numpy(data["labels"])
    return (model, (lambda: session.train_step(x, y, wait=False)), provider.synchronize,
            lambda: exposed_all_reduce_seconds(session, x, y))


def exposed_all_reduce_seconds(session, x, y, runs=3):
    """Seconds per step that the step spends on the gradient all-reduces instead of compute: the
    StartAllReduce and WaitAllReduce nodes of a step run node by node with time markers (median
    over `runs` steps).  On CUDA that is the device's wait for the collective stream (starting
    takes no device time); on the CPU, where StartAllReduce sums at once, the whole all-reduce."""
    waits = []
    for _ in range(runs):
        float(session.profile_step(x, y))
        waits.append(sum(duration for _, op_type, _, _, duration in session._profiled.profiler.last_run
                         if op_type in ("StartAllReduce", "WaitAllReduce")))
    return statistics.median(waits)


def torch_runner(torch, case, device, world, model):
    """(step, synchronize) of PyTorch (DDP on several ranks) from `model`'s weights."""
    where = torch.device(f"cuda:{world.local_rank}" if device == "cuda" else "cpu")
    net = torch_model(torch, case, model).to(where)
    if world.size > 1:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[world.local_rank] if device == "cuda" else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=case.lr)
    data = make_inputs(case, seed=world.rank)
    x, y = torch.from_numpy(data["x"]).to(where), torch.from_numpy(data["labels"]).to(where)

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step, (torch.cuda.synchronize if device == "cuda" else (lambda: None))


def timed_rounds(runners, steps, rounds):
    """name -> median over rounds of the slowest rank's seconds per step, the runners
    (name -> (step, synchronize)) interleaved round by round."""
    per_round = {name: [] for name in runners}
    for name, (step, synchronize) in runners.items():
        for _ in range(5):              # compilation, capture (minitrain), cudnn autotuning (torch)
            step()
        synchronize()
    for _ in range(rounds):
        for name, (step, synchronize) in runners.items():
            distributed.barrier()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            synchronize()
            elapsed = (time.perf_counter() - start) / steps
            per_round[name].append(max(distributed.allgather_object(elapsed)))
    return {name: statistics.median(times) for name, times in per_round.items()}


def device_name(device, world, torch):
    if device == "cuda":
        return torch.cuda.get_device_name(world.local_rank) if torch else f"GPU {world.local_rank}"
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return models[0] if models else "CPU"


def worker(device, steps, rounds, batches, threads, bucket_counts):
    """Every rank of one world: time each model at each batch; rank 0 prints RESULT lines."""
    world = distributed.init()       # minitrain's CUDA provider then takes the GPU of the local rank
    torch = optional_torch(threads)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = TF32
        torch.backends.cudnn.benchmark = True
        torch.cuda.set_device(world.local_rank)
    ddp = torch_world(torch, world, device) if torch else None
    names = distributed.allgather_object(device_name(device, world, torch))
    for base in MODEL_CASES:
        for batch in batches:
            per_rank = batch if device == "cuda" else batch // world.size
            case = with_batch(base, per_rank)
            model, step, synchronize, exposed = minitrain_runner(case, device, world)
            runners = {"minitrain": (step, synchronize)}
            exposure = {"minitrain": exposed}
            if world.size > 1:
                for count in bucket_counts:
                    _, step, synchronize, exposed = minitrain_runner(case, device, world, count)
                    runners[f"minitrain {count} buckets"] = (step, synchronize)
                    exposure[f"minitrain {count} buckets"] = exposed
            if torch:
                runners["torch"] = torch_runner(torch, case, device, world, model)     # copies the initial weights
            first = {name: float(run()) for name, (run, _) in runners.items()}
            if torch:
                tolerance = 1e-2 if TF32 else 1e-4
                assert abs(first["minitrain"] - first["torch"]) <= tolerance * max(1.0, abs(first["torch"])), first
            times = timed_rounds(runners, steps, rounds)
            exposed = {name: measure() for name, measure in exposure.items()} if world.size > 1 else {}
            if world.rank == 0:
                print(RESULT + json.dumps({"model": base.name.rsplit("_b", 1)[0], "ranks": world.size,
                                           "threads": threads, "batch_per_rank": per_rank,
                                           "global_batch": per_rank * world.size, "first_loss": first,
                                           "seconds": times, "exposed_all_reduce": exposed, "devices": names,
                                           "torch": torch.__version__ if torch else None}), flush=True)
    if ddp:
        ddp.destroy_process_group()


# --------------------------------------------------------------------------- driver
def run_world(device, ranks, threads, steps, rounds, batches, bucket_counts):
    """The RESULT records of one world, started by mpiexec."""
    command = [mpiexec(), "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker", "--device", device,
               "--threads", str(threads), "--steps", str(steps), "--rounds", str(rounds),
               "--batches", ",".join(map(str, batches)), "--buckets", ",".join(map(str, bucket_counts))] \
        + (["--tf32"] if TF32 else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    print("running:", " ".join(command[1:4]), "...", flush=True)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return [json.loads(line[len(RESULT):]) for line in result.stdout.splitlines() if line.startswith(RESULT)]


def samples_per_s(record, framework):
    seconds = record["seconds"].get(framework)
    return None if seconds is None else record["global_batch"] / seconds


def fmt_ms(seconds):
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f}"


def fmt_rate(rate):
    return "n/a" if rate is None else f"{rate:,.0f}"


def tables(device, records):
    """The step table (one row per world) and the scaling table (one row per model and batch)."""
    rows = []
    for r in records:
        ours, theirs = r["seconds"]["minitrain"], r["seconds"].get("torch")
        rows.append([r["model"], f"{r['ranks']} x {r['threads']} thread(s)" if device == "cpu" else r["ranks"],
                     r["batch_per_rank"], r["global_batch"], fmt_ms(ours), fmt_rate(samples_per_s(r, "minitrain")),
                     fmt_ms(theirs), fmt_rate(samples_per_s(r, "torch")),
                     "n/a" if theirs is None else f"{ours / theirs:.2f}"])
    unit = "GPUs" if device == "cuda" else "ranks"
    header = ["model", unit if device == "cuda" else "processes", "batch per rank", "global batch",
              "minitrain ms/step", "minitrain samples/s", "torch ms/step", "torch samples/s", "minitrain/torch step"]
    scaling = []
    key = (lambda r: (r["model"], r["batch_per_rank"])) if device == "cuda" else (lambda r: (r["model"], r["global_batch"]))
    groups = {}
    for r in records:
        groups.setdefault(key(r), {})[r["ranks"]] = r
    for (model, batch), by_ranks in groups.items():
        one, two = by_ranks.get(1), by_ranks.get(2)
        if not (one and two):
            continue
        row = [model, batch]
        for framework in ("minitrain", "torch"):
            a, b = samples_per_s(one, framework), samples_per_s(two, framework)
            row.append("n/a" if a is None or b is None else f"{b / a:.2f}")
        vs_ddp = two["seconds"].get("torch")
        row.append("n/a" if vs_ddp is None else f"{two['seconds']['minitrain'] / vs_ddp:.2f}")
        scaling.append(row)
    scaling_header = ["model", "batch per GPU" if device == "cuda" else "global batch",
                      f"minitrain 2/1 {unit} throughput", f"torch 2/1 {unit} throughput",
                      "minitrain 2-rank step / torch's"]
    return markdown_table(header, rows), markdown_table(scaling_header, scaling)


def bucket_table(records, bucket_counts):
    """minitrain's step on several ranks per count of gradient buckets (the default first), each
    with the all-reduce time it leaves exposed: "step ms (exposed ms)"."""
    names = ["minitrain"] + [f"minitrain {count} buckets" for count in bucket_counts]
    rows = [[r["model"], r["ranks"], r["batch_per_rank"],
             *(f"{fmt_ms(r['seconds'].get(name))} ({fmt_ms(r['exposed_all_reduce'].get(name))})" for name in names)]
            for r in records if r["ranks"] > 1]
    header = ["model", "ranks", "batch per rank", f"default ({DEFAULT_BUCKETS} buckets)",
              *(f"{count} bucket{'s' if count > 1 else ''}" for count in bucket_counts)]
    return markdown_table(header, rows)


def main():
    device = arg("--device", "cpu")
    steps, rounds = arg("--steps", 100 if device == "cuda" else 20), arg("--rounds", 5 if device == "cuda" else 3)
    batches = [int(b) for b in arg("--batches", "256,1024" if device == "cuda" else "256").split(",")]
    bucket_counts = [int(b) for b in arg("--buckets", "").split(",") if b]
    if any(count < 1 for count in bucket_counts):
        sys.exit(f"--buckets {bucket_counts}: each count must be >= 1")
    if "--worker" in sys.argv:
        worker(device, steps, rounds, batches, THREADS, bucket_counts)
        return
    if mpiexec() is None:
        sys.exit("bench_distributed.py needs mpiexec and mpi4py: pip install -e \".[distributed]\"")
    name = f"distributed_{device}{'_tf32' if TF32 else ''}.md"
    out = arg("--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name))
    if device == "cuda":
        worlds = [(1, 1), (2, 1)]           # (ranks, threads per rank)
    else:
        worlds = [(1, 2), (2, 1)]
        if any(b % 2 for b in batches):
            sys.exit(f"--batches {batches}: on the CPU each batch is global and must split over 2 ranks")
    load = os.getloadavg()[0]
    records = [r for ranks, threads in worlds
               for r in run_world(device, ranks, threads, steps, rounds, batches, bucket_counts)]
    step_table, scaling_table = tables(device, records)
    devices = sorted({name for r in records for name in r["devices"]})
    torch_version = next((r["torch"] for r in records if r["torch"]), None)
    lines = [f"# Data-parallel training step: minitrain and PyTorch DDP on 1 and 2 "
             f"{'GPUs' if device == 'cuda' else 'CPU ranks'} ({datetime.date.today()})", "",
             f"Devices: {', '.join(devices)}; {platform.node()} ({os.cpu_count()} cores, load average {load:.1f} "
             f"at the start), Python {platform.python_version()}"
             + (f", torch {torch_version}" if torch_version else ", no torch") + ".",
             "One step: forward, mean softmax cross-entropy, backward, gradients averaged over the ranks, SGD; "
             "batches device-resident.  Time per step: the slowest rank over "
             f"{steps} queued steps, median of {rounds} interleaved rounds (bench/bench_distributed.py).",
             "CPU: 1 process x 2 threads against 2 ranks x 1 thread at the same global batch." if device == "cpu"
             else f"CUDA: {'TF32 allowed in GEMMs and convolutions' if TF32 else 'strict FP32 (no TF32)'} in both; "
                  "minitrain captures its step in a CUDA Graph, torch runs eager.",
             "", step_table, "", "Scaling from 1 to 2 ranks (throughput ratio; the step ratio beside DDP):", "",
             scaling_table, ""]
    if bucket_counts:
        lines += ["minitrain's step on 2 ranks by count of gradient buckets, ms, with (in brackets) the all-reduce "
                  "time the backward pass leaves exposed (profiled uncaptured steps; bench_distributed.py --buckets):",
                  "", bucket_table(records, bucket_counts), ""]
    if device == "cuda":
        lines += [f"Targets at batch 1024 per GPU: minitrain's 2-GPU throughput >= {TARGET_SCALING}x its 1-GPU "
                  f"throughput, and its 2-GPU step <= {TARGET_VS_DDP}x PyTorch DDP's.", ""]
    report("\n".join(lines), out)


if __name__ == "__main__":
    main()
