"""Matrix-free K(X, Y) @ V when every rank holds only its own rows of X, Y and V.

:func:`kernel_matvec_streamed` moves the blocks of Y and V from rank to rank and runs the
single-GPU :func:`kernelkit_gpu.kernel_matvec` on each; the float64 reference is
``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params) @ V`` over the gathered rows.
"""

from __future__ import annotations

import torch

from kernelkit_gpu import distributed as D
from kernelkit_gpu.pairwise.matvec_fused import kernel_matvec

__all__ = ["kernel_matvec_streamed"]


def kernel_matvec_streamed(x_local, y_local, v_local, kernel="rbf", *, precision="accurate",
                           **params):
    """The local rows of K(X, Y) @ V when each rank holds only its rows of X, Y and V.

    Rank r passes its row blocks ``x_local`` (N_r, D), ``y_local`` (M_r, D) and ``v_local``
    (M_r,) or (M_r, R). The blocks of Y and V travel one owner at a time (a broadcast from each
    rank in turn: at most one other block is held at once), and each rank adds
    K(x_local, Y_j) @ V_j in float64. Returns this rank's rows of K @ V, float64 for float32 x
    summed over blocks. For Y too large to be held whole by every rank.
    """
    rank, size = D.world()

    def shapes():  # the blocks' widths and dtypes, which every rank shares
        v2 = v_local[:, None] if v_local.ndim == 1 else v_local
        return v2, {"features": (x_local.shape[1], y_local.shape[1]), "columns": v2.shape[1],
                    "dtypes": (str(x_local.dtype), str(y_local.dtype), str(v2.dtype))}

    v2, blocks = D.agree(shapes)
    squeeze = v_local.ndim == 1
    D.check_same("kernel_matvec_streamed", blocks=blocks, kernel=kernel, precision=precision,
                 params=params)
    sizes = D.all_gather_rows(torch.tensor([[float(y_local.shape[0])]]), size)[:, 0].long().tolist()
    out = torch.zeros((x_local.shape[0], v2.shape[1]), dtype=torch.float64, device=x_local.device)
    for owner in range(size):
        m = sizes[owner]
        if m == 0:
            continue
        yb = y_local if owner == rank else torch.empty((m, y_local.shape[1]), dtype=y_local.dtype,
                                                       device=y_local.device)
        vb = v2 if owner == rank else torch.empty((m, v2.shape[1]), dtype=v2.dtype,
                                                  device=v2.device)
        yb = D.broadcast(yb, owner).to(x_local.device)
        vb = D.broadcast(vb, owner).to(x_local.device)

        def part():
            with D.local():
                return kernel_matvec(x_local, yb, vb, kernel, precision=precision, **params)

        out += D.agree(part).to(torch.float64)
    return out[:, 0] if squeeze else out
