"""Flags computed on a device and read on the host late: queue the work that sets a flag, copy
it to pinned host memory behind an event, queue more work, and only then wait, for that copy
alone. Used by the attention paths' finiteness gate and by CG's "any column left" flag.
"""

from __future__ import annotations

import torch

__all__ = ["PendingFlag", "host_read_impossible"]


class PendingFlag:
    """A boolean flag computed on its device, copied to pinned host memory behind an event, and
    read by :meth:`finite` (the wait is for that copy only)."""

    def __init__(self, flag):
        self._event = None
        if flag.is_cuda:
            self._flag = torch.empty((), dtype=flag.dtype, pin_memory=True)
            self._flag.copy_(flag, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(flag.device))
        else:
            self._flag = flag

    def value(self):
        """The flag as a bool."""
        if self._event is not None:
            self._event.synchronize()
        return bool(self._flag)


def host_read_impossible(t):
    """True under torch.compile tracing, or CUDA graph capture of ``t``'s device: no flag can
    be read on the host."""
    return torch.compiler.is_compiling() or (t.is_cuda and torch.cuda.is_current_stream_capturing())
