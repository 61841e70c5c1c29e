"""The ``@triton.jit`` kernels of the fused Gram matrix K(X, Y); launched by :mod:`kernelkit_gpu.pairwise.gram_fused`.

* ``_gram_prep_kernel``: one pass over the rows that centres / scales the data (float64
  arithmetic, rounded once), pads the feature axis to a multiple of 16 and the rows to a multiple
  of ``PAD_ROWS`` (:mod:`kernelkit_gpu.pairwise.gram_fused`) with zeros, splits float32 values into a TF32 head
  and tail for the accurate mode, and writes the squared row norms;
* ``_gram_mma_kernel``: one (BLOCK_M, BLOCK_N) tile per program: tensor-core dot products of the
  padded operands (no masks on loads), the epilogue ``KIND``, masked stores; for K(X, X) only the
  upper block triangle, each tile stored twice;
* ``_gram_fix_kernel``: recomputes, by direct differences, the tiles that the MMA kernel flagged
  (pairs so close that ||x||² + ||y||² - 2 x·y cancels);
* ``_gram_direct_kernel``: direct differences feature by feature (D <= 16, and the L1 distance).

The per-kernel epilogues (shared with :mod:`kernelkit_gpu.pairwise.matvec_fused`) and the output-tile helpers
(tile order, exact diagonal, stores) are in :mod:`kernelkit_gpu.epilogues`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelkit_gpu import epilogues as E
from kernelkit_gpu.epilogues import (
    _direct_tile, _finish_tile, _layout_anchor, _load_params, _tile_coords,
)


# ------------------------------------------------------------------------------- preparation
@triton.jit(do_not_specialize=["N", "D", "KD"])
def _gram_prep_kernel(x_ptr, mean_ptr, scale_ptr, buf_ptr, nrm_ptr, flag_ptr, N, D, KD,
                      stride_xm, stride_xk, stride_bm, stride_bk,
                      BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, CENTRE: tl.constexpr,
                      SCALE: tl.constexpr, SPLIT: tl.constexpr, CHECK: tl.constexpr,
                      LIMIT: tl.constexpr):
    """Rows [pid BLOCK_R, (pid + 1) BLOCK_R) of the padded operand and their squared norms.

    v = (x - mean) * scale in float64, rounded once to the buffer dtype (CENTRE / SCALE), else x
    converted. SPLIT (float32): the buffer row is [hi | lo] with hi = v rounded to TF32 (10
    explicit mantissa bits, to nearest) and lo = v - hi rounded to TF32: hi·hi' + hi·lo' + lo·hi'
    on TF32 tensor cores is the split-precision ("3xTF32") product. Padding (columns D..KD,
    rows N..) is zero. Norms are of v, in the norm buffer's dtype. The buffer may be
    feature-major (stride_bm == 1: the direct-difference kernel's layout). CHECK: writes 1 to
    ``flag_ptr[0]`` when a row's norm is not <= LIMIT (a NaN or infinity in x, or values whose
    squares overflow the Gram kernels: ``kernelkit_gpu.checks.range_limit``); the flag is
    zeroed by the caller, so every writer writes the same 1.
    """
    BT: tl.constexpr = buf_ptr.dtype.element_ty
    NT: tl.constexpr = nrm_ptr.dtype.element_ty
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < N
    nrm = tl.zeros((BLOCK_R,), NT)
    xrow = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    brow = buf_ptr + rows.to(tl.int64)[:, None] * stride_bm
    for k0 in range(0, KD, BLOCK_D):
        cols = k0 + tl.arange(0, BLOCK_D)
        cmask = cols < D
        lmask = rmask[:, None] & cmask[None, :]
        v = tl.load(xrow + cols[None, :] * stride_xk, mask=lmask, other=0.0)
        if CENTRE or SCALE:
            w = v.to(tl.float64)
            if CENTRE:
                w = w - tl.load(mean_ptr + cols, mask=cmask, other=0.0)[None, :]
            if SCALE:
                w = w * tl.load(scale_ptr + cols, mask=cmask, other=0.0)[None, :]
            v = tl.where(lmask, w.to(BT), 0.0)
        else:
            v = v.to(BT)
        vn = v.to(NT)
        nrm += tl.sum(vn * vn, axis=1)
        bp = brow + cols[None, :] * stride_bk
        smask = (cols < KD)[None, :]
        if SPLIT:
            bits = v.to(tl.int32, bitcast=True)
            hi = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
            lo = v - hi
            lbits = lo.to(tl.int32, bitcast=True)
            lo = ((lbits + 0x1000) & -8192).to(tl.float32, bitcast=True)
            tl.store(bp, hi, mask=smask)
            tl.store(bp + KD * stride_bk, lo, mask=smask)
        else:
            tl.store(bp, v, mask=smask)
    tl.store(nrm_ptr + rows, nrm)
    if CHECK:
        if tl.max((~(nrm <= LIMIT)).to(tl.int32), axis=0) > 0:
            tl.store(flag_ptr, 1)


# ------------------------------------------------------------------------ tensor-core tiles
@triton.jit(do_not_specialize=["N", "DEG", "group"])
def _gram_mma_kernel(
    x_ptr, y_ptr, nx_ptr, ny_ptr, dg_ptr, prm_ptr, out_ptr, flag_ptr,
    N, M, KD, DEG, group,
    stride_xm, stride_ym, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    KIND: tl.constexpr, PAIRWISE: tl.constexpr, TRIANGLE: tl.constexpr, DIAG: tl.constexpr,
    UNIT_DIAG: tl.constexpr, SPLIT: tl.constexpr, DOT_PREC: tl.constexpr, TAU_: tl.constexpr,
    OFF64: tl.constexpr, BIAS: tl.constexpr, NORM_DIAG: tl.constexpr, SLICED: tl.constexpr,
):
    """One tile of K from padded operands (``_gram_prep_kernel``) with tl.dot over KD features.

    x / y: (rows, KD) or, SPLIT, (rows, 2 KD) = [hi | lo]; KD is a multiple of 16 (specialised
    on divisibility: 16-byte loads, one compiled kernel for every D); nx / ny: squared norms
    (squared distances; nx also for the diagonal of dot-product kernels). BIAS (dot products of
    centred operands): nx / ny hold per-row offsets b with x·y = x̃·ỹ + b_x + b_y, added to the
    tile. SLICED: each BLOCK_K slice of the features is multiplied into a fresh accumulator and
    added to the running sum with IEEE float32 adds (tensor cores accumulate with truncation, which
    over hundreds of features costs dot products that cancel several digits). NORM_DIAG: the diagonal of K(X, X) is the epilogue of ``dg`` (the squared row norms of
    the caller's data), not of the tile. Squared distances are
    ||x||² + ||y||² - 2 x·y clamped at 0; each tile stores in ``flag_ptr[tile]`` whether a pair
    is closer than TAU_ times its norms (the expansion cancels there: ``_gram_fix_kernel``
    recomputes that tile).
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    t = tl.program_id(0)
    pid_m, pid_n, valid = _tile_coords(t, N, M, group, BLOCK_M, BLOCK_N, TRIANGLE)
    if valid:
        row0 = pid_m * BLOCK_M
        col0 = pid_n * BLOCK_N
        lm = tl.arange(0, BLOCK_M)
        ln = tl.arange(0, BLOCK_N)
        lk = tl.arange(0, BLOCK_K)
        # padded operands: whole tiles, no masks; 64-bit tile base + 32-bit offsets
        xa = x_ptr + row0.to(tl.int64) * stride_xm + (lm[:, None] * stride_xm + lk[None, :])
        yb = y_ptr + col0.to(tl.int64) * stride_ym + (ln[None, :] * stride_ym + lk[:, None])
        acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
        for k0 in range(0, KD, BLOCK_K):
            a = tl.load(xa)
            b = tl.load(yb)
            part = tl.zeros((BLOCK_M, BLOCK_N), ACC) if SLICED else acc
            if SPLIT:  # 3xTF32: small terms first
                part = tl.dot(tl.load(xa + KD), b, part,
                              input_precision=DOT_PREC, out_dtype=ACC)
                part = tl.dot(a, tl.load(yb + KD), part,
                              input_precision=DOT_PREC, out_dtype=ACC)
            part = tl.dot(a, b, part, input_precision=DOT_PREC, out_dtype=ACC)
            acc = acc + part if SLICED else part
            xa += BLOCK_K
            yb += BLOCK_K
        if PAIRWISE == E.PW_SQEUCLIDEAN:
            nx = tl.load(nx_ptr + row0 + lm)
            ny = tl.load(ny_ptr + col0 + ln)
            nsum = nx[:, None] + ny[None, :]
            s = tl.maximum(nsum - 2.0 * acc, 0.0)
            need = s < TAU_ * nsum
            if DIAG:
                need = need & (lm[:, None] + row0 != ln[None, :] + col0)
            tl.store(flag_ptr + t, tl.max(tl.max(need.to(tl.int32), axis=1), axis=0))
        elif BIAS:
            s = acc + (tl.load(nx_ptr + row0 + lm)[:, None] + tl.load(ny_ptr + col0 + ln)[None, :])
        else:
            s = acc
        p0, p1, p2 = _load_params(prm_ptr)
        _finish_tile(s, dg_ptr, p0, p1, p2, DEG, out_ptr, pid_m, pid_n, N, M,
                     stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, NORM_DIAG, TRIANGLE, DIAG,
                     UNIT_DIAG, OFF64)
    else:
        if PAIRWISE == E.PW_SQEUCLIDEAN:
            tl.store(flag_ptr + t, 0)  # every flag is written: the fix-up scans them as vectors


@triton.jit(do_not_specialize=["N", "D", "DEG", "group", "NPROG"])
def _gram_fix_kernel(
    x_ptr, y_ptr, mean_ptr, scale_ptr, prm_ptr, out_ptr, flag_ptr,
    N, M, D, DEG, group, NPROG,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr, TRIANGLE: tl.constexpr,
    DIAG: tl.constexpr, SCALE: tl.constexpr, OFF64: tl.constexpr, SCAN: tl.constexpr,
):
    """Recompute the flagged tiles of a squared-distance Gram matrix by direct differences.

    Each program scans SCAN tile flags of ``_gram_mma_kernel`` (one vector load; a grid of
    NPROG / SCAN programs, so the launch costs next to nothing when nothing is flagged) and
    recomputes its flagged tiles from the caller's own x / y (any strides): raw differences
    x_k - y_k (exact up to one rounding), or with per-feature scales ((x - mean) scale) in
    float64 rounded once, as the preparation does.
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    base = tl.program_id(0) * SCAN
    offs = base + tl.arange(0, SCAN)
    flags = tl.load(flag_ptr + offs, mask=offs < NPROG, other=0)
    if tl.max(flags, axis=0) != 0:
        for i in range(0, tl.minimum(SCAN, NPROG - base)):
            t = base + i
            if tl.load(flag_ptr + t) != 0:
                pid_m, pid_n, valid = _tile_coords(t, N, M, group, BLOCK_M, BLOCK_N, TRIANGLE)
                offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
                offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
                mask_m = offs_m < N
                mask_n = offs_n < M
                s = _layout_anchor(BLOCK_M, BLOCK_N, ACC)
                xp = x_ptr + offs_m.to(tl.int64) * stride_xm
                yp = y_ptr + offs_n.to(tl.int64) * stride_ym
                for k in range(0, D):
                    a = tl.load(xp, mask=mask_m, other=0.0)
                    b = tl.load(yp, mask=mask_n, other=0.0)
                    if SCALE:
                        mu = tl.load(mean_ptr + k)
                        sc = tl.load(scale_ptr + k)
                        a = ((a.to(tl.float64) - mu) * sc).to(ACC)
                        b = ((b.to(tl.float64) - mu) * sc).to(ACC)
                    else:
                        a = a.to(ACC)
                        b = b.to(ACC)
                    d = a[:, None] - b[None, :]
                    s += d * d
                    xp += stride_xk
                    yp += stride_yk
                p0, p1, p2 = _load_params(prm_ptr)
                _finish_tile(s, prm_ptr, p0, p1, p2, DEG, out_ptr, pid_m, pid_n, N, M,
                             stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, False,
                             TRIANGLE, DIAG, True, OFF64)


# ---------------------------------------------------------------------- direct differences
@triton.jit(do_not_specialize=["N", "D", "DEG", "group"])
def _gram_direct_kernel(
    x_ptr, y_ptr, nx_ptr, prm_ptr, out_ptr,
    N, M, D, DEG, group,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr, PAIRWISE: tl.constexpr,
    TRIANGLE: tl.constexpr, DIAG: tl.constexpr, UNIT_DIAG: tl.constexpr, DK: tl.constexpr,
    OFF64: tl.constexpr, NORM_DIAG: tl.constexpr,
):
    """One tile of K from one feature at a time (feature-major, row-padded x / y from
    ``_gram_prep_kernel``: coalesced, unmasked loads).

    DK > 0: D == DK, unrolled. The tile takes the FMA-dot register layout (each thread a patch
    of rows x columns: few loads per pair). Per-pair arithmetic is bitwise symmetric in (x, y)
    — (a - b)² == (b - a)², |a - b| == |b - a|, a b == b a, accumulated in the same feature
    order — so K(X, X) is exactly symmetric with or without TRIANGLE.
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    pid_m, pid_n, valid = _tile_coords(tl.program_id(0), N, M, group, BLOCK_M, BLOCK_N,
                                       TRIANGLE)
    if valid:
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # x / y are (D, rows padded to PAD_ROWS) with the padded row count as feature stride:
        # these masks are all true, and constant over whole vectors (16-byte loads)
        mask_m = offs_m < stride_xk
        mask_n = offs_n < stride_yk
        s = _direct_tile(x_ptr, y_ptr, offs_m, offs_n, mask_m, mask_n, D,
                         stride_xm, stride_xk, stride_ym, stride_yk,
                         BLOCK_M, BLOCK_N, PAIRWISE, DK, True, ACC)
        p0, p1, p2 = _load_params(prm_ptr)
        _finish_tile(s, nx_ptr, p0, p1, p2, DEG, out_ptr, pid_m, pid_n, N, M,
                     stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, NORM_DIAG, TRIANGLE,
                     DIAG, UNIT_DIAG, OFF64)
