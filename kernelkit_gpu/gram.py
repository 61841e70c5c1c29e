"""Fused Triton Gram matrices K(X, Y) for every registry kernel.

Layers (see ARCHITECTURE.md):

* ``_gram_prep_kernel``: one pass over the rows that centres / scales the data (float64
  arithmetic, rounded once), pads the feature axis to a multiple of 16 and the rows to a multiple
  of ``PAD_ROWS`` with zeros, splits float32 values into a TF32 head and tail for the accurate
  mode, and writes the squared row norms;
* ``_gram_mma_kernel``: one (BLOCK_M, BLOCK_N) tile per program: tensor-core dot products of the
  padded operands (no masks on loads), the epilogue ``KIND``, masked stores; for K(X, X) only the
  upper block triangle, each tile stored twice;
* ``_gram_fix_kernel``: recomputes, by direct differences, the tiles that the MMA kernel flagged
  (pairs so close that ||x||² + ||y||² - 2 x·y cancels);
* ``_gram_direct_kernel``: direct differences feature by feature (D <= 16, and the L1 distance);
* ``gram_fwd`` (launchers: heuristic configs, or autotuning with ``KERNELKIT_GPU_AUTOTUNE=1``)
  and ``gram`` (public: validation, preparation).

The per-kernel epilogues (shared with :mod:`kernelkit_gpu.matvec`) and the output-tile helpers
(tile order, exact diagonal, stores) are in :mod:`kernelkit_gpu._epilogues`. Measurements behind
the heuristic configs: ``benchmarks/results/gram-tuning-notes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import triton
import triton.language as tl
import torch

from kernelkit_gpu import _epilogues as E
from kernelkit_gpu import _prepare as P
from kernelkit_gpu._epilogues import (
    _direct_tile, _finish_tile, _layout_anchor, _load_params, _tile_coords,
)

try:  # host-side tensor descriptors (TMA stores on Hopper; the interpreter emulates them)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: pointer stores only
    TensorDescriptor = None

__all__ = ["gram", "gram_fwd"]

#: Operand rows are padded with zeros to a multiple of this (>= every BLOCK_M / BLOCK_N), so the
#: MMA kernel loads whole tiles without masks.
PAD_ROWS = 128
#: The feature axis of MMA operands is padded with zeros to a multiple of this.
PAD_K = 16


# ------------------------------------------------------------------------------- preparation
@triton.jit(do_not_specialize=["N", "D", "KD"])
def _gram_prep_kernel(x_ptr, mean_ptr, scale_ptr, buf_ptr, nrm_ptr, N, D, KD,
                      stride_xm, stride_xk, stride_bm, stride_bk,
                      BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, CENTRE: tl.constexpr,
                      SCALE: tl.constexpr, SPLIT: tl.constexpr):
    """Rows [pid BLOCK_R, (pid + 1) BLOCK_R) of the padded operand and their squared norms.

    v = (x - mean) * scale in float64, rounded once to the buffer dtype (CENTRE / SCALE), else x
    converted. SPLIT (float32): the buffer row is [hi | lo] with hi = v rounded to TF32 (10
    explicit mantissa bits, to nearest) and lo = v - hi rounded to TF32: hi·hi' + hi·lo' + lo·hi'
    on TF32 tensor cores is the split-precision ("3xTF32") product. Padding (columns D..KD,
    rows N..) is zero. Norms are of v, in the norm buffer's dtype. The buffer may be
    feature-major (stride_bm == 1: the direct-difference kernel's layout).
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


# ------------------------------------------------------------------------ tensor-core tiles
@triton.jit(do_not_specialize=["N", "DEG", "group"])
def _gram_mma_kernel(
    x_ptr, y_ptr, nx_ptr, ny_ptr, prm_ptr, out_ptr, out_desc, flag_ptr,
    N, M, KD, DEG, group,
    stride_xm, stride_ym, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    KIND: tl.constexpr, PAIRWISE: tl.constexpr, TRIANGLE: tl.constexpr, DIAG: tl.constexpr,
    STATIONARY: tl.constexpr, SPLIT: tl.constexpr, DOT_PREC: tl.constexpr, TAU_: tl.constexpr,
    TSTORE: tl.constexpr, OFF64: tl.constexpr, STORE_CS: tl.constexpr, LOAD_EL: tl.constexpr,
    TMA: tl.constexpr,
):
    """One tile of K from padded operands (``_gram_prep_kernel``) with tl.dot over KD features.

    x / y: (rows, KD) or, SPLIT, (rows, 2 KD) = [hi | lo]; KD is a multiple of 16 (specialised
    on divisibility: 16-byte loads, one compiled kernel for every D); nx / ny: squared norms
    (squared distances; nx also for the diagonal of dot-product kernels). Squared distances are
    ||x||² + ||y||² - 2 x·y clamped at 0; with TAU_ > 0 each tile stores in ``flag_ptr[tile]``
    whether a pair is closer than TAU_ times its norms (the expansion cancels there:
    ``_gram_fix_kernel`` recomputes that tile). LOAD_EL: operand loads marked evict-last.
    """
    ACC: tl.constexpr = out_ptr.dtype.element_ty
    EV: tl.constexpr = "evict_last" if LOAD_EL else ""
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
            a = tl.load(xa, eviction_policy=EV)
            b = tl.load(yb, eviction_policy=EV)
            if SPLIT:  # 3xTF32: small terms first
                acc = tl.dot(tl.load(xa + KD, eviction_policy=EV), b, acc,
                             input_precision=DOT_PREC, out_dtype=ACC)
                acc = tl.dot(a, tl.load(yb + KD, eviction_policy=EV), acc,
                             input_precision=DOT_PREC, out_dtype=ACC)
            acc = tl.dot(a, b, acc, input_precision=DOT_PREC, out_dtype=ACC)
            xa += BLOCK_K
            yb += BLOCK_K
        if PAIRWISE == E.PW_SQEUCLIDEAN:
            nx = tl.load(nx_ptr + row0 + lm)
            ny = tl.load(ny_ptr + col0 + ln)
            nsum = nx[:, None] + ny[None, :]
            s = tl.maximum(nsum - 2.0 * acc, 0.0)
            if TAU_ > 0:  # TAU_ == 0 compiles the plain expansion (ablation / benchmarks)
                need = s < TAU_ * nsum
                if DIAG:
                    need = need & (lm[:, None] + row0 != ln[None, :] + col0)
                tl.store(flag_ptr + t, tl.max(tl.max(need.to(tl.int32), axis=1), axis=0))
        else:
            s = acc
        p0, p1, p2 = _load_params(prm_ptr)
        _finish_tile(s, nx_ptr, p0, p1, p2, DEG, out_ptr, out_desc, pid_m, pid_n, N, M,
                     stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, PAIRWISE, TRIANGLE, DIAG,
                     STATIONARY, TSTORE, OFF64, STORE_CS, TMA)
    else:
        if PAIRWISE == E.PW_SQEUCLIDEAN and TAU_ > 0:
            tl.store(flag_ptr + t, 0)  # every flag is written: the fix-up scans them as vectors


@triton.jit(do_not_specialize=["N", "D", "DEG", "group", "NPROG"])
def _gram_fix_kernel(
    x_ptr, y_ptr, mean_ptr, scale_ptr, prm_ptr, out_ptr, out_desc, flag_ptr,
    N, M, D, DEG, group, NPROG,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr, TRIANGLE: tl.constexpr,
    DIAG: tl.constexpr, SCALE: tl.constexpr, OFF64: tl.constexpr, TMA: tl.constexpr,
    SCAN: tl.constexpr,
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
                _finish_tile(s, prm_ptr, p0, p1, p2, DEG, out_ptr, out_desc, pid_m, pid_n, N, M,
                             stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, E.PW_SQEUCLIDEAN,
                             TRIANGLE, DIAG, True, False, OFF64, False, TMA)


# ---------------------------------------------------------------------- direct differences
@triton.jit(do_not_specialize=["N", "D", "DEG", "group"])
def _gram_direct_kernel(
    x_ptr, y_ptr, nx_ptr, prm_ptr, out_ptr, out_desc,
    N, M, D, DEG, group,
    stride_xm, stride_xk, stride_ym, stride_yk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KIND: tl.constexpr, PAIRWISE: tl.constexpr,
    TRIANGLE: tl.constexpr, DIAG: tl.constexpr, STATIONARY: tl.constexpr, DK: tl.constexpr,
    TSTORE: tl.constexpr, OFF64: tl.constexpr, STORE_CS: tl.constexpr, TMA: tl.constexpr,
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
        _finish_tile(s, nx_ptr, p0, p1, p2, DEG, out_ptr, out_desc, pid_m, pid_n, N, M,
                     stride_om, stride_on, BLOCK_M, BLOCK_N, KIND, PAIRWISE, TRIANGLE, DIAG,
                     STATIONARY, TSTORE, OFF64, STORE_CS, TMA)


# ------------------------------------------------------------------------------ launch configs
@dataclass(frozen=True)
class GramConfig:
    """Block shape and launch settings of one Gram launch (square blocks: the triangle needs them)."""

    block: int
    block_k: int
    num_warps: int
    num_stages: int
    maxnreg: int = 0  # > 0: cap registers per thread (more programs per multiprocessor)

    def kwargs(self):
        kw = dict(BLOCK_M=self.block, BLOCK_N=self.block, num_warps=self.num_warps,
                  num_stages=self.num_stages)
        if self.maxnreg and not P.INTERPRET:
            kw["maxnreg"] = self.maxnreg
        return kw


_INTERP_CONFIG = GramConfig(64, 16, 4, 1)


def _pow2_divisor(kd, cap):
    """Largest power of two <= cap dividing kd (kd a multiple of PAD_K)."""
    b = cap
    while kd % b:
        b //= 2
    return b


def mma_configs(kd, split, elem_size):
    """Candidate configs of the tensor-core kernel for KD padded features (autotuning and tests)."""
    if P.INTERPRET:
        return [_INTERP_CONFIG]
    bk = _pow2_divisor(kd, 32 if split else 64)
    if elem_size == 8:
        return [GramConfig(64, min(bk, 32), 4, 2), GramConfig(64, min(bk, 16), 4, 3)]
    return [
        GramConfig(128, bk, 8, 2 if kd <= bk else 3),
        GramConfig(128, bk, 8, 1),
        GramConfig(64, bk, 4, 3),
    ]


def mma_default_config(kd, split, elem_size):
    """The heuristic config (KERNELKIT_GPU_AUTOTUNE unset): see benchmarks/results/gram-tuning-notes.md."""
    return mma_configs(kd, split, elem_size)[0]


def direct_configs(d, pairwise):
    if P.INTERPRET:
        return [_INTERP_CONFIG]
    if d > P.DIRECT_MAX_D:  # the L1 distance over many features: ALU-bound
        return [GramConfig(64, 16, 4, 1, 72), GramConfig(64, 16, 4, 1), GramConfig(128, 16, 8, 1)]
    return [GramConfig(64, 16, 4, 1), GramConfig(128, 16, 8, 1)]


def direct_default_config(d, pairwise):
    # 64 x 64 tiles with 4 warps: few registers, many programs per multiprocessor (measured
    # faster than 128 x 128 with 8 or 16 warps both for D <= 16, write-bound, and for the L1
    # distance at D = 64, ALU-bound, where a cap of 72 registers fits 7 programs per
    # multiprocessor instead of 6: benchmarks/results/gram-tuning-notes.md)
    return direct_configs(d, pairwise)[0]


#: Variant switches for benchmarks/gram_variants.py (defaults = the shipped choice):
#: tstore: transposed tile written as tl.trans (no difference in SASS on triton 3.6);
#: group: super-tile size of the triangle order (1: plain triangle order);
#: store_cs / load_el: streaming stores / evict-last operand loads (pointer stores);
#: tma: stores through a tensor descriptor where ``out`` allows it;
#: direct_triangle: K(X, X) by direct differences on the upper block triangle only;
#: mma_triangle: False computes every tile of K(X, X) on tensor cores (timing experiments
#: only: tensor-core sums need not be bitwise symmetric, so K is then not exactly symmetric).
DEFAULT_VARIANT = dict(tstore=False, group=8, store_cs=True, load_el=False, direct_triangle=True,
                       tma=False)


# ------------------------------------------------------------------------------- preparation
@dataclass
class MMAOperands:
    """Padded operands of ``_gram_mma_kernel`` and what ``_gram_fix_kernel`` needs."""

    x: torch.Tensor
    y: torch.Tensor
    nx: torch.Tensor
    ny: torch.Tensor
    prm: torch.Tensor
    kd: int
    split: bool
    dot_prec: str
    raw_x: torch.Tensor
    raw_y: torch.Tensor
    mean: torch.Tensor
    scale: Optional[torch.Tensor]
    n: int
    m: int
    d: int


def _round_up(v, q):
    return -(-v // q) * q


def _prep_launch(x, mean, scale, kd, split, buf_dtype, nrm_dtype, feature_major=False):
    """Launch ``_gram_prep_kernel``: (rows padded, kd or 2 kd) operand and (rows padded,) norms."""
    n, d = x.shape
    npad = _round_up(max(n, 1), PAD_ROWS)
    width = kd * (2 if split else 1)
    if feature_major:
        buf = torch.empty((width, npad), dtype=buf_dtype, device=x.device).T
    else:
        buf = torch.empty((npad, width), dtype=buf_dtype, device=x.device)
    nrm = torch.empty((npad,), dtype=nrm_dtype, device=x.device)
    block_r = PAD_ROWS if P.INTERPRET else 32
    dummy = mean if mean is not None else nrm
    _gram_prep_kernel[(npad // block_r,)](
        x, dummy, scale if scale is not None else dummy, buf, nrm, n, d, kd,
        x.stride(0), x.stride(1), buf.stride(0), buf.stride(1),
        BLOCK_R=block_r, BLOCK_D=64, CENTRE=mean is not None,
        SCALE=scale is not None, SPLIT=split, num_warps=4,
    )
    return buf, nrm


def prepare_mma(x, y, plan, precision, symmetric):
    """Padded, centred / scaled / split operands for ``_gram_mma_kernel`` (y None: K(X, X))."""
    acc = P.acc_dtype(x.dtype)
    dev = x.device
    n, d = x.shape
    m = n if symmetric else y.shape[0]
    sixteen = x.dtype in (torch.float16, torch.bfloat16)
    cos_diag = None
    if plan.cosine:
        x, cos_diag = P._normalize_rows(x.to(acc))
        y = None if symmetric else P._normalize_rows(y.to(acc))[0]
        sixteen = False
    scale = None
    if plan.scale is not None:
        scale = torch.as_tensor(plan.scale, dtype=torch.float64, device=dev)
        sixteen = False  # scaled values are not 16-bit numbers: float32
    sq = plan.pairwise == E.PW_SQEUCLIDEAN.value
    if sixteen:
        # 16-bit: the raw values go to the native tensor-core product (products of 16-bit numbers
        # are exact in float32). Centring would round the centred values to 16 bits again;
        # instead, where the expansion cancels (data far from the origin, near-duplicates) the
        # tile is recomputed by exact direct differences. Triton's interpreter multiplies the
        # bit patterns of bfloat16 tl.dot operands as integers: float32 there (exact too).
        buf_dtype = torch.float32 if (P.INTERPRET and x.dtype == torch.bfloat16) else x.dtype
    else:
        buf_dtype = acc
    split = buf_dtype == torch.float32 and not sixteen and precision == "accurate"
    dot_prec = "tf32" if (buf_dtype == torch.float32 and not sixteen) else "ieee"
    mean = x.mean(dim=0, dtype=torch.float64) if (sq and not sixteen) else None
    kd = _round_up(d, PAD_K)
    xb, nx = _prep_launch(x, mean, scale, kd, split, buf_dtype, acc)
    if symmetric:
        yb, ny = xb, nx
    else:
        yb, ny = _prep_launch(y, mean, scale, kd, split, buf_dtype, acc)
    if cos_diag is not None and symmetric:
        nx[:n].copy_(cos_diag)  # cosine's diagonal: exactly 1 (0 for zero rows)
    return MMAOperands(
        x=xb, y=yb, nx=nx, ny=ny, prm=P._params_tensor(plan.prm, acc, dev), kd=kd, split=split,
        dot_prec=dot_prec, raw_x=x, raw_y=x if symmetric else y,
        mean=mean if mean is not None else nx, scale=scale, n=n, m=m, d=d,
    )


# ---------------------------------------------------------------------------------- launchers
def _tma_desc(out, block, variant):
    """A tensor descriptor of ``out`` for TMA stores, or None where TMA cannot address it
    (strided or misaligned rows) or the variant switches it off."""
    if not variant.get("tma", True) or TensorDescriptor is None:
        return None
    es = out.element_size()
    if out.stride(1) != 1 or (out.stride(0) * es) % 16 or out.data_ptr() % 16 or out.shape[0] < 1:
        return None
    return TensorDescriptor(out, shape=list(out.shape), strides=[out.stride(0), 1],
                            block_shape=[block, block])


def _off64(out, block):
    return 2 * block * max(abs(out.stride(0)), abs(out.stride(1)), 1) >= 2**31


def _grid(n, m, block, triangle, group):
    """(number of programs, super-tile size) of the Gram kernels (see ``_tile_coords``); the
    super-tile never exceeds the number of blocks (fewer empty programs for small N)."""
    nb_m, nb_n = triton.cdiv(n, block), triton.cdiv(m, block)
    if not triangle:
        return nb_m * nb_n, 1
    group = max(1, min(int(group), nb_m))
    ns = triton.cdiv(nb_m, group)
    return ns * (ns + 1) // 2 * group * group, group


def _launch_mma(ops, plan, out, symmetric, cfg, variant):
    triangle = symmetric and bool(variant.get("mma_triangle", True))
    nprog, group = _grid(ops.n, ops.m, cfg.block, triangle, variant.get("group", 1))
    sq = plan.pairwise == E.PW_SQEUCLIDEAN.value
    tau = E.TAU if sq else 0.0
    flags = torch.empty((nprog,), dtype=torch.int32, device=out.device) if tau > 0 else ops.nx
    off64 = _off64(out, cfg.block)
    desc = _tma_desc(out, cfg.block, variant)
    _gram_mma_kernel[(nprog,)](
        ops.x, ops.y, ops.nx, ops.ny, ops.prm, out, desc, flags,
        ops.n, ops.m, ops.kd, plan.deg, group,
        ops.x.stride(0), ops.y.stride(0), out.stride(0), out.stride(1),
        BLOCK_K=cfg.block_k, KIND=plan.kind, PAIRWISE=plan.pairwise, TRIANGLE=triangle,
        DIAG=symmetric, STATIONARY=plan.stationary, SPLIT=ops.split, DOT_PREC=ops.dot_prec,
        TAU_=tau, TSTORE=bool(variant.get("tstore", False)), OFF64=off64,
        STORE_CS=bool(variant.get("store_cs", False)), LOAD_EL=bool(variant.get("load_el", False)),
        TMA=desc is not None, **cfg.kwargs(),
    )
    if tau > 0:
        rx, ry = ops.raw_x, ops.raw_y
        scan = 32 if P.INTERPRET else 256
        _gram_fix_kernel[(triton.cdiv(nprog, scan),)](
            rx, ry, ops.mean, ops.scale if ops.scale is not None else ops.mean, ops.prm, out, desc,
            flags, ops.n, ops.m, ops.d, plan.deg, group, nprog,
            rx.stride(0), rx.stride(1), ry.stride(0), ry.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=cfg.block, BLOCK_N=cfg.block, KIND=plan.kind, TRIANGLE=triangle,
            DIAG=symmetric, SCALE=ops.scale is not None, OFF64=off64, TMA=desc is not None,
            SCAN=scan, num_warps=cfg.num_warps, num_stages=1,
        )
    return out


@dataclass
class DirectOperands:
    """Feature-major, row-padded operands of ``_gram_direct_kernel``."""

    x: torch.Tensor
    y: torch.Tensor
    nx: torch.Tensor
    prm: torch.Tensor
    n: int
    m: int
    d: int
    dk: int


def prepare_direct(x, y, plan, symmetric):
    """(D, rows padded) operands: raw values in the accumulation dtype, or with per-feature scales
    (x - mean) scale in float64 rounded once (scaling uncentred data would round each coordinate
    relative to its offset and lose the differences); cosine: normalised rows."""
    acc = P.acc_dtype(x.dtype)
    dev = x.device
    n, d = x.shape
    m = n if symmetric else y.shape[0]
    cos_diag = None
    if plan.cosine:
        x, cos_diag = P._normalize_rows(x.to(acc))
        y = None if symmetric else P._normalize_rows(y.to(acc))[0]
    scale = mean = None
    if plan.scale is not None:
        scale = torch.as_tensor(plan.scale, dtype=torch.float64, device=dev)
        mean = x.mean(dim=0, dtype=torch.float64)
    xb, nx = _prep_launch(x, mean, scale, d, False, acc, acc, feature_major=True)
    yb = xb if symmetric else _prep_launch(y, mean, scale, d, False, acc, acc, feature_major=True)[0]
    if cos_diag is not None and symmetric:
        nx[:n].copy_(cos_diag)
    return DirectOperands(x=xb, y=yb, nx=nx, prm=P._params_tensor(plan.prm, acc, dev), n=n, m=m,
                          d=d, dk=d if d <= P.DIRECT_MAX_D else 0)


def _launch_direct(ops, plan, out, symmetric, cfg, variant):
    triangle = symmetric and bool(variant.get("direct_triangle", True))
    nprog, group = _grid(ops.n, ops.m, cfg.block, triangle, variant.get("group", 1))
    desc = _tma_desc(out, cfg.block, variant)
    _gram_direct_kernel[(nprog,)](
        ops.x, ops.y, ops.nx, ops.prm, out, desc,
        ops.n, ops.m, ops.d, plan.deg, group,
        ops.x.stride(0), ops.x.stride(1), ops.y.stride(0), ops.y.stride(1),
        out.stride(0), out.stride(1),
        KIND=plan.kind, PAIRWISE=plan.pairwise, TRIANGLE=triangle, DIAG=symmetric,
        STATIONARY=plan.stationary, DK=ops.dk, TSTORE=bool(variant.get("tstore", False)),
        OFF64=_off64(out, cfg.block), STORE_CS=bool(variant.get("store_cs", False)),
        TMA=desc is not None, **cfg.kwargs(),
    )
    return out


def uses_mma(plan, d):
    """Whether K takes the tensor-core path (else direct differences)."""
    return not (plan.pairwise == E.PW_MANHATTAN.value or d <= P.DIRECT_MAX_D)


def gram_fwd(x, y, plan, out, precision, symmetric, config=None, variant=None):
    """Prepare the operands and launch the Gram kernels; ``y`` is None for K(X, X).

    ``config``: a :class:`GramConfig` to launch with instead of the heuristic / autotuned one
    (tests run every candidate); ``variant``: switches of ``DEFAULT_VARIANT`` (benchmarks).
    """
    var = dict(DEFAULT_VARIANT, **(variant or {}))
    d = x.shape[1]
    if uses_mma(plan, d):
        ops = prepare_mma(x, y, plan, precision, symmetric)
        elem = ops.x.element_size()
        if config is None:
            config = (_autotuned_mma(ops, plan, out, symmetric, var) if P.autotuning()
                      else mma_default_config(ops.kd, ops.split, elem))
        return _launch_mma(ops, plan, out, symmetric, config, var)
    ops = prepare_direct(x, y, plan, symmetric)
    if config is None:
        config = (_autotuned_direct(ops, plan, out, symmetric, var) if P.autotuning()
                  else direct_default_config(d, plan.pairwise))
    return _launch_direct(ops, plan, out, symmetric, config, var)


# ------------------------------------------------------------------ opt-in autotuning (cached)
_TUNED = {}


def _bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")


def _autotuned(key, candidates, run):
    """Benchmark each candidate config once per key (KERNELKIT_GPU_AUTOTUNE=1); cache the best."""
    best = _TUNED.get(key)
    if best is None:
        if len(candidates) == 1:
            best = candidates[0]
        else:
            times = []
            for c in candidates:
                try:
                    times.append((_bench(lambda c=c: run(c)), c))
                except Exception:  # noqa: BLE001 - a config that does not fit is skipped
                    continue
            best = min(times, key=lambda tc: tc[0])[1] if times else candidates[-1]
        _TUNED[key] = best
    return best


def _autotuned_mma(ops, plan, out, symmetric, var):
    elem = ops.x.element_size()
    key = ("mma", ops.kd, ops.split, elem, plan.kind, plan.pairwise, symmetric, ops.dot_prec,
           str(out.device))
    return _autotuned(key, mma_configs(ops.kd, ops.split, elem),
                      lambda c: _launch_mma(ops, plan, out, symmetric, c, var))


def _autotuned_direct(ops, plan, out, symmetric, var):
    key = ("direct", ops.dk, P.triton_next_pow2(ops.d), plan.kind, plan.pairwise, symmetric,
           str(out.device))
    return _autotuned(key, direct_configs(ops.d, plan.pairwise),
                      lambda c: _launch_direct(ops, plan, out, symmetric, c, var))


def gram(x, y=None, kernel="rbf", *, precision="accurate", out=None, **params):
    r"""Gram matrix K(X, Y) of a registry kernel, fused in one Triton kernel.

    Equivalent to ``kernelkit_math.registry.get_kernel(kernel).value(X, Y, **params)`` (the float64
    references in :mod:`kernelkit_math.kernels`, e.g. ``kernelkit_math.kernels.rbf(X, Y, gamma)``)
    up to dtype tolerance.

    Parameters
    ----------
    x : torch.Tensor, shape (N, D)
        float32, float64, float16 or bfloat16; on a CUDA device, or on the CPU when the Triton
        interpreter is on (``TRITON_INTERPRET=1`` set before import).
    y : torch.Tensor, shape (M, D), optional
        Same dtype and device as ``x``. ``None`` (or ``y is x``) computes K(X, X): exactly
        symmetric with an exact diagonal; only the upper block triangle is computed.
    kernel : str
        A registry name: linear, polynomial, rbf, laplacian, matern, rational_quadratic, cosine,
        sigmoid, exponential.
    precision : {"accurate", "fast"}
        "accurate" (default): float32 dot products on tensor cores in split precision
        (3xTF32: each centred value is split once into a TF32 head and tail, and
        head·head' + head·tail' + tail·head' runs on TF32 tensor cores), near-IEEE float32.
        Relative Frobenius error against float64 measured on an H100 (benchmarks/gram_variants.py,
        N = 4096): 1.5e-7 at D = 64 and 3.4e-7 at D = 512 on N(0, 1) data, the same on data
        offset by 1000 (spread 0.05) and on near-duplicates; <= 1e-6 is asserted by the tests on
        the GPU (``pytest --device cuda``) and under the Triton interpreter (IEEE products).
        "fast": plain TF32 dot products on centred data (a third of the tensor-core work; each
        value rounded to 10 explicit mantissa bits): measured 2.0e-4 at D = 64 and 6.8e-5 at
        D = 512 on N(0, 1) data (H100); ``benchmarks/gram.py`` writes it as ``fast_rel_fro``.
        Both modes compute D <= 16 and the L1 distance (laplacian) with exact float32 differences.
        float64 input always uses IEEE float64 arithmetic; float16 / bfloat16 input uses the native
        16-bit tensor-core product with float32 accumulation (exact products); per-feature scales
        and cosine upcast 16-bit input to float32 first.
    out : torch.Tensor, shape (N, M), optional
        Written in place and returned: float32 (float64 for float64 input), same device; any strides.
    **params
        Kernel parameters with scikit-learn names, validated by the registry: ``gamma`` (rbf,
        laplacian: scalar or one per feature; polynomial, sigmoid; None means 1 / D), ``degree``,
        ``coef0``, ``scale`` (exponential; None means 1 / sqrt(D)), ``length_scale`` (matern,
        rational_quadratic; scalar or per feature), ``nu`` in {0.5, 1.5, 2.5}, ``alpha``.
        For rbf, gamma = 1 / (2 length_scale²).

    Returns
    -------
    torch.Tensor, shape (N, M)
        float32, or float64 for float64 input.

    Raises
    ------
    TypeError
        ``x``, ``y`` or ``out`` not a tensor or of the wrong dtype; unknown parameter names or
        parameters of the wrong type.
    ValueError
        Wrong shapes, mismatched devices, a CPU tensor without the interpreter, unknown kernel,
        parameters out of range, bad ``precision``.

    Notes
    -----
    Squared distances are :math:`\|\tilde x\|^2 + \|\tilde y\|^2 - 2 \tilde x \cdot \tilde y` on
    centred data (:math:`\tilde x = x - \bar x`), clamped at 0, with a per-tile fallback to direct
    differences where the expansion would cancel (near-duplicates, tight clusters: a tile with one
    pair closer than 1/32 of its norms is flagged and recomputed by a second, small kernel from
    the caller's data; correct always, slower on such data). K(X, X) computes the upper block
    triangle only (in super-tiles that keep the operands in L2) and writes each tile twice.
    16-bit input is not centred (centred values would have to be rounded to 16 bits again); the
    same fallback covers data far from the origin. For D <= 16 and the L1 distance the differences
    are formed directly, one feature at a time. Dot-product kernels (linear, polynomial, sigmoid,
    exponential) are not centred. Cosine normalises rows first (zero rows stay zero, like
    scikit-learn).

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch, kernelkit_gpu
    >>> x = torch.randn(5, 3)
    >>> K = kernelkit_gpu.gram(x, kernel="rbf", gamma=0.5)
    >>> K.shape, bool(torch.equal(K, K.T)), bool((K.diagonal() == 1).all())
    (torch.Size([5, 5]), True, True)
    """
    P.check_pair(x, y)
    P.check_precision(precision)
    symmetric = y is None or y is x
    plan = P.kernel_plan(kernel, x.shape[1], params)
    P.check_triton_device(x)
    n, m = x.shape[0], (x.shape[0] if symmetric else y.shape[0])
    acc = P.acc_dtype(x.dtype)
    if out is None:
        out = torch.empty((n, m), dtype=acc, device=x.device)
    else:
        P.check_out(out, (n, m), acc, x.device)
    if n == 0 or m == 0:
        return out
    return gram_fwd(x, None if symmetric else y, plan, out, precision, symmetric)
