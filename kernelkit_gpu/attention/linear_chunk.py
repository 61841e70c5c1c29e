r"""Triton kernels and launchers of chunked linear attention (forward and backward).

Every pass of :func:`kernelkit_gpu.linear_attention`, forward and backward, causal
or not, is one of three kernels:

``_la_state_kernel`` (segment sums)
    For each (batch-head, segment of SEG_LEN positions, tile of BLOCK_C columns of c):
    S_seg = sum_s b_s c_s^T (D_AB x BLOCK_C, float32) and z_seg = sum_s w_s b_s. The sequence is
    split into segments so that even B = 1, H = 16 fills the GPU; a torch prefix (or suffix) sum over
    the few segments then gives each segment its starting state (the two-level scan).
``_la_chunk_kernel`` (the generic chunked sweep)
    For each (batch-head, segment, tile of BLOCK_C columns of c), starting from the segment's
    state S (D_AB x BLOCK_C, float32), it walks the segment's chunks of CHUNK positions forward
    (or backward with REVERSE) and computes, for the rows t of the chunk,

    .. math::

        o_t = \sum_{s \in \text{chunk}, s \preceq t} (a_t \cdot b_s + \alpha_t \beta_s)\, c_s
              + a_t^\top S + \alpha_t u

    then updates S += b^T c, u += sum_s beta_s c_s (and z += sum_s b_s for the denominator).
    Without CAUSAL only the inter term a_t^T S (+ alpha_t u) remains, with S the full state.
    The four uses:

    ========== ========= ========= ========= ================ ========== ===========
    pass       a         b         c         alpha, beta      direction  extra
    ========== ========= ========= ========= ================ ========== ===========
    forward    phi(q)    phi(k)    v         --               forward    den, divide
    dV         phi(k)    phi(q)    dnum      --               reverse
    dK         v         dnum      phi(q)    1, dden          reverse    x phi'(k)
    dQ         dnum      v         phi(k)    dden, 1          forward    x phi'(q)
    ========== ========= ========= ========= ================ ========== ===========

    with dnum = dout / g and dden = -(dout . out) / g [den > eps], g = max(den, eps) (normalised)
    or dnum = dout, no rank-one term (unnormalised).
``_la_dden_kernel``
    dden per row (the "delta" preprocessing of the normalised backward).

Feature maps are applied on load (and re-masked, since elu(0) + 1 = 1 would leak from padded rows
and columns); 1/g scales the rows of whichever operand is dnum on load; the map's derivative
multiplies dQ and dK before the store.

Precision: accumulation and states float32. Dot operands are the input dtype for bfloat16 and
float16 (the intra-chunk scores are rounded to it for the product with c, as in any 16-bit
attention kernel). For bfloat16 the state is rounded to bfloat16 for the inter-chunk product, as
flash-linear-attention does; for float16 that product runs in TF32 instead (the state stays in
float32 range: z grows like T and would overflow float16's 65504); float32 input uses IEEE
float32 products (``FP32_DOT``; "tf32x3" would run on tensor cores, but with a per-product
error of ~12 units of float32 rounding instead of 1). Measured (B1 H4 T256 D64, elu+1, max error
/ max |reference|, under the interpreter with the GPU's bfloat16 rounding reproduced; float16's
TF32 state rounding is not reproduced there):

========== ================= ================= ==================================
dtype      out (this)        out (torch same)  dq, dk, dv (this / torch same)
========== ================= ================= ==================================
float32    0.7-4e-7          0.7-7e-7          <= 1.1e-6 / <= 1.0e-6
float16    2.4-2.8e-4        3.5-8.8e-4        <= 1.1e-3 / <= 1.0e-2
bfloat16   2.3-3.0e-3        4.0-8.2e-3        <= 6.8e-3 / <= 1.6e-2
========== ================= ================= ==================================

"torch same" is the quadratic parallel form computed in PyTorch in the input dtype; the tests
require at most twice its error. The reciprocals 1 / g and dden's division are correctly rounded
(``tl.math.div_rn``; Triton's float32 ``/`` is the approximate ``div.full.f32``, up to 2 ulp),
once per row, so free next to the products.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernelkit_gpu import _launch
from kernelkit_math.random_features import get_feature_map

__all__ = ["state_sums", "chunk_sweep", "dden_rows", "segment_length"]

#: The fused feature maps' codes (the kernels' MAP and DMAP constexprs), from the feature-map
#: registry (:data:`kernelkit_math.random_features.FEATURE_MAPS`). Identity: no map.
_IDENTITY = tl.constexpr(get_feature_map("identity").fused)
_ELU1 = tl.constexpr(get_feature_map("elu+1").fused)
_RELU = tl.constexpr(get_feature_map("relu").fused)


# ------------------------------------------------------------------------------- jit helpers
@triton.jit
def _bf16_rtne(x):
    """float32 -> the nearest bfloat16 value (ties to even), kept in float32. The interpreter's
    own float32 -> bfloat16 cast truncates; the GPU's rounds to nearest: this matches the GPU."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _guarded_rcp(den, EPS):
    """1 / max(den, eps), and 0 where that is 0 (eps = 0). A NaN den gives NaN, as in the float64
    reference (``tl.maximum``'s default would turn it into eps; ``!=`` is true for NaN)."""
    g = tl.maximum(den, EPS, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(g != 0, tl.math.div_rn(1.0, tl.where(g != 0, g, 1.0)), 0.0)


@triton.jit
def _load_tile(base, rows, rmask, cols, cmask, stride_t, rscale,
               MAP: tl.constexpr, SCALE: tl.constexpr, OPS: tl.constexpr):
    """(rows x cols) tile of a (T, D) matrix with unit column stride, feature-mapped and/or row-
    scaled in float32 when asked, returned as the dot operand dtype: OPS 0 the input dtype,
    1 float32, 2 float32 holding bfloat16-rounded values (the interpreter's stand-in for bfloat16
    operands, which it cannot multiply).

    Feature maps (MAP): the registry's fused codes (identity, elu(x) + 1, relu...); elu+1 is
    re-masked after the map, since elu(0) + 1 = 1 would leak from padded rows and columns. The
    maps keep NaN (min / max with ``propagate_nan``; the default min / max would map NaN to
    1 / 0 and hide it).
    (Small helpers are written inline: the interpreter pays milliseconds per nested jit call.)"""
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(base + rows.to(tl.int64)[:, None] * stride_t + cols[None, :], mask=m2, other=0.0)
    if MAP != _IDENTITY or SCALE or OPS != 0:
        xf = x.to(tl.float32)
        if MAP == _ELU1:
            neg = tl.exp(tl.minimum(xf, 0.0, propagate_nan=tl.PropagateNan.ALL))
            xf = tl.where(m2 & (xf > 0), xf + 1.0, tl.where(m2, neg, 0.0))
        elif MAP == _RELU:
            xf = tl.maximum(xf, 0.0, propagate_nan=tl.PropagateNan.ALL)
        if SCALE:
            xf = xf * rscale[:, None]
        if OPS == 0:
            x = xf.to(base.dtype.element_ty)
        elif OPS == 2:
            x = _bf16_rtne(xf)
        else:
            x = xf
    return x


# ----------------------------------------------------------------------------- segment sums
@triton.jit(do_not_specialize=["LEN_B", "SEG_LEN", "N_SEG"])
def _la_state_kernel(
    b_ptr, c_ptr, den_ptr, w_ptr, s_ptr, z_ptr,
    LEN_B, DAB, DC, SEG_LEN, N_SEG, H, EPS,
    sbb, sbh, sbt, scb, sch, sct,
    ss_bh, ss_seg, ss_r, ss_c, sz_bh, sz_seg, sz_r,
    BLOCK_T: tl.constexpr, BLOCK_AB: tl.constexpr, BLOCK_C: tl.constexpr, DC_PAD: tl.constexpr,
    MAP_B: tl.constexpr, MAP_C: tl.constexpr, SCALE_C: tl.constexpr, WZ: tl.constexpr,
    OPS: tl.constexpr, DOT_PREC: tl.constexpr,
):
    """s[bh, seg] = sum_{s in seg} b_s c_s^T; z[bh, seg] = sum_s w_s b_s (WZ 1: w = 1, 2: w_ptr)."""
    # one flat grid axis (axes 1 and 2 stop at 65535): c-tiles of one (bh, segment) adjacent,
    # so that they share their a / b tiles through L2
    pid = tl.program_id(0)
    n_ct = tl.cdiv(DC, BLOCK_C)
    pid_c = pid % n_ct
    seg = (pid // n_ct) % N_SEG
    bh = pid // (n_ct * N_SEG)
    bi = (bh // H).to(tl.int64)
    hi = (bh % H).to(tl.int64)
    b_base = b_ptr + bi * sbb + hi * sbh
    c_base = c_ptr + bi * scb + hi * sch
    offs_ab = tl.arange(0, BLOCK_AB)
    m_ab = offs_ab < DAB
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    m_c = offs_c < DC
    row_base = bh.to(tl.int64) * LEN_B
    acc = tl.zeros((BLOCK_AB, BLOCK_C), tl.float32)
    zacc = tl.zeros((BLOCK_AB,), tl.float32)
    start = seg * SEG_LEN
    end = tl.minimum(start + SEG_LEN, LEN_B)
    for t0 in range(start, end, BLOCK_T):
        rows = t0 + tl.arange(0, BLOCK_T)
        rm = rows < end
        rg = tl.zeros((BLOCK_T,), tl.float32)
        if SCALE_C:
            rg = _guarded_rcp(tl.load(den_ptr + row_base + rows, mask=rm, other=1.0), EPS)
        b = _load_tile(b_base, rows, rm, offs_ab, m_ab, sbt, rg, MAP_B, False, OPS)
        c = _load_tile(c_base, rows, rm, offs_c, m_c, sct, rg, MAP_C, SCALE_C, OPS)
        acc = tl.dot(tl.trans(b), c, acc, input_precision=DOT_PREC)
        if WZ == 1:
            zacc += tl.sum(b.to(tl.float32), axis=0)
        elif WZ == 2:
            w = tl.load(w_ptr + row_base + rows, mask=rm, other=0.0)
            zacc += tl.sum(b.to(tl.float32) * w[:, None], axis=0)
    sbase = s_ptr + bh.to(tl.int64) * ss_bh + seg.to(tl.int64) * ss_seg
    tl.store(sbase + offs_ab[:, None] * ss_r + offs_c[None, :] * ss_c, acc,
             mask=m_ab[:, None] & m_c[None, :])
    if WZ != 0:
        zbase = z_ptr + bh.to(tl.int64) * sz_bh + seg.to(tl.int64) * sz_seg
        tl.store(zbase + offs_ab * sz_r, zacc, mask=m_ab & ((offs_ab * 0 + pid_c) == 0))


# -------------------------------------------------------------------------- chunked sweep
@triton.jit(do_not_specialize=["LEN_A", "LEN_B", "SEG_LEN", "N_SEG"])
def _la_chunk_kernel(
    a_ptr, b_ptr, c_ptr, x_ptr, o_ptr,
    den_ptr, w_ptr, den_out_ptr, s0_ptr, u0_ptr, z0_ptr,
    LEN_A, LEN_B, DAB, DC, SEG_LEN, N_SEG, H, EPS,
    sab, sah, sat, sbb, sbh, sbt, scb, sch, sct, sxb, sxh, sxt, sob, soh, sot,
    ss_bh, ss_seg, ss_r, ss_c, su_bh, su_seg, su_c, sz_bh, sz_seg, sz_r,
    BLOCK_AB: tl.constexpr, DC_PAD: tl.constexpr,
    MAP_A: tl.constexpr, MAP_B: tl.constexpr, MAP_C: tl.constexpr, DMAP: tl.constexpr,
    SCALE: tl.constexpr, RANK1: tl.constexpr, DEN: tl.constexpr,
    CAUSAL: tl.constexpr, REVERSE: tl.constexpr,
    OPS: tl.constexpr, STATE_F32: tl.constexpr, DOT_PREC: tl.constexpr,
    STATE_PREC: tl.constexpr,
    BLOCK_C: tl.constexpr, CHUNK: tl.constexpr,
):
    """One (batch-head, segment, c-tile): the chunked sweep described in the module docstring.

    a, x, o rows (LEN_A) are the output side; b, c rows (LEN_B) the summed side. SCALE picks the
    operand whose rows are divided by the guarded denominator den_ptr (1: a, 2: b, 3: c; rows of
    the query side). RANK1 1: alpha = w (rows of a), beta = 1; 2: alpha = 1, beta = w (rows of b).
    DEN (forward, normalised): den = row sums + a . z, o /= max(den, eps), den stored.
    DMAP: o *= phi'(x) for feature map DMAP.
    """
    # one flat grid axis (axes 1 and 2 stop at 65535): c-tiles of one (bh, segment) adjacent,
    # so that they share their a / b tiles through L2
    pid = tl.program_id(0)
    n_ct = tl.cdiv(DC, BLOCK_C)
    pid_c = pid % n_ct
    seg = (pid // n_ct) % N_SEG
    bh = pid // (n_ct * N_SEG)
    bi = (bh // H).to(tl.int64)
    hi = (bh % H).to(tl.int64)
    a_base = a_ptr + bi * sab + hi * sah
    b_base = b_ptr + bi * sbb + hi * sbh
    c_base = c_ptr + bi * scb + hi * sch
    x_base = x_ptr + bi * sxb + hi * sxh
    o_base = o_ptr + bi * sob + hi * soh
    # per-row vectors (den, w, den_out) are (B*H, L) with L = LEN_A or LEN_B of their side
    ra_base = bh.to(tl.int64) * LEN_A
    rb_base = bh.to(tl.int64) * LEN_B

    offs_ab = tl.arange(0, BLOCK_AB)
    m_ab = offs_ab < DAB
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    m_c = offs_c < DC
    ar = tl.arange(0, CHUNK)

    sb = s0_ptr + bh.to(tl.int64) * ss_bh + seg.to(tl.int64) * ss_seg
    S = tl.load(sb + offs_ab[:, None] * ss_r + offs_c[None, :] * ss_c,
                mask=m_ab[:, None] & m_c[None, :], other=0.0)
    u = tl.zeros((BLOCK_C,), tl.float32)
    if RANK1 != 0:
        u = tl.load(u0_ptr + bh.to(tl.int64) * su_bh + seg.to(tl.int64) * su_seg + offs_c * su_c,
                    mask=m_c, other=0.0)
    z = tl.zeros((BLOCK_AB,), tl.float32)
    if DEN:
        z = tl.load(z0_ptr + bh.to(tl.int64) * sz_bh + seg.to(tl.int64) * sz_seg + offs_ab * sz_r,
                    mask=m_ab, other=0.0)

    start = seg * SEG_LEN
    if CAUSAL:
        n_pos = tl.maximum(LEN_A, LEN_B)
    else:
        n_pos = LEN_A
    n_chunks = tl.cdiv(tl.minimum(SEG_LEN, n_pos - start), CHUNK)
    for i in range(0, n_chunks):
        if REVERSE:
            ci = n_chunks - 1 - i
        else:
            ci = i
        rows = start + ci * CHUNK + ar
        ma = rows < LEN_A
        mb = rows < LEN_B
        rga = tl.zeros((CHUNK,), tl.float32)
        rgb = tl.zeros((CHUNK,), tl.float32)
        if SCALE == 1:
            rga = _guarded_rcp(tl.load(den_ptr + ra_base + rows, mask=ma, other=1.0), EPS)
        if SCALE == 2 or SCALE == 3:
            rgb = _guarded_rcp(tl.load(den_ptr + rb_base + rows, mask=mb, other=1.0), EPS)
        a = _load_tile(a_base, rows, ma, offs_ab, m_ab, sat, rga, MAP_A, SCALE == 1, OPS)
        # inter-chunk part: a_t^T S (+ alpha_t u)
        if STATE_F32:
            acc = tl.dot(a.to(tl.float32), S, input_precision=STATE_PREC)
        elif OPS == 2:
            acc = tl.dot(a, _bf16_rtne(S), input_precision=DOT_PREC)
        else:
            acc = tl.dot(a, S.to(a.dtype), input_precision=DOT_PREC)
        alpha = tl.zeros((CHUNK,), tl.float32)
        if RANK1 == 1:
            alpha = tl.load(w_ptr + ra_base + rows, mask=ma, other=0.0)
            acc += alpha[:, None] * u[None, :]
        if RANK1 == 2:
            acc += u[None, :]
        den = tl.zeros((CHUNK,), tl.float32)
        if DEN:
            den = tl.sum(a.to(tl.float32) * z[None, :], axis=1)
        if CAUSAL:
            b = _load_tile(b_base, rows, mb, offs_ab, m_ab, sbt, rgb, MAP_B, SCALE == 2, OPS)
            c = _load_tile(c_base, rows, mb, offs_c, m_c, sct, rgb, MAP_C, SCALE == 3, OPS)
            p = tl.dot(a, tl.trans(b), input_precision=DOT_PREC)
            beta = tl.zeros((CHUNK,), tl.float32)
            if RANK1 == 1:
                p += alpha[:, None]
            if RANK1 == 2:
                beta = tl.load(w_ptr + rb_base + rows, mask=mb, other=0.0)
                p += beta[None, :]
            if REVERSE:
                keep = ar[None, :] >= ar[:, None]
            else:
                keep = ar[None, :] <= ar[:, None]
            p = tl.where(keep, p, 0.0)
            if DEN:
                den += tl.sum(p, axis=1)
            if OPS == 2:
                p = _bf16_rtne(p)
            acc = tl.dot(p.to(c.dtype), c, acc, input_precision=DOT_PREC)
            # state update with this chunk (after its use: S holds the chunks before / after)
            S = tl.dot(tl.trans(b), c, S, input_precision=DOT_PREC)
            if RANK1 == 1:
                u += tl.sum(c.to(tl.float32), axis=0)
            if RANK1 == 2:
                u += tl.sum(c.to(tl.float32) * beta[:, None], axis=0)
            if DEN:
                z += tl.sum(b.to(tl.float32), axis=0)
        if DEN:
            acc = acc * _guarded_rcp(den, EPS)[:, None]
            tl.store(den_out_ptr + ra_base + rows, den, mask=ma & ((ar * 0 + pid_c) == 0))
        m_out = ma[:, None] & m_c[None, :]
        if DMAP != _IDENTITY:
            x = tl.load(x_base + rows.to(tl.int64)[:, None] * sxt + offs_c[None, :], mask=m_out,
                        other=0.0)
            xf = x.to(tl.float32)
            # phi'(NaN) is NaN: the gradient of a NaN input stays NaN, as in torch autograd
            if DMAP == _ELU1:
                acc = acc * tl.where(xf > 0, 1.0,
                                     tl.exp(tl.minimum(xf, 0.0, propagate_nan=tl.PropagateNan.ALL)))
            elif DMAP == _RELU:
                acc = tl.where(xf <= 0, 0.0, acc)
        if OPS == 2:
            acc = _bf16_rtne(acc)  # so that the store's (truncating, in the interpreter) cast is exact
        tl.store(o_base + rows.to(tl.int64)[:, None] * sot + offs_c[None, :],
                 acc.to(o_ptr.dtype.element_ty), mask=m_out)


# ------------------------------------------------------------------------------------ dden
@triton.jit(do_not_specialize=["T"])
def _la_dden_kernel(do_ptr, o_ptr, den_ptr, dden_ptr, T, DV, H, EPS,
                    sdb, sdh, sdt, sob, soh, sot,
                    BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr):
    """dden_t = -(dout_t . out_t) / max(den_t, eps) where den_t > eps, else 0."""
    n_t = tl.cdiv(T, BLOCK_T)
    pid = tl.program_id(0) % n_t
    bh = tl.program_id(0) // n_t
    bi = (bh // H).to(tl.int64)
    hi = (bh % H).to(tl.int64)
    rows = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    rm = rows < T
    cols = tl.arange(0, BLOCK_V)
    m2 = rm[:, None] & (cols[None, :] < DV)
    r64 = rows.to(tl.int64)[:, None]
    do = tl.load(do_ptr + bi * sdb + hi * sdh + r64 * sdt + cols[None, :], mask=m2, other=0.0)
    o = tl.load(o_ptr + bi * sob + hi * soh + r64 * sot + cols[None, :], mask=m2, other=0.0)
    dot = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
    den = tl.load(den_ptr + bh.to(tl.int64) * T + rows, mask=rm, other=1.0)
    g = tl.maximum(den, EPS)
    dden = tl.where(den > EPS, tl.math.div_rn(-dot, tl.where(g > 0, g, 1.0)), 0.0)
    tl.store(dden_ptr + bh.to(tl.int64) * T + rows, dden, mask=rm)


# -------------------------------------------------------------------------------- configs
def _cfg(block_c, chunk, warps, stages):
    return triton.Config({"BLOCK_C": block_c, "CHUNK": chunk}, num_warps=warps, num_stages=stages)


def _chunk_configs(dc_pad, chunk, causal, fp32):
    """A small set per (padded c width, chunk, mode, float32); one config under the interpreter.

    Chosen from offline sm_90 compiles (ptxas register and spill counts, D = 64, 128, 256).
    float32 products ("ieee") are FMA loops: small tiles. Non-causal 16-bit: BLOCK_C = 128 (q
    read once) at 8 warps; its single product a S spreads them as warpsPerCTA [4, 2].

    Causal 16-bit: 4 warps (one warpgroup) with CHUNK = 64, never 8. Triton 3.6 gives the score
    product a b^T, being chained into p c, all the warps along M (warpsPerCTA [8, 1]); with
    M = CHUNK = 64 the second warpgroup holds a replica of the 64 rows, and kernels so laid out
    read shared memory out of range (compute-sanitizer on an sm_90 GPU: "out-of-range
    shared or local address" in the wgmma of a b^T where a comes straight from shared memory
    (dK's v), and in the forward's row sums of p at D = 128; an illegal memory access without
    it, which killed the CUDA context). With 4 warps sm_90 ptxas reports at D = 128, bfloat16:
    BLOCK_C = 32 234 registers and no spills, BLOCK_C = 64 255 registers and 56-176 bytes of
    spills; the autotuner picks. CHUNK = 128 at 8 warps (two 64-row warpgroups) would be legal
    but needs segments of 128 and spills at BLOCK_C = 64.
    """
    if _launch.INTERPRET:
        return [_cfg(min(dc_pad, 32), chunk or 64, 4, 1)]
    bc64, bc32 = min(dc_pad, 64), min(dc_pad, 32)
    if fp32:
        return [_cfg(bc32, chunk or 16, 4, 1), _cfg(bc32, chunk or 32, 8, 1)]
    if not causal:
        return [_cfg(min(dc_pad, 128), chunk or 64, 8, 2), _cfg(bc64, chunk or 64, 4, 2)]
    warps = 8 if (chunk or 64) >= 128 else 4
    return [_cfg(bc32, chunk or 64, warps, 2), _cfg(bc64, chunk or 64, warps, 2)]


def _state_configs(dc_pad, fp32):
    if _launch.INTERPRET:
        return [triton.Config({"BLOCK_T": 64, "BLOCK_C": min(dc_pad, 32)}, num_warps=4, num_stages=1)]
    if fp32:
        return [triton.Config({"BLOCK_T": 32, "BLOCK_C": min(dc_pad, 32)}, num_warps=4, num_stages=2),
                triton.Config({"BLOCK_T": 32, "BLOCK_C": min(dc_pad, 64)}, num_warps=8, num_stages=2)]
    return [triton.Config({"BLOCK_T": 64, "BLOCK_C": min(dc_pad, 64)}, num_warps=4, num_stages=3),
            triton.Config({"BLOCK_T": 64, "BLOCK_C": min(dc_pad, 128)}, num_warps=8, num_stages=3)]


_CHUNK_KEY = ["BLOCK_AB", "DC_PAD", "MAP_A", "MAP_B", "MAP_C", "DMAP", "SCALE", "RANK1", "DEN",
              "CAUSAL", "REVERSE", "OPS", "STATE_F32", "DOT_PREC", "STATE_PREC"]
_STATE_KEY = ["BLOCK_AB", "DC_PAD", "MAP_B", "MAP_C", "SCALE_C", "WZ", "OPS", "DOT_PREC"]


@functools.lru_cache(maxsize=None)
def _chunk_launcher(dc_pad, chunk, causal, fp32):
    configs = _chunk_configs(dc_pad, chunk, causal, fp32)
    return triton.autotune(configs=configs, key=_CHUNK_KEY)(_la_chunk_kernel)


@functools.lru_cache(maxsize=None)
def _state_launcher(dc_pad, fp32):
    return triton.autotune(configs=_state_configs(dc_pad, fp32), key=_STATE_KEY)(_la_state_kernel)


# ------------------------------------------------------------------------------ precision
#: Products of float32 input: "ieee" (float32 FMAs; errors as a float32 PyTorch matmul) or
#: "tf32x3" (three TF32 tensor-core products; per-product error ~12 u instead of u; not timed).
FP32_DOT = "ieee"


def precision_plan(dtype):
    """(OPS, STATE_F32, DOT_PREC, STATE_PREC) for an input dtype (see ``_load_tile`` for OPS)."""
    if dtype == torch.float32:
        return 1, True, FP32_DOT, FP32_DOT
    if dtype == torch.float16:
        return 0, True, "ieee", "tf32"
    # bfloat16. The interpreter multiplies bfloat16 dot operands as integers: float32 operands
    # rounded to bfloat16 there, so that its rounding matches the GPU's.
    if _launch.INTERPRET:
        return 2, False, "ieee", "ieee"
    return 0, False, "ieee", "ieee"


@functools.lru_cache(maxsize=8)
def _num_sms(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_sms(device):
    if device.type == "cuda":
        return _num_sms(device.index if device.index is not None else torch.cuda.current_device())
    return 4


def segment_length(n_pos, bh, n_ctiles, device, multiple, waves=4):
    """Positions per segment so that bh x segments x c-tiles programs make about ``waves`` waves
    of the GPU's SMs; a multiple of ``multiple`` (the chunk), at least one chunk."""
    target = waves * num_sms(device)
    per_bh = max(1, -(-target // max(1, bh * n_ctiles)))
    seg = -(-max(1, n_pos) // per_bh)
    seg = -(-seg // multiple) * multiple
    return max(multiple, seg)


# ------------------------------------------------------------------------------- launchers
def _s3(t):
    """(batch, head, row) strides of a (B, H, T, D) tensor with unit column stride."""
    return t.stride(0), t.stride(1), t.stride(2)


def state_sums(b, c, *, n_seg, seg_len, map_b, map_c, den=None, eps=0.0, w=None, wz=1,
               s_out, z_out):
    """Launch the segment sums: s_out[:, :, seg] = sum b_s c_s^T, z_out[:, :, seg] = sum w_s b_s.

    b (B, H, L, DAB), c (B, H, L, DC); den / w (B*H, L) float32; s_out (B*H, n_seg, DAB, DC) and
    z_out (B*H, n_seg, DAB), float32 (any strides).
    """
    B, H, L, dab = b.shape
    dc = c.shape[3]
    ops, _, dot_prec, _ = precision_plan(b.dtype)
    dc_pad = _launch.block_size(dc)
    dummy = s_out
    launcher = _state_launcher(dc_pad, b.dtype == torch.float32 and dot_prec == "ieee")

    def grid(meta):
        return (triton.cdiv(dc, meta["BLOCK_C"]) * n_seg * B * H,)

    launcher[grid](
        b, c, den if den is not None else dummy, w if w is not None else dummy, s_out, z_out,
        L, dab, dc, seg_len, n_seg, H, float(eps),
        *_s3(b), *_s3(c),
        s_out.stride(0), s_out.stride(1), s_out.stride(2), s_out.stride(3),
        z_out.stride(0), z_out.stride(1), z_out.stride(2),
        BLOCK_AB=_launch.block_size(dab), DC_PAD=dc_pad, MAP_B=map_b, MAP_C=map_c,
        SCALE_C=den is not None, WZ=wz, OPS=ops, DOT_PREC=dot_prec,
    )


def chunk_sweep(a, b, c, o, *, s0, seg_len, n_seg, causal, reverse=False, chunk=None,
                map_a=0, map_b=0, map_c=0, x=None, dmap=0, den=None, scale=0, eps=0.0,
                w=None, rank1=0, u0=None, den_out=None, z0=None):
    """Launch the chunked sweep (see ``_la_chunk_kernel``); returns ``o``.

    a (B, H, LA, DAB), b (B, H, LB, DAB), c (B, H, LB, DC), o and x (B, H, LA, DC); s0 a
    (B*H, n_seg, DAB, DC) view, u0 (B*H, n_seg, DC), z0 (B*H, n_seg, DAB) (segment stride 0 for
    one shared state); den, w, den_out (B*H, L) float32 rows of their side.
    """
    B, H, la, dab = a.shape
    lb = b.shape[2]
    dc = o.shape[3]
    ops, state_f32, dot_prec, state_prec = precision_plan(a.dtype)
    dc_pad = _launch.block_size(dc)
    dummy = s0
    if u0 is None:
        u0 = torch.zeros((1, 1, 1), dtype=torch.float32, device=a.device)
    if z0 is None:
        z0 = torch.zeros((1, 1, 1), dtype=torch.float32, device=a.device)
    if x is None:
        x = o
    launcher = _chunk_launcher(dc_pad, chunk, causal, a.dtype == torch.float32 and dot_prec == "ieee")

    def grid(meta):
        return (triton.cdiv(dc, meta["BLOCK_C"]) * n_seg * B * H,)

    launcher[grid](
        a, b, c, x, o,
        den if den is not None else dummy, w if w is not None else dummy,
        den_out if den_out is not None else dummy, s0, u0, z0,
        la, lb, dab, dc, seg_len, n_seg, H, float(eps),
        *_s3(a), *_s3(b), *_s3(c), *_s3(x), *_s3(o),
        s0.stride(0), s0.stride(1), s0.stride(2), s0.stride(3),
        u0.stride(0), u0.stride(1), u0.stride(2), z0.stride(0), z0.stride(1), z0.stride(2),
        BLOCK_AB=_launch.block_size(dab), DC_PAD=dc_pad, MAP_A=map_a, MAP_B=map_b, MAP_C=map_c,
        DMAP=dmap, SCALE=scale, RANK1=rank1, DEN=den_out is not None, CAUSAL=causal, REVERSE=reverse,
        OPS=ops, STATE_F32=state_f32, DOT_PREC=dot_prec, STATE_PREC=state_prec,
    )
    return o


def dden_rows(do, out, den, eps, dden):
    """dden (B*H, T) float32 from dout, out (B, H, T, Dv) and den (B*H, T)."""
    B, H, T, dv = out.shape
    block_t = 64
    grid = (triton.cdiv(T, block_t) * B * H,)
    _la_dden_kernel[grid](do, out, den, dden, T, dv, H, float(eps), *_s3(do), *_s3(out),
                          BLOCK_T=block_t, BLOCK_V=_launch.block_size(dv), num_warps=4)
    return dden
