"""Host memory a new allocation can get: the one place kernelkit reads it.

Linux reports it as ``MemAvailable`` in /proc/meminfo (since kernel 3.14): the free memory plus
the page cache and reclaimable memory that the kernel can hand out without swapping. ``MemFree``
(what ``os.sysconf("SC_AVPHYS_PAGES")`` counts) leaves out the page cache, so on a machine that
has read files it can be a small part of what is really available. Two limits cap it further:
a memory cgroup (a container's or a batch job's memory limit, cgroup v1 or v2; /proc/meminfo
shows the whole machine inside one), and a ``ulimit -v`` (``RLIMIT_AS``): the address space the
process has left.
"""

from __future__ import annotations

import os

try:
    import resource
except ImportError:  # not on Windows
    resource = None

__all__ = ["available_bytes", "MEMINFO", "PROC_CGROUP", "CGROUP_ROOT"]

#: The file :func:`available_bytes` reads on Linux.
MEMINFO = "/proc/meminfo"
#: The process's cgroup membership (``hierarchy:controllers:path`` lines).
PROC_CGROUP = "/proc/self/cgroup"
#: Where the cgroup file systems are mounted: cgroup v2 at the root itself (or ``unified/`` in
#: the hybrid layout), cgroup v1's memory controller at ``memory/``.
CGROUP_ROOT = "/sys/fs/cgroup"
#: cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712).
_NO_LIMIT = 2**62


def available_bytes():
    """Host memory available to a new allocation, in bytes, or None where it cannot be read.

    Returns
    -------
    int or None
        ``MemAvailable`` of :data:`MEMINFO` (Linux). Where that file or that line is missing
        (other systems, Linux before 3.14), the free physical pages
        (``os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")``), an underestimate.
        Lowered to what the process's memory cgroups leave (v1 or v2: at each level the limit,
        minus the usage, plus the inactive page cache the kernel reclaims before it kills) and
        to the address space left under ``ulimit -v`` where one is set. None where nothing can
        be read, so callers skip their memory check.
    """
    known = [b for b in (_physical_available(), _cgroup_available(), _address_space_left())
             if b is not None]
    return min(known) if known else None


def _address_space_left():
    """Bytes of address space left under ``RLIMIT_AS`` (``ulimit -v``), or None without one."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return soft


def _physical_available():
    try:
        with open(MEMINFO, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the value is in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available():
    """The least memory any of this process's memory cgroups leaves, or None without a limit.

    cgroup v2 (``0::/path``): ``memory.max`` - ``memory.current`` + ``inactive_file`` of
    ``memory.stat``. cgroup v1 (``N:...memory...:/path``): ``memory.limit_in_bytes`` -
    ``memory.usage_in_bytes`` + ``total_inactive_file``, the limit lowered to
    ``hierarchical_memory_limit``. Each level from the process's own cgroup up to the mount's
    root counts (an ancestor's limit binds its children); levels that do not exist under the
    mount (a container that sees only its own cgroup, mounted as the root) are skipped.
    """
    try:
        with open(PROC_CGROUP, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            for root in (CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")):
                found += _levels(root, path, _v2_available)
        elif "memory" in controllers.split(","):
            found += _levels(os.path.join(CGROUP_ROOT, "memory"), path, _v1_available)
    known = [b for b in found if b is not None]
    return min(known) if known else None


def _levels(root, path, read):
    """``read(directory)`` for the cgroup ``path`` and each ancestor that exists under ``root``."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    values = []
    for depth in range(len(parts), -1, -1):
        directory = os.path.join(root, *parts[:depth])
        if os.path.isdir(directory):
            values.append(read(directory))
    return values


def _read_int(directory, name):
    """The integer in a cgroup file, None for "max" (v2's no limit) or an unreadable file."""
    try:
        with open(os.path.join(directory, name), encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat(directory, key):
    """One counter of a cgroup's ``memory.stat`` (0 where missing)."""
    try:
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _left(limit, usage, reclaimable):
    """Bytes a cgroup leaves: None without a limit, the limit where the usage is unreadable."""
    if limit is None or limit >= _NO_LIMIT:
        return None
    if usage is None:
        return limit
    return max(limit - usage + reclaimable, 0)


def _v2_available(directory):
    return _left(_read_int(directory, "memory.max"), _read_int(directory, "memory.current"),
                 _stat(directory, "inactive_file"))


def _v1_available(directory):
    limits = [v for v in (_read_int(directory, "memory.limit_in_bytes"),
                          _stat(directory, "hierarchical_memory_limit") or None) if v is not None]
    return _left(min(limits) if limits else None, _read_int(directory, "memory.usage_in_bytes"),
                 _stat(directory, "total_inactive_file"))
