"""``@triton.jit`` helpers of the attention kernels, forward and backward: tile loads with
optional edge masks, the tensor-core product (with the interpreter's bfloat16 upcast) and the
product over the visible pairs of a partially masked tile (masked keys are absent:
:mod:`kernelkit_math.attention`)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _mm(a, b, acc, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b on tensor cores (float32 accumulation); acc may be None."""
    if UPCAST:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        r = tl.dot(a, b, acc, input_precision=PREC)
    return r


@triton.jit
def _load_rows(base, offs_r, offs_c, stride_r, stride_c, R, C,
               MASK_R: tl.constexpr, MASK_C: tl.constexpr):
    """A (len(offs_r), len(offs_c)) tile; rows masked against R and columns against C only when asked."""
    ptrs = base + offs_r.to(tl.int64)[:, None] * stride_r + offs_c[None, :] * stride_c
    if MASK_R and MASK_C:
        x = tl.load(ptrs, mask=(offs_r[:, None] < R) & (offs_c[None, :] < C), other=0.0)
    elif MASK_R:
        x = tl.load(ptrs, mask=offs_r[:, None] < R, other=0.0)
    elif MASK_C:
        x = tl.load(ptrs, mask=offs_c[None, :] < C, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _load_cols(base, offs_c, offs_r, stride_c, stride_r, C, R,
               MASK_C: tl.constexpr, MASK_R: tl.constexpr):
    """The transposed tile (len(offs_c), len(offs_r)) of rows offs_r: element [c, r] = base[r, c]."""
    ptrs = base + offs_c[:, None] * stride_c + offs_r.to(tl.int64)[None, :] * stride_r
    if MASK_R and MASK_C:
        x = tl.load(ptrs, mask=(offs_r[None, :] < R) & (offs_c[:, None] < C), other=0.0)
    elif MASK_R:
        x = tl.load(ptrs, mask=offs_r[None, :] < R, other=0.0)
    elif MASK_C:
        x = tl.load(ptrs, mask=offs_c[:, None] < C, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _visible_mm(a, b, acc, valid, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """acc + sum over the valid (i, j) of a[i, j] b[j, c], for a tile that is partially masked
    (a is 0 where not valid). A plain product would add 0 * inf = NaN for a non-finite b[j, c]
    that row i does not see; here such a value reaches only the rows that see it.

    The check is one reduction over the b tile. Only a tile holding a non-finite value takes
    the exact branch: the product of a and b with their non-finite entries zeroed, plus the
    terms of the valid pairs with a non-finite factor, summed one key j at a time in IEEE
    arithmetic (0 * inf and inf - inf give NaN). That branch is elementwise (O(M N C) work per
    tile, no shared-memory operands), so it leaves the fast path's resources alone."""
    finite_b = tl.abs(b.to(tl.float32)) < float("inf")  # False for NaN and +-inf
    if tl.min(finite_b.to(tl.int32)) == 1:
        r = _mm(a, b, acc, PREC, UPCAST)
    else:
        af = a.to(tl.float32)  # (the interpreter cannot compare bfloat16 with inf or NaN)
        bf = b.to(tl.float32)
        finite_a = tl.abs(af) < float("inf")
        r = _mm(tl.where(finite_a, a, 0.0).to(a.dtype), tl.where(finite_b, b, 0.0).to(b.dtype),
                acc, PREC, UPCAST)
        keys = tl.arange(0, a.shape[1])
        for j in range(a.shape[1]):
            col = keys[None, :] == j
            row = keys[:, None] == j
            a_j = tl.sum(tl.where(col, af, 0.0), axis=1)                    # a[:, j]
            va_j = tl.sum(tl.where(col & valid & finite_a, 1, 0), axis=1) > 0   # finite a
            vn_j = tl.sum(tl.where(col & valid & ~finite_a, 1, 0), axis=1) > 0  # non-finite a
            b_j = tl.sum(tl.where(row, bf, 0.0), axis=0)                    # b[j, :]
            fb_j = tl.abs(b_j) < float("inf")
            pair = vn_j[:, None] | (va_j[:, None] & ~fb_j[None, :])
            r += tl.where(pair, a_j[:, None] * b_j[None, :], 0.0)
    return r
