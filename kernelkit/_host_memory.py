"""Host memory a new allocation can get: the one place kernelkit reads it.

Linux reports it as ``MemAvailable`` in /proc/meminfo (since kernel 3.14): the free memory plus
the page cache and reclaimable memory that the kernel can hand out without swapping. ``MemFree``
(what ``os.sysconf("SC_AVPHYS_PAGES")`` counts) leaves out the page cache, so on a machine that
has read files it can be a small part of what is really available. A ``ulimit -v``
(``RLIMIT_AS``) caps it further: the address space the process has left.
"""

from __future__ import annotations

import os

try:
    import resource
except ImportError:  # not on Windows
    resource = None

__all__ = ["available_bytes", "MEMINFO"]

#: The file :func:`available_bytes` reads on Linux.
MEMINFO = "/proc/meminfo"


def available_bytes():
    """Host memory available to a new allocation, in bytes, or None where it cannot be read.

    Returns
    -------
    int or None
        ``MemAvailable`` of :data:`MEMINFO` (Linux). Where that file or that line is missing
        (other systems, Linux before 3.14), the free physical pages
        (``os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")``), an underestimate.
        Lowered to the address space left under ``ulimit -v`` where one is set. None where
        nothing can be read, so callers skip their memory check.
    """
    known = [b for b in (_physical_available(), _address_space_left()) if b is not None]
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
