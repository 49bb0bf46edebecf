"""Data-parallel training with ``torch.distributed`` ("buy more GPUs", notebook 11).

Every process holds a full copy of the model and takes a different slice of each batch; after
``backward`` the gradients are averaged across processes (an all-reduce), so every copy takes
the same step — the same step as one process training on the whole batch.

Two ways to start the processes:

- ``torchrun --nproc_per_node=2 my_script.py`` sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...;
  the script calls :func:`init_distributed` and then :func:`course_utils.runtime.training.train`,
  which wraps the model in ``DistributedDataParallel`` and shards the batches by rank.
  ``torchrun --nproc_per_node=2 -m course_utils.lessons.nb11_attention_at_scale.recipe`` runs notebook 11's small demo.
- :func:`spawn_data_parallel` starts them from Python (e.g. a notebook) with
  ``torch.multiprocessing``'s ``spawn``. The function it runs must be importable (defined in a
  module, not in the notebook), like :func:`course_utils.lessons.nb11_attention_at_scale.recipe.demo_worker`.

Backends: ``gloo`` on CPU, ``nccl`` on CUDA GPUs (one GPU per process).
"""

from __future__ import annotations

import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "DistInfo",
    "init_distributed",
    "cleanup",
    "rank",
    "world_size",
    "is_main_process",
    "shard",
    "all_reduce_mean",
    "spawn_data_parallel",
    "data_parallel_backend",
]


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the group: ``rank`` of ``world_size``, its ``device`` and ``backend``."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _default_backend(world: int = 1) -> str:
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"


def data_parallel_backend(world_size: int) -> tuple[str, str]:
    """The backend for ``world_size`` processes on this machine and a sentence saying why:
    ``nccl`` when there is one CUDA GPU per process, else ``gloo`` on the CPU (with one GPU, a
    multi-process NCCL run is impossible: the sentence says it is skipped)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= world_size:
        return "nccl", f"nccl: {world_size} processes, one GPU each ({gpus} GPUs here)"
    if gpus:
        return "gloo", (
            f"gloo on the CPU: NCCL needs one GPU per process and this machine has {gpus} GPU"
            f"{'s' if gpus > 1 else ''} for {world_size} processes, so the NCCL run is skipped"
        )
    return "gloo", f"gloo on the CPU: {world_size} processes, no GPU here"


def init_distributed(backend: str | None = None) -> DistInfo:
    """Join the process group described by the environment (as ``torchrun`` sets it).

    Without ``WORLD_SIZE`` (a plain ``python`` run) nothing is initialised and this returns a
    single-process :class:`DistInfo`. ``backend`` defaults to ``nccl`` with CUDA, else ``gloo``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    if dist.is_available() and dist.is_initialized():
        backend = dist.get_backend()
    else:
        backend = backend or _default_backend(world)
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if world == 1 and not (dist.is_available() and dist.is_initialized()):
        return DistInfo(0, 1, 0, device if backend == "nccl" else torch.device("cpu"), None)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise RuntimeError(
                f"WORLD_SIZE={world} but {', '.join(missing)} not set: start the processes with "
                "torchrun (torchrun --nproc_per_node=2 script.py) or spawn_data_parallel(...)"
            )
        dist.init_process_group(backend=backend, rank=int(os.environ["RANK"]), world_size=world)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device, backend)


def cleanup() -> None:
    """Leave the process group (if any), after a barrier: a rank that tears gloo down while
    another is still finishing its last collective can abort ("terminate called without an
    active exception") and fail the whole torchrun job."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 when not distributed)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Number of processes (1 when not distributed)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """True on rank 0 (and when not distributed): the process that prints and saves."""
    return rank() == 0


def shard(batch: Any, rank: int | None = None, world_size: int | None = None) -> Any:
    """This rank's contiguous slice of a batch (dim 0): rows ``[r*B/W, (r+1)*B/W)``.

    ``batch``: a tensor, a tuple/list/dict of tensors, or an indexable batch object (e.g.
    ``Seq2SeqData``). Equal slices (B divisible by W) make data-parallel training equal to
    full-batch training; otherwise the first slices get one row more.
    """
    from course_utils.data.tasks import batch_length, take

    initialised = dist.is_available() and dist.is_initialized()
    r = (dist.get_rank() if initialised else 0) if rank is None else rank
    w = (dist.get_world_size() if initialised else 1) if world_size is None else world_size
    if not 0 <= r < w:
        raise ValueError(f"expected 0 <= rank < world_size, got rank={r}, world_size={w}")
    n = batch_length(batch)
    if n < w:
        raise ValueError(f"a batch of {n} rows cannot be split across {w} processes")
    idx = torch.tensor_split(torch.arange(n), w)[r]
    return take(batch, slice(int(idx[0]), int(idx[-1]) + 1))


def all_reduce_mean(x: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over all processes (``x`` itself when not distributed)."""
    if world_size() == 1:
        return x
    y = x.detach().clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y / world_size()


# --------------------------------------------------------------------------------------------
# Spawning processes from Python
# --------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank_: int,
    world: int,
    port: int,
    backend: str,
    fn: Callable[..., Any],
    args: tuple,
    results: Any,
    threads: int | None,
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank_),
        LOCAL_RANK=str(rank_),
        WORLD_SIZE=str(world),
    )
    if threads:
        torch.set_num_threads(threads)
    try:
        info = init_distributed(backend)
        value = fn(info, *args)
        # plain pickle copies tensors by value (no shared memory that dies with this process)
        results.put((rank_, True, pickle.dumps(value)))
    except BaseException:  # report every failure to the parent, which raises it
        results.put((rank_, False, traceback.format_exc()))
    finally:
        cleanup()


def spawn_data_parallel(
    fn: Callable[..., Any],
    world_size: int = 2,
    args: tuple = (),
    *,
    backend: str | None = None,
    timeout: float = 300.0,
    threads_per_process: int | None = 1,
) -> list[Any]:
    """Run ``fn(info, *args)`` in ``world_size`` new processes joined in one process group.

    ``info`` is the process's :class:`DistInfo`; inside ``fn``, :func:`course_utils.runtime.training.train`
    trains data-parallel automatically. Returns the values of ``fn`` ordered by rank (they are
    pickled, so return tensors, numbers, dicts, dataclasses). ``fn`` must be importable by
    name (defined in a module): functions defined in a notebook cannot be sent to a spawned
    process. ``backend``: ``nccl`` if there are enough GPUs, else ``gloo``.
    Raises ``RuntimeError`` with the worker's traceback if a process fails.
    """
    import torch.multiprocessing as mp

    if world_size < 1:
        raise ValueError(f"expected world_size >= 1, got {world_size}")
    _check_importable(fn)
    backend = backend or _default_backend(world_size)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world_size, port, backend, fn, args, results, threads_per_process),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    collected: dict[int, tuple[bool, Any]] = {}
    try:
        _collect(procs, results, collected, timeout)
    finally:
        _join(procs, all_reported=len(collected) == world_size)
    failures = [(r, payload) for r, (ok, payload) in sorted(collected.items()) if not ok]
    if failures:
        r, tb = failures[0]
        raise RuntimeError(f"data-parallel worker rank {r} failed:\n{tb}")
    return [pickle.loads(collected[r][1]) for r in range(world_size)]


def _check_importable(fn: Callable[..., Any]) -> None:
    """ValueError when ``fn`` is defined in a notebook: a spawned process cannot import it."""
    if getattr(fn, "__module__", None) != "__main__" or "<locals>" in getattr(
        fn, "__qualname__", ""
    ):
        return
    main = __import__("__main__")
    if not getattr(main, "__file__", None):
        raise ValueError(
            f"{fn.__name__} is defined in this notebook; spawned processes cannot import it. "
            "Put it in a .py file and import it, or use course_utils.lessons.nb11_attention_at_scale.recipe.demo_worker"
        )


def _collect(
    procs: list[Any], results: Any, collected: dict[int, tuple[bool, Any]], timeout: float
) -> None:
    """Fill ``collected`` (rank -> (ok, payload)) from the workers' reports until every worker
    reported or one failed; RuntimeError when a worker died without a report, TimeoutError
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(collected) < len(procs):
        try:
            r, ok, payload = results.get(timeout=0.5)
        except queue_module.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                _collect_after_death(results, collected, dead[0].exitcode)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the {len(procs)} data-parallel workers did not finish in {timeout:.0f} s"
                ) from None
            continue
        collected[r] = (ok, payload)
        if not ok:
            return


def _collect_after_death(
    results: Any, collected: dict[int, tuple[bool, Any]], exitcode: int | None
) -> None:
    """A worker died: take what is queued (a crashed worker may have reported just before
    dying); RuntimeError when no report names a failure."""
    time.sleep(0.5)
    while not results.empty():
        r, ok, payload = results.get()
        collected[r] = (ok, payload)
    if all(ok for ok, _ in collected.values()):
        raise RuntimeError(
            f"a data-parallel worker died (exit code {exitcode}) without reporting an error"
        ) from None


def _join(procs: list[Any], *, all_reported: bool) -> None:
    """Wait for the workers (longer when all reported), terminating any still running."""
    for p in procs:
        p.join(timeout=10 if all_reported else 1)
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
