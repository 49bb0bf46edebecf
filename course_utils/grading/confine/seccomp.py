"""The seccomp filter of a sandboxed kernel, built by libseccomp (``pyseccomp``).

bubblewrap installs a classic-BPF program it reads from a descriptor (``bwrap --seccomp FD``);
libseccomp writes that program from rules, so nothing here is hand-assembled opcodes. Denied
with ``EPERM``: ``unshare`` and ``clone`` asking for a new user namespace, the kernel keyrings
(``add_key``, ``request_key``, ``keyctl``), and any system call of another ABI (x32, i386: the
bad-architecture action). ``clone3`` fails with ``ENOSYS``, so the C library falls back to
``clone``, whose flags the filter can read.
"""

from __future__ import annotations

import errno
import tempfile

CLONE_NEWUSER = 0x10000000
KEYRINGS = ("add_key", "request_key", "keyctl")


def _library():
    """The ``pyseccomp`` module, or ``None`` where it or libseccomp is not installed."""
    try:
        import pyseccomp
    except (ImportError, OSError):  # OSError: the bindings load libseccomp.so at import
        return None
    return pyseccomp


def seccomp_filter() -> bytes | None:
    """The filter as a classic-BPF program (bytes for ``bwrap --seccomp FD``); ``None`` where
    libseccomp is missing or does not know this architecture (the report then says the
    kernel's system calls were not restricted)."""
    sc = _library()
    if sc is None:
        return None
    try:
        rules = sc.SyscallFilter(sc.ALLOW)
        rules.set_attr(sc.Attr.ACT_BADARCH, sc.ERRNO(errno.EPERM))
        rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for name in KEYRINGS:
            rules.add_rule(sc.ERRNO(errno.EPERM), name)
        new_user = sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        for name in ("unshare", "clone"):
            rules.add_rule(sc.ERRNO(errno.EPERM), name, new_user)
        with tempfile.TemporaryFile() as fh:
            rules.export_bpf(fh)
            fh.seek(0)
            return fh.read()
    except (OSError, ValueError, RuntimeError):
        return None
