"""The trusted launcher of a grading kernel: limits, cgroups, then the sandbox.

Run by the grader as ``python launch.py SPEC.json -- KERNEL COMMAND...`` (as a script, so it
imports nothing from the course). Between the grader's ``Popen`` and the kernel it:

1. moves itself into the submission's cgroups (memory, pids), when the grader made some;
2. writes the kernel's own connection file (the grader's, with the socket path the kernel
   sees inside the sandbox);
3. sets the per-process limits (address space, file size, no core dumps, processes);
4. ``exec``\\ s the sandbox (bubblewrap or docker) or, with ``--sandbox none``, the kernel.
   Started by root, bubblewrap runs privileged without a user namespace and the first
   process inside is ``launch.py --become UID GID NPROC``, which drops to the submission's
   own unprivileged uid before it execs the kernel (see :func:`become`).

Every step is plain data in ``SPEC.json``; see :mod:`course_utils.grading.sandbox`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

RLIMITS = {
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
    "nproc": resource.RLIMIT_NPROC,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
}


def _join_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        with open(path, "w") as fh:
            fh.write(str(os.getpid()))


def _kernel_connection(spec: dict) -> None:
    conn = spec.get("connection")
    if not conn:
        return
    with open(conn["host"], encoding="utf-8") as fh:
        info = json.load(fh)
    info["ip"] = conn["ip"]
    fd = os.open(conn["kernel"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        if conn.get("owner"):
            os.fchown(fh.fileno(), *conn["owner"])
        json.dump(info, fh)


def _set_limits(limits: dict) -> None:
    for name, value in limits.items():
        if value is None:
            continue
        value = int(value)
        resource.setrlimit(RLIMITS[name], (value, value))


def bind_args(binds: list[list]) -> list[str]:
    """``[mode, host path, sandbox path]`` -> bwrap arguments."""
    args: list[str] = []
    made: list[str] = []  # folders created here
    mounted: list[str] = []  # read-only mount points: never create folders inside them
    writable: list[str] = []  # the box's own folders: a parent may be made inside them
    for mode, src, dest in binds:
        if mode != "symlink":  # parents readable by the kernel's uid (bwrap makes them 0700)
            parts = dest.strip("/").split("/")[:-1]
            for k in range(1, len(parts) + 1):
                parent = "/" + "/".join(parts[:k])
                if parent in made + mounted + writable:
                    continue
                if any(parent.startswith(m + "/") for m in mounted):
                    continue
                # e.g. /tmp/ci for a venv at /tmp/ci/main/.venv: made in the box's /tmp
                args += ["--perms", "0755", "--dir", parent]
                made.append(parent)
        flag = {"symlink": "--symlink", "rw": "--bind", "ro": "--ro-bind"}[mode]
        args += [flag, src, dest]
        (writable if mode == "rw" else mounted).append(dest)
    return args


def _drop_privileges(uid: int | None, gid: int | None) -> None:
    if uid is None or os.geteuid() != 0:
        return
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:  # pragma: no cover - paranoia
        raise SystemExit("launcher: could not drop privileges")


def become(argv: list[str]) -> None:
    """``--become UID GID NPROC -- COMMAND``: first step inside a sandbox started by root.

    bubblewrap run by root mounts what the sandbox shows as root (so it can show a Python
    installed under ``/root``), keeps only CAP_SETUID and CAP_SETGID, and runs this: set the
    process limit of the uid, drop to it (which clears every capability), exec the kernel.
    """
    uid, gid, nproc, sep, *command = argv
    if sep != "--" or not command:
        raise SystemExit("usage: launch.py --become UID GID NPROC -- COMMAND...")
    if int(nproc) > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))
    _drop_privileges(int(uid), int(gid))
    os.execvp(command[0], command)


def alive(uid: int, proc: str = "/proc") -> bool | None:
    """Whether a process of ``uid`` (real or saved uid) other than this one is still alive;
    ``None`` where ``proc`` cannot be read. Zombies do not count: they are dead, waiting for
    their parent to collect them, yet ``kill`` "succeeds" on them."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    me = str(os.getpid())
    for entry in entries:
        if not entry.isdigit() or entry == me:
            continue
        try:
            with open(f"{proc}/{entry}/status", encoding="ascii", errors="replace") as fh:
                status = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:  # it ended while we looked
            continue
        uids = status.get("Uid", "").split()
        state = status.get("State", "").strip()[:1]
        if str(uid) in (uids[0:1] + uids[2:3]) and state not in ("Z", "X"):
            return True
    return False


def kill_uid(uid: int) -> None:
    """``--kill-uid UID`` (root): become UID and SIGKILL every process of it (``kill -1``),
    until none is left alive; how a finished submission's stray processes are ended."""
    _drop_privileges(uid, uid)
    for _ in range(200):
        try:
            os.kill(-1, 9)
        except ProcessLookupError:
            return
        except PermissionError:  # pragma: no cover - nothing of ours left to signal
            return
        if alive(uid) is False:  # only zombies left (kill -1 keeps "finding" them)
            return
        time.sleep(0.01)


def main(argv: list[str]) -> None:
    """Apply ``SPEC.json`` (``argv[0]``) and exec the command after ``--``."""
    if argv and argv[0] == "--become":
        become(argv[1:])
        return
    if argv and argv[0] == "--kill-uid":
        kill_uid(int(argv[1]))
        return
    spec_path, sep, *command = argv
    if sep != "--" or not command:
        raise SystemExit("usage: launch.py SPEC.json -- COMMAND...")
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    _join_cgroups(spec.get("cgroups", []))
    for name in spec.get("unset_env", []):  # e.g. JPY_PARENT_PID: no grader pid inside
        os.environ.pop(name, None)
    _kernel_connection(spec)
    if spec.get("connection"):  # the kernel reads its own copy
        command = [spec["connection"]["inside"] if a == spec["connection"]["host"] else a
                   for a in command]  # fmt: skip
    _set_limits(spec.get("rlimits", {}))
    wrapper = list(spec.get("wrapper", []))
    if spec.get("backend") == "bwrap":
        wrapper += bind_args(spec.get("binds", []))
        if spec.get("seccomp"):  # bwrap reads the filter from an inherited descriptor
            bpf = os.open(spec["seccomp"], os.O_RDONLY | os.O_NOFOLLOW)
            os.set_inheritable(bpf, True)
            wrapper += ["--seccomp", str(bpf)]
        wrapper += list(spec.get("wrapper_tail", [])) + ["--"]
    elif wrapper:
        wrapper += list(spec.get("wrapper_tail", []))
    if spec.get("become"):  # root: bwrap mounts as root, the kernel drops to its uid inside
        command = list(spec["become"]) + command
    else:
        _drop_privileges(spec.get("uid"), spec.get("gid"))
    full = wrapper + command
    os.execvp(full[0], full)


if __name__ == "__main__":
    main(sys.argv[1:])
