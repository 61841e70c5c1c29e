"""Host memory for the comparison tools: what a new allocation can get, and whether an error
means an allocation failed.

:func:`compare` and :func:`sweep` plan their memory with :func:`available_memory` (the package's
one host-memory reading, :func:`kernelkit._util.host_memory.available_bytes`) before they
allocate; :func:`is_out_of_memory` recognises the errors a failed allocation raises (NumPy's
MemoryError, torch's OutOfMemoryError, and the RuntimeError of torch's CPU allocator, which is
what a ``ulimit -v`` produces).
"""

from __future__ import annotations

import sys

from kernelkit._util.host_memory import available_bytes as available_memory

__all__ = ["available_memory", "is_out_of_memory", "format_bytes"]


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
