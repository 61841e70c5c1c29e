"""Host memory for the comparison tools: what a new allocation can get, and whether an error
means an allocation failed.

:func:`compare` and :func:`sweep` plan their memory with :func:`available_memory` before they
allocate; :func:`is_out_of_memory` recognises the errors a failed allocation raises (NumPy's
MemoryError, torch's OutOfMemoryError, and the RuntimeError of torch's CPU allocator, which is
what a ``ulimit -v`` produces).
"""

from __future__ import annotations

import os
import sys

try:
    import resource
except ImportError:  # not on Windows
    resource = None

__all__ = ["available_memory", "is_out_of_memory", "format_bytes"]


def _meminfo_available():
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


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


def available_memory():
    """Bytes a new allocation can get: ``MemAvailable`` of /proc/meminfo (else the free physical
    pages), lowered to the address space left under ``ulimit -v``; None when neither is known."""
    known = [b for b in (_meminfo_available(), _address_space_left()) if b is not None]
    return min(known) if known else None


def is_out_of_memory(exc):
    """True when ``exc`` is what a failed allocation raises: NumPy's MemoryError, torch's CUDA
    OutOfMemoryError, the RuntimeError of torch's CPU allocator, or a thread that cannot get
    its stack (``ulimit -v``)."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")  # never import torch while memory is short
    if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("out of memory", "not enough memory", "can't allocate memory",
                            "cannot allocate memory", "can't start new thread"))


def format_bytes(nbytes):
    """``nbytes`` for messages: GiB, or MiB below 1 GiB, with one decimal."""
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.1f} MiB"
    return f"{nbytes / 2**30:.1f} GiB"
