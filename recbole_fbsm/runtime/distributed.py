"""Data-parallel runs over ``torch.distributed`` with RecBole's launch settings (docs/distributed.md)."""

import logging
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from recbole_fbsm.errors import ColdStartError


def is_distributed(config):
    """True inside a rank of a data-parallel run (RecBole's ``single_spec`` is False there)."""
    return config is not None and config["single_spec"] is False


def world():
    """(rank, world size) of this process; (0, 1) outside a data-parallel run."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process():
    """Rank 0 (or no data-parallel run): the process that logs, saves and reports."""
    return world()[0] == 0


def free_port():
    """A TCP port free on this host now (tests, and ``--nproc`` without ``--port`` on a busy host)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_launch(nproc, world_size, group_offset, port):
    """The launch settings, before any process starts; returns the world size (default: nproc)."""
    world_size = world_size if world_size is not None and world_size > 0 else nproc
    if nproc < 1:
        raise ColdStartError(f"--nproc: expected a positive number of processes; got {nproc}.")
    if group_offset < 0 or group_offset + nproc > world_size:
        raise ColdStartError(
            f"--group_offset={group_offset} with --nproc={nproc}: this machine's ranks must lie in "
            f"0..{world_size - 1} (--world_size={world_size}); the machines' offsets are 0, nproc, 2*nproc, ..."
        )
    if port not in (None, "") and not (str(port).isdigit() and 0 < int(port) < 65536):
        raise ColdStartError(f"--port: expected a TCP port number (1-65535); got {port!r}.")
    return world_size


def init_process_group(settings):
    """Join the process group and fill in what RecBole's ``Config._init_device`` would (``device``, ``single_spec``,
    quiet ranks other than 0), from the final config dict's launch keys."""
    gpu_id = settings.get("gpu_id")
    gpu_id = (
        ",".join(map(str, gpu_id)) if isinstance(gpu_id, (tuple, list)) else str(gpu_id if gpu_id is not None else "")
    )
    settings["gpu_id"] = gpu_id
    local_rank = int(settings["local_rank"])
    use_cuda = bool(settings.get("use_gpu", True)) and gpu_id != "" and torch.cuda.is_available()
    if use_cuda:
        if torch.cuda.device_count() < int(settings["nproc"]):
            raise ColdStartError(
                f"nproc={settings['nproc']}: this machine shows {torch.cuda.device_count()} CUDA device(s) "
                f"(gpu_id={gpu_id!r}); one per process is needed, or run on the CPU with use_gpu=False."
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")  # N processes share the cores: runtime.threads (torch_threads: auto)
    backend = (settings.get("dist_backend") or "auto").lower()  # checked by config/schema.py
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    elif backend == "nccl" and device.type != "cuda":
        raise ColdStartError("dist_backend: nccl needs CUDA devices (set gpu_id and use_gpu), or use gloo on the CPU.")
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            rank=local_rank + int(settings.get("offset") or 0),
            world_size=int(settings["world_size"]),
            init_method=f"tcp://{settings['ip']}:{settings['port']}",
            timeout=timedelta(seconds=float(settings.get("dist_timeout") or 1800)),
        )
    settings.update(device=device, single_spec=False, dist_backend=backend)
    if dist.get_rank() != 0:
        settings.update(show_progress=False, verbose=False)


def end_process_group(together=False):
    """Leave the process group; ``together``: after every rank (gloo aborts a rank whose peer tore down first)."""
    if dist.is_available() and dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


def _collective_device():
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def broadcast_object(obj, src=0):
    """``obj`` of rank ``src`` on every rank (pickled; for small things: names, state dicts)."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=_collective_device())
    return box[0]


def gather_rows(tensors):
    """{name: every rank's tensor concatenated along dim 0 in rank order}, on every rank (a rank may lack a name or
    hold fewer rows); each on the device of this rank's tensor, else the CPU."""
    size = world()[1]
    if size == 1:
        return dict(tensors)
    ranks = [None] * size
    dist.all_gather_object(ranks, {name: tensor.cpu() for name, tensor in tensors.items()})
    names = sorted({name for held in ranks for name in held})
    home = {name: tensors[name].device if name in tensors else torch.device("cpu") for name in names}
    return {name: torch.cat([held[name] for held in ranks if name in held]).to(home[name]) for name in names}


def shard_bounds(n, rank, size):
    """This rank's contiguous block [start, stop) of n rows: blocks in rank order concatenate to 0..n."""
    return n * rank // size, n * (rank + 1) // size


def broadcast_batchnorm_stats(module):
    """Rank 0's BatchNorm running statistics on every rank before an evaluation (DDP's ``broadcast_buffers`` is off:
    F and the profiles are large constant buffers)."""
    batchnorms = (layer for layer in module.modules() if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm))
    buffers = [buffer for layer in batchnorms for buffer in layer.buffers()]
    if world()[1] > 1 and buffers:  # the same model on every rank: all take part, or none
        for buffer, value in zip(buffers, broadcast_object([buffer.cpu() for buffer in buffers])):
            buffer.copy_(value)


def launch(target, nproc, world_size, ip, port, group_offset, args):
    """Start ``nproc`` processes running ``target(local_rank, *args, launch_settings, queue)``; return the value
    rank 0 put as ``("result", value)`` (plain data: a tensor's handle dies with its process), None without rank 0.
    A rank's ``ColdStartError`` comes back as one; another failure as torch's, with the rank's traceback."""
    import torch.multiprocessing as mp

    world_size = check_launch(nproc, world_size, group_offset, port)
    if port in (None, ""):  # one machine: any free port; several: they must agree, RecBole's default
        port = free_port() if world_size == nproc else 5678
    settings = dict(world_size=int(world_size), nproc=int(nproc), ip=str(ip), port=str(port), offset=int(group_offset))
    queue = mp.get_context("spawn").SimpleQueue()
    # torch logs each rank it stops after one failed; the error raised below says what went wrong
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)
    failure = None
    try:
        mp.spawn(target, args=(*args, settings, queue), nprocs=int(nproc), join=True)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as caught:
        failure = caught
    finally:
        spawn_log.setLevel(level)
    messages = []
    while not queue.empty():
        messages.append(queue.get())
    errors = [value for kind, value in messages if kind == "error"]
    if errors:
        raise ColdStartError(errors[0]) from None
    finished = sum(kind == "done" for kind, _ in messages)
    # every rank finished its work and only then died (gloo can abort a rank while the process group is torn
    # down, "terminate called without an active exception"): the run's result stands
    if failure is not None and not (isinstance(failure, mp.ProcessExitedException) and finished == int(nproc)):
        raise failure
    return next((value for kind, value in messages if kind == "result"), None)
