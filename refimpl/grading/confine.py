"""Confining the process that runs a solution: Landlock file and network rules, resource limits.

Landlock (Linux 5.13+, no privileges needed) lets a process give up access for itself and every
process it starts, for good: after `confine(readable, writable)` it may read and execute only
beneath `readable`, write only beneath `writable`, make no TCP connection (ABI 4+), and signal
or ptrace no process outside its own domain (ABI 6+; ptrace always). It is called through
`ctypes` (Python has no binding). Where the kernel has no Landlock, `confine` returns 0 and the
run is not confined (the grader's module docstring says what is then lost).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["confine", "landlock_abi", "set_limits"]

# System call numbers: the same on x86-64 and arm64 (new calls share one table since 5.x).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# Filesystem rights, by the ABI that added them.
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_FS = (1 << 13) - 1  # execute .. make_sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV  # valid on a file
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - a Linux without a C library to load
        return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, or turned off)."""
    libc = _libc()
    if libc is None:
        return 0
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = _ABI1_FS
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def confine(readable: Iterable[Path], writable: Iterable[Path]) -> int:
    """Confine this process and its children to `readable` / `writable`; the ABI used, or 0."""
    # No TCP and no signals outside the domain where the ABI has them; absent paths skipped.
    abi = landlock_abi()
    libc = _libc()
    if abi == 0 or libc is None:
        return 0
    handled = _fs_rights(abi)
    # The struct grew with the ABI; the kernel takes the size it is given.
    attr = _RulesetAttr(handled, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        reading = _EXECUTE | _READ_FILE | _READ_DIR
        for rights, paths in ((reading, readable), (handled, writable)):
            for path in paths:
                _add_rule(libc, ruleset, Path(path), rights & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent: nothing to allow
    try:
        if not path.is_dir():
            rights &= _FILE_RIGHTS  # directory rights on a file are refused (EINVAL)
        rule = _PathBeneathAttr(rights, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule),
                        ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)


def set_limits(*, cpu_s: int, file_bytes: int, extra_processes: int) -> None:
    """Cap CPU seconds, the largest file, and how many more processes this user may start."""
    # RLIMIT_NPROC counts every process of the user, so the cap is set above today's count;
    # root is exempt from it (the limit is then only a record of intent).
    for kind, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_FSIZE, file_bytes),
                        (resource.RLIMIT_CORE, 0)):
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, hard))
    if hasattr(resource, "RLIMIT_NPROC") and os.path.isdir("/proc"):
        uid = os.getuid()
        mine = sum(1 for entry in Path("/proc").iterdir()
                   if entry.name.isdigit() and _owner(entry) == uid)
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        value = mine + extra_processes
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (value, hard))


def _owner(entry: Path) -> int:
    try:
        return entry.stat().st_uid
    except OSError:
        return -1
