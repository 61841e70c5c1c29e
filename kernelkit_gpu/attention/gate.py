"""The finiteness gate of the masked (causal or sliding-window) Triton attention paths.

Masked keys are absent (the rule of :mod:`kernelkit_math.attention`). Only a masked call can
break that rule in floating point: in a partially masked tile a masked pair's weight is 0 and
0 * inf or 0 * NaN would reach a row that does not see the key. Calls with neither a causal
mask nor a window mask nothing (keys beyond S load as 0) and run the Triton kernels with no
check. A masked call first asks
:func:`all_finite` about its inputs: if they are finite, the Triton kernels run (no pair can
leak); if not, the call runs the plain-PyTorch twin, which follows the rule exactly. The
backward asks the same about its incoming gradients.

The forward reads its flag late (:func:`start`): the sums are queued, the flag is copied to
pinned host memory behind an event, the Triton kernels are queued, and only then does the host
wait, for the event alone. The GPU is never left idle waiting for the host, and the call costs
the sums (one read of each input) plus that wait; with a non-finite input the kernels' result is
dropped and the twin's returned.
"""

from __future__ import annotations

import torch

from kernelkit_gpu.flags import PendingFlag, host_read_impossible


class PendingCheck(PendingFlag):
    """The finiteness flag of some tensors, set on their device and read by :meth:`finite`."""

    def __init__(self, xs):
        with torch.no_grad():
            flag = torch.stack([t.sum(dtype=torch.float32) for t in xs]).isfinite().all()
        super().__init__(flag)

    def finite(self):
        """True if every tensor was finite (waits for the flag's copy only)."""
        return self.value()


def start(*tensors):
    """Queue the check of :func:`all_finite` and return a :class:`PendingCheck`, or None where
    nothing is checked (no tensor, CUDA graph capture, torch.compile tracing: read as finite)."""
    xs = [t for t in tensors if t is not None]
    if not xs or host_read_impossible(xs[0]):
        return None
    return PendingCheck(xs)


def all_finite(*tensors):
    """True if every tensor given (None skipped) holds only finite values: one float32 sum per
    tensor (one read of each), a few scalars, and one host read of the flag.

    A finite tensor whose float32 sum overflows counts as non-finite: a false alarm that only
    costs speed (the caller runs the exact twin). Under CUDA graph capture or torch.compile
    tracing no host read is possible: the check is skipped and True returned, so non-finite
    inputs then run the Triton kernels as they are (IEEE arithmetic over the kernels'
    tiles, without the twin's guarantee).
    """
    check = start(*tensors)
    return check is None or check.finite()
