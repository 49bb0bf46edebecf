"""The sandbox's seccomp filter (``grading/confine/seccomp.py``), built by libseccomp.

Each test loads the filter the way the grader does (``bwrap --seccomp FD``) and makes the
system calls it must refuse from inside, by number, so the C library cannot hide a refusal.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from course_utils.grading.confine import seccomp

PROBE = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": dict(unshare=272, clone3=435, keyctl=250, add_key=248, request_key=249),
      "aarch64": dict(unshare=97, clone3=435, keyctl=219, add_key=217, request_key=218)}
nr = NR[os.uname().machine]
def call(name, *args):
    r = libc.syscall(nr[name], *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("unshare-user", call("unshare", 0x10000000))
print("unshare-uts", call("unshare", 0x04000000))
print("clone3", call("clone3", 0, 0))
print("keyctl", call("keyctl", 0, -3, 0))
print("add_key", call("add_key", 0, 0, 0, 0, 0))
print("request_key", call("request_key", 0, 0, 0, 0))
print("fork", "ok" if os.fork() and os.wait() else "child")
"""


def _built() -> bytes:
    bpf = seccomp.seccomp_filter()
    if bpf is None:
        why = f"libseccomp or pyseccomp is missing, or {platform.machine()} is unknown to it"
        if os.environ.get("CI"):
            pytest.fail(f"the sandbox needs its seccomp filter: {why} (CI is set)")
        pytest.skip(why)
    return bpf


def _probe(bpf: bytes) -> dict[str, str]:
    if shutil.which("bwrap") is None or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("needs bubblewrap on x86_64 or aarch64")
    read, write = os.pipe()
    os.write(write, bpf)
    os.close(write)
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cmd += ["--unshare-pid", "--seccomp", str(read), sys.executable, "-I", "-c", PROBE]
    try:
        r = subprocess.run(cmd, pass_fds=(read,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(read)
    if "Creating new namespace failed" in r.stderr or "setting up uid map" in r.stderr:
        pytest.skip(f"bwrap cannot make namespaces here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr
    return dict(line.split(" ", 1) for line in r.stdout.splitlines())


def test_seccomp_filter_is_a_classic_bpf_program_from_libseccomp():
    bpf = _built()
    assert len(bpf) % 8 == 0 and 8 < len(bpf) // 8 < 4096  # struct sock_filter, BPF_MAXINSNS


def test_seccomp_refuses_new_user_namespaces_but_not_other_unshares():
    seen = _probe(_built())
    assert seen["unshare-user"] == "EPERM"
    assert seen["unshare-uts"] != "EPERM"  # only the user-namespace flag is refused


def test_seccomp_refuses_the_kernel_keyrings():
    seen = _probe(_built())
    assert {seen[k] for k in ("keyctl", "add_key", "request_key")} == {"EPERM"}


def test_seccomp_makes_clone3_fall_back_and_processes_still_fork():
    seen = _probe(_built())
    assert seen["clone3"] == "ENOSYS"
    assert seen["fork"] == "ok"


def test_seccomp_refuses_other_abis_with_the_bad_architecture_action():
    """x32 system calls share x86_64's audit arch: libseccomp refuses numbers >= 2**30."""
    bpf = _built()
    if platform.machine() != "x86_64":
        pytest.skip("x32 exists only on x86_64")
    words = [int.from_bytes(bpf[i + 4 : i + 8], "little") for i in range(0, len(bpf), 8)]
    assert 0x40000000 in words  # the x32 bit is tested
    assert 0x00050000 | 1 in words  # and EPERM is an action of the program
