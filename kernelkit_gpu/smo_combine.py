"""The SMO solver's gradient product over kernel rows, sum_t c_t K[t, :], in one Triton launch.

After each working set, :func:`kernelkit.linalg.smo.solve` adds Q[:, W] (a_W - a_W^old) to the
gradient: one product of the working set's q kernel rows (q x n, float64) with q coefficients.
A BLAS matrix-vector product may round a column differently with the matrix's shape or its
number of threads, so a rank that owns some of the columns (under a process group,
:mod:`kernelkit.linalg.smo_sharded`) would not get the single process's bits. Here each program
sums a block of columns over t in order, the first product then each next one added, as
:func:`kernelkit_math.smo.combine_rows` (the specification) does: compiled without contracting
a multiply and an add into one fused multiply-add (``enable_fp_fusion=False``), a column's value
depends on that column alone, bit for bit the reference's. It reads the rows once, as the
matrix-vector product does.

Layers: ``_combine_kernel`` (``@triton.jit``), ``combine_rows_fwd`` (launcher) and
``combine_rows`` (the entry point).
"""

from __future__ import annotations

import torch

from kernelkit_gpu import _launch, checks
from kernelkit_gpu._launch import tl, triton

__all__ = ["combine_rows", "combine_rows_fwd"]

#: Columns of one program.
BLOCK = 256


@triton.jit
def _combine_kernel(rows_ptr, coef_ptr, out_ptr, q, n, stride_row, BLOCK: tl.constexpr):
    """out[cols] = sum_t coef[t] rows[t, cols] over t in order, for this program's columns."""
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = cols < n
    ptrs = rows_ptr + cols  # advanced one row at a time: 64-bit pointers, no offset overflow
    acc = tl.load(ptrs, mask=valid, other=0.0) * tl.load(coef_ptr)
    for t in range(1, q):
        ptrs += stride_row
        acc = acc + tl.load(ptrs, mask=valid, other=0.0) * tl.load(coef_ptr + t)
    tl.store(out_ptr + cols, acc, mask=valid)


def combine_rows_fwd(rows, coef, out):
    """Launch the kernel on validated operands: ``rows`` float64 (q, n) with unit column stride,
    q >= 1, n >= 1; ``coef`` float64 (q,) contiguous; ``out`` float64 (n,) contiguous; one
    device. Returns ``out``."""
    q, n = rows.shape
    _combine_kernel[(triton.cdiv(n, BLOCK),)](rows, coef, out, q, n, rows.stride(0), BLOCK=BLOCK,
                                              num_warps=4, enable_fp_fusion=False)
    return out


def combine_rows(rows, coef):
    """sum_t coef_t rows[t, :] for every column, in the order of t (module docstring): bit for
    bit :func:`kernelkit_math.smo.combine_rows`, whatever block of columns ``rows`` is.

    Parameters
    ----------
    rows : torch.Tensor of shape (q, n)
        Float64 kernel rows (any row stride); not modified.
    coef : torch.Tensor of shape (q,)
        Float64 coefficients on the device of ``rows``.

    Returns
    -------
    torch.Tensor of shape (n,)
        Float64; zeros for q = 0.

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type, dtype, shape or device.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.smo_combine import combine_rows
    >>> rows = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    >>> combine_rows(rows, torch.tensor([0.5, -1.0], dtype=torch.float64)).tolist()
    [-2.5, -3.0]
    """
    checks.check_tensor(rows, "rows", "(q, n)")
    checks.check_ndim(rows, "rows", 2, "(q, n)")
    checks.check_dtype(rows, "rows", (torch.float64,))
    checks.check_tensor(coef, "coef", "(q,)")
    checks.check_dtype(coef, "coef", (torch.float64,))
    q, n = rows.shape
    if coef.shape != (q,) or coef.device != rows.device:
        raise ValueError(f"coef must have shape ({q},) and be on {rows.device}; got shape "
                         f"{tuple(coef.shape)} on {coef.device}")
    out = _launch.alloc((n,), torch.float64, rows.device)
    if q == 0 or n == 0:
        return out.zero_()
    checks.check_triton_device(rows, "rows", fallback="kernelkit_math.smo.combine_rows")
    return combine_rows_fwd(_launch.unit_last_stride(rows), coef.contiguous(), out)


if not _launch.HAS_TRITON:  # pragma: no cover - exercised by the no-triton CI step
    combine_rows = _launch.needs_triton("smo_combine.combine_rows")  # noqa: F811
