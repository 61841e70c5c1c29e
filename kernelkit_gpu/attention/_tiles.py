"""``@triton.jit`` helpers of the softmax-attention kernels, forward and backward: tile loads
with optional edge masks and the tensor-core product (with the interpreter's bfloat16 upcast)."""

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
