"""Files by handle, and the box's tmpfs.

The sandbox can rename, replace and symlink anything inside the folders it may write; the
grader works there only through directory handles that never follow a link, and (root) makes
the box a tmpfs of ``--disk-mb`` so removing it is an unmount.
"""

from __future__ import annotations

import os
import sys

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """A handle on the folder ``path`` (relative to ``dir_fd`` when given), never a link."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def make_owned_dir(parent_fd: int, name: str, uid: int | None, gid: int | None) -> None:
    """Create ``name`` in the folder ``parent_fd`` and give it to ``uid``:``gid`` through its
    own handle (``mkdirat`` + ``fchown``): a link planted anywhere cannot redirect either."""
    os.mkdir(name, 0o700, dir_fd=parent_fd)
    fd = open_dir(name, dir_fd=parent_fd)
    try:
        if uid is not None:
            os.fchown(fd, uid, gid if gid is not None else uid)
    finally:
        os.close(fd)


def chown_tree(top_fd: int, uid: int, gid: int) -> None:
    """``chown -R`` of the folder ``top_fd`` through handles only (links are not followed:
    a link itself is re-owned with ``lchown`` semantics); iterative, any depth."""
    os.fchown(top_fd, uid, gid)
    stack = [os.dup(top_fd)]
    while stack:
        fd = stack.pop()
        try:
            for entry in os.scandir(fd):
                try:
                    os.chown(entry.name, uid, gid, dir_fd=fd, follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        child = open_dir(entry.name, dir_fd=fd)
                        stack.append(child)
                except OSError:
                    continue
        finally:
            os.close(fd)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and everything in it; never raises.

    Iterative and through handles: every sub-folder found below the top is first moved up to
    the top (``renameat``), so the tree is flattened as it is removed and no depth (a
    1,500-level chain) costs recursion or open files; links are removed, never followed.
    """
    try:
        parent, name = os.path.split(os.path.abspath(os.fspath(path)))
        pfd = open_dir(parent)
    except OSError:
        return
    try:
        try:
            top = open_dir(name, dir_fd=pfd)
        except OSError:
            try:
                os.unlink(name, dir_fd=pfd)  # a file or a link where the folder was
            except OSError:
                pass
            return
        try:
            _empty_flat(top)
        finally:
            os.close(top)
        try:
            os.rmdir(name, dir_fd=pfd)
        except OSError:
            pass
    except Exception:  # clean-up never ends a batch
        pass
    finally:
        os.close(pfd)


def _empty_flat(top: int, rounds: int = 1_000_000) -> None:
    """Empty the folder ``top``: files unlinked, sub-sub-folders moved up, folders removed."""
    serial = 0
    for _ in range(rounds):
        try:
            os.fchmod(top, 0o700)
        except OSError:
            pass
        entries = list(os.scandir(top))
        if not entries:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                _unlink(entry.name, top)
                continue
            try:
                sub = open_dir(entry.name, dir_fd=top)
            except OSError:
                _unlink(entry.name, top)
                continue
            try:
                os.fchmod(sub, 0o700)
                for inner in os.scandir(sub):
                    if inner.is_dir(follow_symlinks=False):
                        serial += 1
                        try:
                            os.rename(inner.name, f".rm-{serial}", src_dir_fd=sub, dst_dir_fd=top)
                        except OSError:
                            pass
                    else:
                        _unlink(inner.name, sub)
            except OSError:
                pass
            finally:
                os.close(sub)
            try:
                os.rmdir(entry.name, dir_fd=top)
            except OSError:
                pass


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# ----------------------------------------------------------------------------- disk quota


def _libc():
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(path: str | os.PathLike, size_mb: int) -> bool:
    """Mount a tmpfs of ``size_mb`` MiB at ``path`` (root on Linux); False where it cannot."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or size_mb <= 0:
        return False
    try:
        libc = _libc()
        opts = f"size={int(size_mb)}m,mode=0700,nr_inodes=200000".encode()
        flags = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC: nothing runs from it
        return libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, opts) == 0
    except (OSError, AttributeError):
        return False


def unmount(path: str | os.PathLike) -> None:
    """Detach the mount at ``path`` (``umount -l``); never raises."""
    try:
        _libc().umount2(os.fsencode(path), 2)  # MNT_DETACH
    except (OSError, AttributeError):
        pass


def is_mount(path: str | os.PathLike) -> bool:
    try:
        return os.path.ismount(path)
    except OSError:
        return False
