"""A Jupyter kernel for grading, in its sandbox: resource limits, time limits, capped output.

:class:`GradingKernel` starts one fresh ``python3`` kernel (jupyter_client) per submission and
executes code in it one request at a time. What it guarantees, whatever the student's code does:

- **isolation**: the kernel is started through :mod:`course_utils.grading.launch` inside the
  submission's :class:`~course_utils.grading.sandbox.Sandbox` (bubblewrap, a container, or
  none); the sandbox's watchdog and cgroups limit all its processes together.
- **memory**: the kernel process (and every process it starts) runs under
  ``RLIMIT_AS = memory_mb`` (virtual address space), set by the launcher before it
  ``exec``\\ s the sandbox, so the limit cannot be raised from inside.
  A memory bomb gets ``MemoryError`` / a failed allocation instead of taking the machine down.
  No file it writes may exceed 4 GiB (``RLIMIT_FSIZE``); core dumps are disabled.
- **time**: every request has a deadline. When it passes, the kernel is interrupted (SIGINT to
  its process group); if it does not answer within a grace period it is killed.
- **death**: a kernel that exits (``os._exit``, a segfault, the OOM killer) is noticed within a
  fraction of a second: the process is polled while we wait, instead of waiting out a timeout.
- **output**: stream text, rich outputs and tracebacks are kept up to a byte budget per kernel;
  the rest is counted and dropped (100 MB of ``print`` never reaches the report).

Execution results are read from the ``execute_reply`` *status* on the shell channel, never from
what the kernel prints: overriding ``showtraceback`` cannot turn an error into a success. No
message from the kernel larger than ``MAX_MESSAGE_BYTES`` is accepted (``ZMQ_MAXMSGSIZE``).
"""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.grading.confine import remove_tree
from course_utils.grading.sandbox import Limits, Sandbox

MAX_FILE_BYTES = 4 << 30  # RLIMIT_FSIZE: no single file written by the kernel above 4 GiB
MAX_OPEN_FILES = 512  # RLIMIT_NOFILE of every kernel process (ENFILE: the grader refuses to
# start when -j x --max-procs x this could fill a sizeable part of the host's file table)
# IOPUB: messages of one request decoded in full; past it, skimmed at a bounded rate
IOPUB_BUDGET = 2000
IOPUB_SKIM, IOPUB_PAUSE = 50, 0.05  # at most 1,000 raw messages a second looked at
MAX_MESSAGE_BYTES = 128 << 20  # the largest Jupyter message the grader accepts (larger: dropped;
# an honest loop printing 100 MB can reach the grader as one aggregated stream message)

# Environment variables passed from the grader to the kernel; everything else (tokens, cloud
# credentials, CI secrets) stays out of the student's reach.
_ENV_KEEP = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH",
    "SYSTEMROOT",
    # exact names only (ENV-LEAK): no prefix lets a token such as COURSE_SUBMISSIONS_TOKEN or
    # an LC_* note through to the student's kernel, and so into its feedback
    "LC_ALL",
    "LC_CTYPE",
    "COURSE_DATA_DIR",
    "COURSE_DEVICE",
    "COURSE_MAX_STEPS",
    "COURSE_STRICT_CHECKS",
)
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

TRUNCATION_NOTE = "\n[... output truncated by the grader ...]\n"


class KernelStartError(RuntimeError):
    """The kernel could not be started (a problem of the grading machine, not the student)."""


def kernel_env(
    *,
    profile: str | None,
    threads: int,
    hide_gpus: bool,
    ipython_dir: str,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a grading kernel: an allow-list of the grader's variables plus
    ``COURSE_PROFILE`` (the grader's value, else ``ci``), a headless matplotlib backend,
    a private IPython directory, ``threads`` BLAS/OpenMP threads and, with ``hide_gpus``,
    no visible CUDA device."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items() if k in _ENV_KEEP or k in _THREAD_VARS}
    env["COURSE_PROFILE"] = (profile or base.get("COURSE_PROFILE") or "ci").strip()
    env["MPLBACKEND"] = "Agg"
    env["IPYTHONDIR"] = ipython_dir
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    env.setdefault("PATH", os.defpath)
    for var in _THREAD_VARS:
        env.setdefault(var, str(max(1, threads)))
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


@dataclass
class ExecResult:
    """What one execute request produced.

    ``status``: ``ok`` / ``error`` (from the execute_reply) / ``timeout`` (interrupted after
    the deadline; the kernel is alive) / ``hung`` (did not answer the interrupt and was
    killed) / ``died`` (the kernel process exited).
    """

    status: str
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    duration: float = 0.0
    exit_code: int | None = None

    @property
    def kernel_lost(self) -> bool:
        return self.status in ("hung", "died")


class OutputBudget:
    """Bytes of output we agree to keep for one submission; the rest is counted, not stored."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.kept = 0
        self.seen = 0

    @property
    def truncated(self) -> bool:
        return self.seen > self.kept

    def take(self, text: str) -> str | None:
        """The part of ``text`` that still fits (``None`` once the budget is spent)."""
        n = len(text.encode("utf-8", "replace"))
        self.seen += n
        room = self.max_bytes - self.kept
        if room <= 0:
            return None
        if n <= room:
            self.kept += n
            return text
        cut = text.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
        self.kept = self.max_bytes
        return cut + TRUNCATION_NOTE


def _strip_ansi(lines: list[str]) -> list[str]:
    import re

    pattern = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    return [pattern.sub("", line) for line in lines]


class GradingKernel:
    """One fresh kernel with limits; use as a context manager.

    ``cwd``: the kernel's working directory (a temporary copy of the submission's folder).
    ``memory_mb``: ``RLIMIT_AS`` of the kernel in MiB (0 = no limit).
    ``workdir``: a private temporary folder for connection files and the IPython directory.
    """

    def __init__(
        self,
        *,
        cwd: str,
        workdir: str,
        sandbox: Sandbox | None = None,
        memory_mb: int = 6144,
        kernel_name: str = "python3",
        env: dict[str, str] | None = None,
        output_budget: OutputBudget | None = None,
        startup_timeout: float = 120.0,
        interrupt_grace: float = 5.0,
    ) -> None:
        self.cwd = cwd
        self.workdir = workdir
        self.memory_mb = int(memory_mb)
        self.kernel_name = kernel_name
        self.env = env
        self.budget = output_budget or OutputBudget(1 << 20)
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self.km = None
        self.kc = None
        self.exit_code: int | None = None
        self.lost = False  # died or killed: nothing more can run
        self.sandbox = sandbox or Sandbox("none", Path(workdir), Limits(memory_mb=0))
        self.own_sandbox = sandbox is None
        self.ipc_dir = str(self.sandbox.run_dir / "ipc")  # the kernel's sockets; see start()
        self.context = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the kernel and wait until it answers; :class:`KernelStartError` otherwise."""
        import zmq
        from jupyter_client import KernelManager

        limit = self.memory_mb * 1024 * 1024 if self.memory_mb > 0 else None
        rlimits: dict[str, int | None] = {
            "as": limit,
            "fsize": MAX_FILE_BYTES
            if not self.sandbox.limits.disk_mb
            else min(MAX_FILE_BYTES, self.sandbox.limits.disk_mb << 20),
            "core": 0,
            "nofile": MAX_OPEN_FILES,
        }
        if self.sandbox.nproc_by_uid:
            rlimits["nproc"] = self.sandbox.limits.max_procs or None
        sandbox = self.sandbox
        if self.own_sandbox:
            sandbox.prepare()

        class _LimitedKernelManager(KernelManager):
            def format_kernel_cmd(self, extra_arguments=None):  # noqa: D401 - jupyter API
                cmd = super().format_kernel_cmd(extra_arguments)
                return sandbox.command(cmd, self.connection_file, rlimits)

        ipc_dir = self.ipc_dir
        if not os.path.isdir(ipc_dir):
            os.makedirs(ipc_dir)
        if len(ipc_dir) > 80:  # unix socket paths are limited to about 104 bytes
            raise KernelStartError(f"the grading folder's path is too long: {ipc_dir}")
        try:
            km = _LimitedKernelManager(
                kernel_name=self.kernel_name, transport="ipc", ip=os.path.join(ipc_dir, "k")
            )
            km.connection_file = os.path.join(self.workdir, "kernel.json")
            if sandbox.isolated:  # no signals across the sandbox: interrupt by message
                km.kernel_spec.interrupt_mode = "message"
            self.km = km
            log = self._log()
            try:
                km.start_kernel(
                    cwd=self.cwd, env=self.env, stdin=None, stdout=_devnull(), stderr=log
                )
            finally:
                os.close(log)
            proc = getattr(km.provisioner, "process", None)
            if proc is not None:
                sandbox.watch(proc.pid, self._stop_for_limit)
            # a kernel cannot make the grader hold more than MAX_MESSAGE_BYTES per message
            self.context = zmq.Context()
            self.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            kc = km.client(context=self.context)
            kc.start_channels()
            self.kc = kc
            kc.wait_for_ready(timeout=self.startup_timeout)
        except Exception as exc:  # any failure here is the grading machine's problem
            detail = f"{type(exc).__name__}: {exc}".strip()
            said = _last_line(self.log_path)
            if said:
                detail += f"; the kernel said: {said}"
            if self.memory_mb and self._poll_exit() is not None:
                detail += (
                    f" (the kernel exited with code {self.exit_code}; is --memory-mb "
                    f"{self.memory_mb} too low for Python, ipykernel and torch?)"
                )
            self.shutdown()
            raise KernelStartError(
                f"could not start a '{self.kernel_name}' kernel: {detail}"
            ) from exc

    @property
    def log_path(self) -> str:
        """The kernel's stderr: ``$COURSE_GRADE_KERNEL_LOG`` (appended; for debugging the
        grading machine), else ``kernel.log`` in the grader's private folder."""
        return os.environ.get("COURSE_GRADE_KERNEL_LOG") or os.path.join(self.workdir, "kernel.log")

    def _log(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(self.log_path, flags, 0o600)

    def _stop_for_limit(self, reason: str) -> None:
        """Called by the sandbox's watchdog: kill the submission's processes now."""
        self.sandbox.kill_all()

    def __enter__(self) -> GradingKernel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Kill the kernel and everything it started, close the channels (idempotent)."""
        if self.kc is not None:
            try:
                self.kc.stop_channels()
            except Exception:
                pass
            self.kc = None
        if self.km is not None:
            self._poll_exit()
            try:
                if self.km.has_kernel:
                    self.km.shutdown_kernel(now=True)
            except Exception:
                self._kill_group()
            try:
                self.km.cleanup_resources()
            except Exception:
                pass
            self.km = None
        self.sandbox.kill_all()
        if self.context is not None:
            self.context.destroy(linger=0)
            self.context = None
        if self.own_sandbox:
            self.sandbox.close()
        if self.own_sandbox:
            remove_tree(self.ipc_dir)

    def _kill_group(self) -> None:
        prov = getattr(self.km, "provisioner", None) if self.km is not None else None
        pgid = getattr(prov, "pgid", None)
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass

    def _poll_exit(self) -> int | None:
        """The kernel's exit code if it has exited, else ``None``."""
        if self.exit_code is not None:
            return self.exit_code
        prov = getattr(self.km, "provisioner", None) if self.km is not None else None
        proc = getattr(prov, "process", None)
        if proc is None:
            return None
        code = proc.poll()
        if code is not None:
            code = self.sandbox.exit_code(code)
            self.exit_code = code
        return code

    def alive(self) -> bool:
        return not self.lost and self.km is not None and self._poll_exit() is None

    def kill(self) -> None:
        """Kill the kernel now (it hung); nothing can run afterwards."""
        self.lost = True
        self._kill_group()
        self.shutdown()

    # -- execution -------------------------------------------------------------------------
    def execute(
        self, code: str, timeout: float, *, silent: bool = False, keep_outputs: bool = True
    ) -> ExecResult:
        """Run ``code`` with a deadline of ``timeout`` seconds; never raises for kernel trouble.

        ``silent`` requests do not increment the execution count or enter the history (the
        grader's own snippets). Outputs are kept within the byte budget when ``keep_outputs``.
        """
        start = time.monotonic()
        if self.lost or self.kc is None:
            return ExecResult(
                "died", evalue="the kernel is no longer running", exit_code=self.exit_code
            )
        msg_id = self.kc.execute(
            code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False
        )
        wait = _Waiting(msg_id, start + max(0.0, timeout))
        result = ExecResult("ok")
        while True:
            now = time.monotonic()
            if wait.reply is not None and (wait.idle or now - (wait.reply_at or now) > 2.0):
                break
            if self._past_deadline(wait, now):
                self.kill()
                result.status = "hung"
                result.evalue = (
                    f"the kernel did not stop within {self.interrupt_grace:g} s of "
                    f"being interrupted and was killed"
                )
                result.duration = time.monotonic() - start
                return result
            got = self._read_iopub(wait, result, keep_outputs)
            self._read_shell(wait)
            if wait.reply is None and (not got or now - wait.last_poll > 0.25):
                wait.last_poll = now
                if self._poll_exit() is not None:
                    self.lost = True
                    result.status = "died"
                    result.exit_code = self.exit_code
                    result.evalue = self.describe_death()
                    result.duration = time.monotonic() - start
                    self.shutdown()
                    return result
        return _finish_result(result, wait, start, timeout)

    def _past_deadline(self, wait: _Waiting, now: float) -> bool:
        """Interrupt at the deadline; True once the interrupt has gone unanswered too long."""
        if wait.interrupted_at is None and wait.reply is None and now >= wait.deadline:
            wait.interrupted_at = now
            try:
                self.km.interrupt_kernel()
            except Exception:
                pass
        return (
            wait.interrupted_at is not None
            and wait.reply is None
            and now - wait.interrupted_at > self.interrupt_grace
        )

    def _read_iopub(self, wait: _Waiting, result: ExecResult, keep: bool) -> bool:
        """One IOPub message of this request (outputs, idle); whether one arrived."""
        wait.iopub_seen += 1
        if wait.iopub_seen > IOPUB_BUDGET:
            return self._skim_iopub(wait)
        try:
            msg = self.kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            return False
        except Exception:  # a malformed message: ignore it
            return True
        try:
            if msg.get("parent_header", {}).get("msg_id") == wait.msg_id:
                if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                    wait.idle = True
                else:
                    self._collect(msg, result, keep)
        except Exception:  # a malformed message: ignore it
            pass
        return True

    def _skim_iopub(self, wait: _Waiting) -> bool:
        """Past ``IOPUB_BUDGET`` messages in one request (IOPUB: a kernel flooding its IOPub
        socket): at most ``IOPUB_SKIM`` raw messages per ``IOPUB_PAUSE`` seconds, dropped
        undecoded (no signature check, no JSON but a small header), only this request's
        ``idle`` looked for; their bytes count as output seen, not kept. The kernel's own
        socket then drops the rest of the flood (its send queue is bounded): the kernel pays
        for it, the grader about 1% of a CPU."""
        import zmq

        socket = self.kc.iopub_channel.socket
        for _ in range(IOPUB_SKIM):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except Exception:  # noqa: BLE001 - a broken socket: the execute loop notices
                break
            self.budget.seen += sum(len(f) for f in frames)
            if _idle_of(frames, wait.msg_id):
                wait.idle = True
                break
        time.sleep(IOPUB_PAUSE)
        return True

    def _read_shell(self, wait: _Waiting) -> None:
        """The shell channel's reply to this request, once it is there."""
        if wait.reply is not None:
            return
        try:
            while self.kc.shell_channel.msg_ready():
                shell = self.kc.get_shell_msg(timeout=0)
                if shell.get("parent_header", {}).get("msg_id") == wait.msg_id:
                    wait.reply = shell
                    wait.reply_at = time.monotonic()
                    return
        except Exception:
            pass

    def _collect(self, msg: dict[str, Any], result: ExecResult, keep: bool) -> None:
        kind = msg["msg_type"]
        content = msg.get("content", {})
        if kind == "stream":
            text = self.budget.take(str(content.get("text", "")))
            if keep and text is not None:
                name = content.get("name", "stdout")
                if (
                    result.outputs
                    and result.outputs[-1].get("output_type") == "stream"
                    and result.outputs[-1].get("name") == name
                ):
                    result.outputs[-1]["text"] += text
                else:
                    result.outputs.append({"output_type": "stream", "name": name, "text": text})
        elif kind in ("execute_result", "display_data"):
            data = content.get("data", {}) or {}
            kept: dict[str, Any] = {}
            for mime in ("text/plain", "text/markdown", "text/latex", "text/html", "image/png"):
                if mime in data:
                    value = data[mime]
                    value = "".join(value) if isinstance(value, list) else str(value)
                    part = self.budget.take(value)
                    if part is not None and (mime == "text/plain" or part == value):
                        kept[mime] = part
            if keep and kept:
                out: dict[str, Any] = {"output_type": kind, "data": kept, "metadata": {}}
                if kind == "execute_result":
                    out["execution_count"] = content.get("execution_count")
                result.outputs.append(out)
        elif kind == "error":
            tb = _strip_ansi([str(x) for x in content.get("traceback", [])][-40:])
            text = self.budget.take("\n".join(tb)) or ""
            if keep:
                result.outputs.append(
                    {
                        "output_type": "error",
                        "ename": str(content.get("ename", ""))[:200],
                        "evalue": str(content.get("evalue", ""))[:2000],
                        "traceback": text.splitlines(),
                    }
                )

    def describe_death(self) -> str:
        """Why the kernel died, from the sandbox's watchdog and cgroup when they know."""
        if self.sandbox.kill_reason:
            return f"the submission was stopped: {self.sandbox.kill_reason}"
        if self.sandbox.oom_killed():
            return (
                "the kernel was killed: the submission's processes together used more "
                f"than the memory limit of {self.sandbox.limits.memory_mb} MB"
            )
        return describe_exit(self.exit_code)


@dataclass
class _Waiting:
    """Where one request stands while :meth:`GradingKernel.execute` waits for it."""

    msg_id: str
    deadline: float
    reply: dict[str, Any] | None = None
    reply_at: float | None = None
    idle: bool = False
    interrupted_at: float | None = None
    last_poll: float = 0.0
    iopub_seen: int = 0  # IOPub messages read during this request (IOPUB: see _skim_iopub)


def _idle_of(frames: list[bytes], msg_id: str) -> bool:
    """Whether raw Jupyter wire frames are the ``idle`` status of request ``msg_id``, reading
    at most a few small JSON frames (header, parent header, content)."""
    import json

    try:
        i = frames.index(b"<IDS|MSG>")
        header, parent, content = frames[i + 2], frames[i + 3], frames[i + 5]
        if max(len(header), len(parent), len(content)) > 4096:
            return False
        if json.loads(header).get("msg_type") != "status":
            return False
        if json.loads(parent).get("msg_id") != msg_id:
            return False
        return json.loads(content).get("execution_state") == "idle"
    except (ValueError, IndexError, AttributeError, TypeError):
        return False


def _finish_result(result: ExecResult, wait: _Waiting, start: float, timeout: float) -> ExecResult:
    """The result of a request that got its reply (or was interrupted at its deadline)."""
    content = wait.reply["content"] if wait.reply else {}
    result.duration = time.monotonic() - start
    if wait.interrupted_at is not None:
        result.status = "timeout"
        result.ename = "TimeoutError"
        result.evalue = f"ran past the time limit of {timeout:g} s and was interrupted"
        return result
    if content.get("status") == "ok":
        result.status = "ok"
    else:
        result.status = "error"
        result.ename = str(content.get("ename", "Error"))[:200]
        result.evalue = str(content.get("evalue", ""))[:2000]
        tb = [str(line) for line in content.get("traceback", [])][-40:]
        result.traceback = _strip_ansi(tb)
    return result


def describe_exit(code: int | None) -> str:
    """A student-readable sentence for a kernel's exit code."""
    if code is None:
        return "the kernel stopped"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": " (killed: often the machine's out-of-memory killer)",
            "SIGSEGV": " (a segmentation fault)",
            "SIGABRT": " (aborted, e.g. a failed memory allocation in C++ code)",
            "SIGXFSZ": f" (it wrote a file larger than {MAX_FILE_BYTES >> 30} GB)",
        }.get(name, "")
        return f"the kernel was killed by {name}{hint}"
    return f"the kernel exited with code {code} (os._exit, sys.exit or a crash)"


def _devnull():
    import subprocess

    return subprocess.DEVNULL


def _last_line(path: str, cap: int = 4096) -> str:
    """The last non-empty line of the file ``path`` (its last ``cap`` bytes), one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - cap), os.SEEK_SET)
        text = os.read(fd, cap).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
