"""Products A @ x and A.T @ x of a float32 matrix with float64 vectors, accumulated in float64.

The Nyström KernelRidge iteration multiplies float32 Gram row blocks by float64 CG vectors twice
(K_Mn (K_nM u)). cuBLAS has no mixed-type GEMV: a float32 GEMV rounds every partial sum to
float32 (at n = 10^6, M = 13 816 the fit then needed 333 CG steps instead of 128, refinement
restarting on the products' error), and converting the block to float64 first moves 28 bytes per
entry instead of 8. Here each float32 entry is widened in registers and multiplied and summed in
float64, so the only rounding of the kernel values is their own float32 rounding.

Layers: ``_gemv_kernel`` / ``_gemv_t_kernel`` (``@triton.jit``), ``gemv_float64_fwd`` (launcher)
and ``gemv_float64`` (the entry point). The reference is ``a.double() @ x``
(:func:`gemv_float64_naive`).
"""

from __future__ import annotations

import torch

from kernelkit_gpu import _launch
from kernelkit_gpu._launch import tl, triton

__all__ = ["gemv_float64", "gemv_float64_fwd", "gemv_float64_naive"]

#: Programs per SM the transposed product aims for when it splits the rows of ``a``.
_WAVES = 4


def _blocks():
    """(BLOCK_I, BLOCK_J, num_warps): rows x columns of one tile (float64 accumulators in
    registers: 32 per thread at 4 warps)."""
    if _launch.INTERPRET:
        return 8, 32, 4
    return 16, 256, 4


@triton.jit
def _gemv_kernel(a_ptr, x_ptr, out_ptr, N, M, stride_a, stride_x, stride_o,
                 BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    """out[rows, c] = sum_j a[rows, j] x[j, c] (c = program_id(1)), float64 accumulation."""
    rows = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    col = tl.program_id(1)
    mask_i = rows < N
    row_off = rows.to(tl.int64)[:, None] * stride_a
    acc = tl.zeros((BLOCK_I, BLOCK_J), tl.float64)
    for j0 in range(0, M, BLOCK_J):
        js = j0 + tl.arange(0, BLOCK_J)
        mask_j = js < M
        a = tl.load(a_ptr + row_off + js[None, :], mask=mask_i[:, None] & mask_j[None, :],
                    other=0.0)
        xv = tl.load(x_ptr + js.to(tl.int64) * stride_x + col, mask=mask_j, other=0.0)
        acc += a.to(tl.float64) * xv[None, :]
    tl.store(out_ptr + rows.to(tl.int64) * stride_o + col, tl.sum(acc, axis=1), mask=mask_i)


@triton.jit
def _gemv_t_kernel(a_ptr, x_ptr, part_ptr, N, M, rows_per_split, stride_a, stride_x, stride_p,
                   BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    """part[split, cols, c] = sum over this split's rows i of a[i, cols] x[i, c]."""
    cols = tl.program_id(0) * BLOCK_J + tl.arange(0, BLOCK_J)
    split = tl.program_id(1)
    col = tl.program_id(2)
    mask_j = cols < M
    lo = split * rows_per_split
    hi = tl.minimum(lo + rows_per_split, N)
    acc = tl.zeros((BLOCK_I, BLOCK_J), tl.float64)
    for i0 in range(lo, hi, BLOCK_I):
        rows = i0 + tl.arange(0, BLOCK_I)
        mask_i = rows < hi
        a = tl.load(a_ptr + rows.to(tl.int64)[:, None] * stride_a + cols[None, :],
                    mask=mask_i[:, None] & mask_j[None, :], other=0.0)
        xv = tl.load(x_ptr + rows.to(tl.int64) * stride_x + col, mask=mask_i, other=0.0)
        acc += a.to(tl.float64) * xv[:, None]
    out = part_ptr + split.to(tl.int64) * stride_p + cols.to(tl.int64) * tl.num_programs(2) + col
    tl.store(out, tl.sum(acc, axis=0), mask=mask_j)


def gemv_float64_fwd(a, x, out, transpose=False):
    """Launch ``out = a @ x`` (``transpose``: ``a.T @ x``) on validated operands: ``a`` (N, M)
    with unit column stride, ``x`` float64 (M, k) (transpose: (N, k)) contiguous, ``out`` float64
    (N, k) (transpose: (M, k)) contiguous. Returns ``out``."""
    n, m = a.shape
    k = x.shape[1]
    block_i, block_j, warps = _blocks()
    if not transpose:
        grid = (triton.cdiv(n, block_i), k)
        _gemv_kernel[grid](a, x, out, n, m, a.stride(0), x.stride(0), out.stride(0),
                           BLOCK_I=block_i, BLOCK_J=block_j, num_warps=warps)
        return out
    col_blocks = triton.cdiv(m, block_j)
    sms = 1 if _launch.INTERPRET else torch.cuda.get_device_properties(a.device).multi_processor_count
    splits = max(1, min(triton.cdiv(n, block_i), triton.cdiv(_WAVES * sms, col_blocks * k)))
    rows_per_split = triton.cdiv(triton.cdiv(n, splits), block_i) * block_i
    splits = triton.cdiv(n, rows_per_split) if n else 1
    part = torch.zeros((splits, m, k), dtype=torch.float64, device=a.device)
    _gemv_t_kernel[(col_blocks, splits, k)](
        a, x, part, n, m, rows_per_split, a.stride(0), x.stride(0), part.stride(0),
        BLOCK_I=block_i, BLOCK_J=block_j, num_warps=warps)
    torch.sum(part, dim=0, out=out)  # a fixed order: the same result on every call
    return out


def gemv_float64_naive(a, x, transpose=False):
    """The reference: ``a.double() @ x`` (``a.double().T @ x``), float64."""
    a64 = a.to(torch.float64)
    return (a64.T if transpose else a64) @ x.to(torch.float64)


def gemv_float64(a, x, transpose=False):
    """``a @ x`` (or ``a.T @ x``) with float64 products and sums, ``a`` read in its own dtype.

    Equivalent to :func:`gemv_float64_naive` (``a.double() @ x``) up to float64 summation order:
    each term a_ij x_j is formed in float64 and summed in float64, so the error is at most about
    (number of terms) x 2^-53 x sum |a_ij x_j|.

    Parameters
    ----------
    a : torch.Tensor, shape (N, M)
        float32 (or float16 / bfloat16 / float64), rows contiguous (unit column stride); on a CUDA
        device (CPU under the Triton interpreter).
    x : torch.Tensor, shape (M, k) or (M,); with ``transpose`` (N, k) or (N,)
        Converted to float64.
    transpose : bool
        Compute ``a.T @ x``.

    Returns
    -------
    torch.Tensor, float64, shape (N, k) or (N,) (transpose: (M, k) or (M,))

    Raises
    ------
    TypeError, ValueError
        ``a`` not a 2-D floating tensor with unit column stride, or ``x`` of the wrong length
        or on another device.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.mixed_gemv import gemv_float64
    >>> a = torch.ones(3, 4)
    >>> gemv_float64(a, torch.arange(4.0, dtype=torch.float64)).tolist()
    [6.0, 6.0, 6.0]
    """
    if not isinstance(a, torch.Tensor) or a.ndim != 2 or not a.is_floating_point():
        raise TypeError(f"a must be a 2-D floating torch.Tensor; got {type(a).__name__}"
                        + (f" of shape {tuple(a.shape)}" if isinstance(a, torch.Tensor) else ""))
    if a.shape[1] > 1 and a.stride(1) != 1:
        raise ValueError(f"a must have contiguous rows (column stride 1); got strides {a.stride()}")
    if not isinstance(x, torch.Tensor) or x.ndim not in (1, 2):
        raise TypeError("x must be a 1-D or 2-D torch.Tensor")
    want = a.shape[0] if transpose else a.shape[1]
    if x.shape[0] != want:
        raise ValueError(f"x must have {want} rows ({'N' if transpose else 'M'} of a with shape "
                         f"{tuple(a.shape)}); got shape {tuple(x.shape)}")
    if x.device != a.device:
        raise ValueError(f"x must be on a's device {a.device}; got {x.device}")
    squeeze = x.ndim == 1
    x2 = (x[:, None] if squeeze else x).to(torch.float64).contiguous()
    rows = a.shape[1] if transpose else a.shape[0]
    out = torch.empty((rows, x2.shape[1]), dtype=torch.float64, device=a.device)
    if out.numel():
        if a.numel() == 0:
            out.zero_()
        else:
            gemv_float64_fwd(a, x2, out, transpose)
    return out[:, 0] if squeeze else out


if not _launch.HAS_TRITON:  # pragma: no cover - exercised by the no-triton CI step
    gemv_float64 = _launch.needs_triton("mixed_gemv.gemv_float64")  # noqa: F811
