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
def _nonfinite_terms(a, b, valid):
    """sum over the valid j of a[i, j] b[j, c] restricted to the non-finite b[j, c]: 0, +inf,
    -inf or NaN per (i, c), as IEEE adds those products (inf * 0 and inf - inf are NaN).

    Counts from four products of float16 indicators (exact, float32 accumulation): NaN terms
    n_nan = vis . isnan(b) + zero(a) . isinf(b); with sgn(a) in {-1, 0, 1} on the valid pairs,
    d = sgn(a) . (isposinf - isneginf)(b) = n_pos - n_neg and t = |sgn(a)| . isinf(b) =
    n_pos + n_neg, so +inf terms exist iff t + d > 0 and -inf terms iff t - d > 0."""
    a = a.to(tl.float32)  # the interpreter cannot compare bfloat16 with inf or NaN
    b = b.to(tl.float32)
    vis = valid.to(tl.float16)
    sgn = tl.where(valid & (a > 0), 1.0, tl.where(valid & (a < 0), -1.0, 0.0)).to(tl.float16)
    mag = tl.abs(sgn)
    b_inf = (tl.abs(b) == float("inf")).to(tl.float16)
    b_sgn = tl.where(b == float("inf"), 1.0, tl.where(b == float("-inf"), -1.0, 0.0)).to(tl.float16)
    n_nan = tl.dot(vis, (b != b).to(tl.float16)) + tl.dot(vis - mag, b_inf)  # vis - mag: a 0 or NaN
    d = tl.dot(sgn, b_sgn)
    t = tl.dot(mag, b_inf)
    terms = tl.where(t + d > 0, float("inf"), 0.0) + tl.where(t - d > 0, float("-inf"), 0.0)
    return tl.where(n_nan > 0, float("nan"), terms)


@triton.jit
def _visible_mm(a, b, acc, valid, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """acc + sum over the valid (i, j) of a[i, j] b[j, c], for a tile that is partially masked
    (a is 0 where not valid). A plain product would add 0 * inf = NaN for a non-finite b[j, c]
    that row i does not see; here such a value reaches only the rows that see it. The check is
    one reduction over the b tile; only a tile holding a non-finite value takes the exact
    branch: the product with those entries zeroed plus :func:`_nonfinite_terms`."""
    finite = tl.abs(b.to(tl.float32)) < float("inf")  # False for NaN and +-inf
    if tl.min(finite.to(tl.int32)) == 1:
        r = _mm(a, b, acc, PREC, UPCAST)
    else:
        r = _mm(a, tl.where(finite, b, 0.0).to(b.dtype), acc, PREC, UPCAST) \
            + _nonfinite_terms(a, b, valid)
    return r
