"""The finiteness gate of the causal Triton attention paths.

Masked keys are absent (the rule of :mod:`kernelkit_math.attention`). Only a masked call can
break that rule in floating point: in a partially masked tile a masked pair's weight is 0 and
0 * inf or 0 * NaN would reach a row that does not see the key. Non-causal calls mask nothing
(keys beyond S load as 0) and run the Triton kernels with no check. A causal call first asks
:func:`all_finite` about its inputs: if they are finite, the Triton kernels run (no pair can
leak); if not, the call runs the plain-PyTorch twin, which follows the rule exactly. The
backward asks the same about its incoming gradients.
"""

from __future__ import annotations

import torch


def all_finite(*tensors):
    """True if every tensor given (None skipped) holds only finite values: one float32 sum per
    tensor (one read of each), a few scalars, and one host read of the flag.

    A finite tensor whose float32 sum overflows counts as non-finite: a false alarm that only
    costs speed (the caller runs the exact twin). Under CUDA graph capture or torch.compile
    tracing no host read is possible: the check is skipped and True returned, so non-finite
    inputs then run the Triton kernels as they are (IEEE arithmetic over the kernels'
    tiles, without the twin's guarantee).
    """
    xs = [t for t in tensors if t is not None]
    if not xs or torch.compiler.is_compiling() or (
            xs[0].is_cuda and torch.cuda.is_current_stream_capturing()):
        return True
    with torch.no_grad():
        return bool(torch.stack([t.sum(dtype=torch.float32) for t in xs]).isfinite().all())
