"""Backward of the FlashAttention-2-style softmax attention (:mod:`kernelkit_gpu.attention.softmax`).

Layers (see ARCHITECTURE.md):

* ``_attn_bwd_preprocess``: delta_i = rowsum(dO_i * O_i) - dlse_i.
* ``_attn_bwd_dkdv_kernel``: one program per (BLOCK_N1 keys, batch, key/value head); it loops over
  the H / H_kv query heads of its group and over the query blocks, accumulating dK and dV in
  registers. GQA therefore needs no atomics and no (B, H, S, D) scratch buffers.
* ``_attn_bwd_dq_kernel``: one program per (BLOCK_M2 queries, batch-head), looping over key blocks.
* ``attn_bwd``: the launcher, called by
  :class:`kernelkit_gpu.attention.softmax.SoftmaxAttentionFunction`.

Config sets and pruning: :mod:`kernelkit_gpu.attention._configs`; tile loads and the tensor-core
product: :mod:`kernelkit_gpu.attention._tiles`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu.attention import _varlen
from kernelkit_gpu.attention._varlen import _table_row
from kernelkit_gpu import _launch
from kernelkit_gpu.attention._tiles import _load_cols, _load_rows, _mm
from kernelkit_gpu.epilogues import LOG2E

__all__ = ["attn_bwd"]


@triton.jit
def _attn_bwd_preprocess(o_ptr, do_ptr, dlse_ptr, delta_ptr, H, T, DV,
                         stride_ob, stride_oh, stride_ot, stride_od,
                         stride_gb, stride_gh, stride_gt, stride_gd,
                         BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr, HAS_DLSE: tl.constexpr):
    """delta[bh, i] = sum_d dO[i, d] O[i, d] - dlse[i] (float32)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, BLOCK_DV)
    o = _load_rows(o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh, offs_m, offs_dv,
                   stride_ot, stride_od, T, DV, True, True)
    do = _load_rows(do_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh, offs_m, offs_dv,
                    stride_gt, stride_gd, T, DV, True, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    rows = bh.to(tl.int64) * T + offs_m
    if HAS_DLSE:
        delta -= tl.load(dlse_ptr + rows, mask=offs_m < T, other=0.0)
    tl.store(delta_ptr + rows, delta, mask=offs_m < T)


@triton.jit
def _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_ptr, delta_ptr, m0, offs_n, offs_d,
                        offs_dv, T, S, SHIFT, LOWER, D, DV, qk_scale,
                        stride_qt, stride_qd, stride_gt, stride_gd,
                        BLOCK_M1: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                        WINDOW: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                        PREC: tl.constexpr, UPCAST: tl.constexpr):
    """dK, dV of the key block from one block of BLOCK_M1 queries (transposed formulation)."""
    offs_m = m0 + tl.arange(0, BLOCK_M1)
    qT = _load_cols(q_base, offs_d, offs_m, stride_qd, stride_qt, D, T, not EVEN_D, MASKED)
    do = _load_rows(do_base, offs_m, offs_dv, stride_gt, stride_gd, T, DV, MASKED, not EVEN_DV)
    if MASKED:
        lse2 = tl.load(lse_ptr + offs_m, mask=offs_m < T, other=0.0)
        di = tl.load(delta_ptr + offs_m, mask=offs_m < T, other=0.0)
    else:
        lse2 = tl.load(lse_ptr + offs_m)
        di = tl.load(delta_ptr + offs_m)
    qkT = _mm(k, qT, None, PREC, UPCAST)
    pT = tl.exp2(qkT * qk_scale - lse2[None, :])
    if MASKED:
        valid = offs_m[None, :] < T
        if CAUSAL:
            valid = valid & (offs_n[:, None] <= offs_m[None, :] + SHIFT)
        if WINDOW:
            # (and j < S: a row whose window holds only the padding keys past S has lse -inf)
            valid = valid & (offs_n[:, None] >= offs_m[None, :] + LOWER) & (offs_n[:, None] < S)
        pT = tl.where(valid, pT, 0.0)  # also drops exp2(+inf) of rows without keys (lse -inf)
    dv = _mm(pT.to(do.dtype), do, dv, PREC, UPCAST)
    dpT = _mm(v, tl.trans(do), None, PREC, UPCAST)
    dsT = pT * (dpT - di[None, :])
    dk = _mm(dsT.to(qT.dtype), tl.trans(qT), dk, PREC, UPCAST)
    return dk, dv


@triton.autotune(configs=_attn_configs.dkdv_configs(),
                 key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "WINDOW", "PREC", "VARLEN"],
                 prune_configs_by={"early_config_prune": _attn_configs.prune_dkdv})
@triton.jit(do_not_specialize=["H", "H_KV", "GROUP", "T", "S", "SHIFT", "LOWER", "NSEQ"])
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, tab_ptr,
    H, H_KV, GROUP, T, S, SHIFT, LOWER, NSEQ, D, DV, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr, VARLEN: tl.constexpr,
):
    """dK and dV of BLOCK_N1 keys of one key/value head, summed over the GROUP query heads. Masks
    as the forward kernel's (CAUSAL: j <= i + SHIFT, WINDOW: j >= i + LOWER). With VARLEN the
    key block is row ``pid`` of the tile table, as in the forward kernel."""
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // H_KV
    hk = bhk % H_KV
    if VARLEN:
        start, TQ, n0 = _table_row(tab_ptr, pid_n, S, NSEQ, BLOCK_N1)
        SK = TQ
        start = start.to(tl.int64)
    else:
        TQ = T
        SK = S
        start = 0
        n0 = pid_n * BLOCK_N1
    offs_n = n0 + tl.arange(0, BLOCK_N1)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    dk_base = dk_ptr + b.to(tl.int64) * stride_dkb + hk.to(tl.int64) * stride_dkh
    dv_base = dv_ptr + b.to(tl.int64) * stride_dvb + hk.to(tl.int64) * stride_dvh
    if VARLEN:
        k_base += start * stride_kn
        v_base += start * stride_vn
        dk_base += start * stride_dkn
        dv_base += start * stride_dvn
    k = _load_rows(k_base, offs_n, offs_d, stride_kn, stride_kd, SK, D, True, not EVEN_D)
    v = _load_rows(v_base, offs_n, offs_dv, stride_vn, stride_vd, SK, DV, True, not EVEN_DV)
    dk = tl.zeros((BLOCK_N1, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N1, BLOCK_DV), tl.float32)

    # Query blocks [lo, mid) hold the causal diagonal (masked); [mid, t_full) are fully visible
    # full blocks; [max(mid, t_full), T) is the masked ragged tail. Query i sees key j iff
    # j <= i + SHIFT: rows before n0 - SHIFT see no key of this block (lo is the block of that
    # row), rows from n0 + BLOCK_N1 - 1 - SHIFT on see all of them (mid); both clamped at 0.
    if CAUSAL:
        lo = (tl.maximum(n0 - SHIFT, 0) // BLOCK_M1) * BLOCK_M1
        mid = tl.cdiv(tl.maximum(n0 + BLOCK_N1 - 1 - SHIFT, 0), BLOCK_M1) * BLOCK_M1
        diag_end = tl.minimum(mid, tl.cdiv(TQ, BLOCK_M1) * BLOCK_M1)
    else:
        lo = 0
        mid = 0
        diag_end = 0
    t_full = (TQ // BLOCK_M1) * BLOCK_M1
    if WINDOW:
        # The window's left edge j >= i + LOWER: rows after the block's last key's edge
        # n0 + BLOCK_N1 - 1 - LOWER see none of its keys (the blocks from r_end on are never
        # read), rows up to its first key's edge n0 - LOWER see all of them (full blocks below
        # r_full; masked from there to r_end).
        r_end = tl.minimum(TQ, tl.maximum(n0 + BLOCK_N1 - LOWER, 0))
        r_full = tl.minimum(t_full, (tl.maximum(n0 - LOWER + 1, 0) // BLOCK_M1) * BLOCK_M1)
        diag_end = tl.minimum(diag_end, tl.cdiv(r_end, BLOCK_M1) * BLOCK_M1)
    else:
        r_end = TQ
        r_full = t_full
    for hh in range(0, GROUP):
        h = hk * GROUP + hh
        bh = b * H + h
        q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        do_base = do_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh
        lse_base = lse_ptr + bh.to(tl.int64) * T
        delta_base = delta_ptr + bh.to(tl.int64) * T
        if VARLEN:
            q_base += start * stride_qt
            do_base += start * stride_gt
            lse_base += start
            delta_base += start
        for m0 in range(lo, diag_end, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, TQ, SK, SHIFT, LOWER, D, DV,
                                         qk_scale, stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, True, CAUSAL, WINDOW, EVEN_D, EVEN_DV, PREC,
                                         UPCAST)
        for m0 in range(mid, r_full, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, TQ, SK, SHIFT, LOWER, D, DV,
                                         qk_scale, stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, False, CAUSAL, WINDOW, EVEN_D, EVEN_DV, PREC,
                                         UPCAST)
        for m0 in range(tl.maximum(mid, r_full), r_end, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, TQ, SK, SHIFT, LOWER, D, DV,
                                         qk_scale, stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, True, CAUSAL, WINDOW, EVEN_D, EVEN_DV, PREC,
                                         UPCAST)
    dk = dk * sm_scale
    rows = offs_n.to(tl.int64)
    dk_ptrs = dk_base + rows[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    dv_ptrs = dv_base + rows[:, None] * stride_dvn + offs_dv[None, :] * stride_dvd
    tl.store(dk_ptrs, dk.to(dk_ptr.dtype.element_ty), mask=(offs_n[:, None] < SK) & (offs_d[None, :] < D))
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=(offs_n[:, None] < SK) & (offs_dv[None, :] < DV))


@triton.jit
def _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d, offs_dv,
                      S, SHIFT, LOWER, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                      BLOCK_N2: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                      WINDOW: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                      PREC: tl.constexpr, UPCAST: tl.constexpr):
    """dQ of the query block from one block of BLOCK_N2 keys."""
    cols = n0 + tl.arange(0, BLOCK_N2)
    kT = _load_cols(k_base, offs_d, cols, stride_kd, stride_kn, D, S, not EVEN_D, MASKED)
    vT = _load_cols(v_base, offs_dv, cols, stride_vd, stride_vn, DV, S, not EVEN_DV, MASKED)
    qk = _mm(q, kT, None, PREC, UPCAST)
    p = tl.exp2(qk * qk_scale - lse2[:, None])
    if MASKED:
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None] + SHIFT)
        if WINDOW:
            valid = valid & (cols[None, :] >= offs_m[:, None] + LOWER)
        p = tl.where(valid, p, 0.0)
    dp = _mm(do, vT, None, PREC, UPCAST)
    ds = p * (dp - di[:, None])
    dq = _mm(ds.to(kT.dtype), tl.trans(kT), dq, PREC, UPCAST)
    return dq


@triton.autotune(configs=_attn_configs.dq_configs(),
                 key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "WINDOW", "PREC", "VARLEN"],
                 prune_configs_by={"early_config_prune": _attn_configs.prune_dq})
@triton.jit(do_not_specialize=["H", "GROUP", "T", "S", "SHIFT", "LOWER", "NSEQ"])
def _attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, tab_ptr,
    H, GROUP, T, S, SHIFT, LOWER, NSEQ, D, DV, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr, VARLEN: tl.constexpr,
):
    """dQ of BLOCK_M2 queries of one head: sum over the visible key blocks (masks and tile
    ranges as in the forward kernel). With VARLEN the query block is row ``pid`` of the tile
    table, as in the forward kernel."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_base = do_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    dq_base = dq_ptr + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
    row_base = bh.to(tl.int64) * T
    if VARLEN:
        start, TQ, m0 = _table_row(tab_ptr, pid_m, T, NSEQ, BLOCK_M2)
        SK = TQ
        start = start.to(tl.int64)
        q_base += start * stride_qt
        do_base += start * stride_gt
        k_base += start * stride_kn
        v_base += start * stride_vn
        dq_base += start * stride_dqt
        row_base += start
    else:
        TQ = T
        SK = S
        if CAUSAL:
            pid_m = tl.cdiv(T, BLOCK_M2) - 1 - pid_m
        m0 = pid_m * BLOCK_M2
    offs_m = m0 + tl.arange(0, BLOCK_M2)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_base, offs_m, offs_d, stride_qt, stride_qd, TQ, D, True, not EVEN_D)
    do = _load_rows(do_base, offs_m, offs_dv, stride_gt, stride_gd, TQ, DV, True, not EVEN_DV)
    rows = row_base + offs_m
    lse2 = tl.load(lse_ptr + rows, mask=offs_m < TQ, other=0.0)
    di = tl.load(delta_ptr + rows, mask=offs_m < TQ, other=0.0)
    dq = tl.zeros((BLOCK_M2, BLOCK_D), tl.float32)
    if CAUSAL:  # key tiles as in the forward kernel (mask j <= i + SHIFT)
        hi = tl.maximum(tl.minimum(SK, m0 + BLOCK_M2 + SHIFT), 0)
        full_end = (tl.maximum(tl.minimum(SK, m0 + 1 + SHIFT), 0) // BLOCK_N2) * BLOCK_N2
    else:
        hi = SK
        full_end = (SK // BLOCK_N2) * BLOCK_N2
    if WINDOW:  # the forward kernel's window tiles: masked, full, masked
        lo = (tl.maximum(m0 + LOWER, 0) // BLOCK_N2) * BLOCK_N2
        full_start = tl.cdiv(tl.maximum(m0 + BLOCK_M2 - 1 + LOWER, 0), BLOCK_N2) * BLOCK_N2
        for n0 in range(lo, tl.minimum(full_start, hi), BLOCK_N2):
            dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d,
                                   offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale, stride_kn,
                                   stride_kd, stride_vn, stride_vd, BLOCK_N2, True, CAUSAL, True,
                                   EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(full_start, full_end, BLOCK_N2):
            dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d,
                                   offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale, stride_kn,
                                   stride_kd, stride_vn, stride_vd, BLOCK_N2, False, CAUSAL, True,
                                   EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(tl.maximum(full_start, full_end), hi, BLOCK_N2):
            dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d,
                                   offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale, stride_kn,
                                   stride_kd, stride_vn, stride_vd, BLOCK_N2, True, CAUSAL, True,
                                   EVEN_D, EVEN_DV, PREC, UPCAST)
    else:
        for n0 in range(0, full_end, BLOCK_N2):
            dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d,
                                   offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale, stride_kn,
                                   stride_kd, stride_vn, stride_vd, BLOCK_N2, False, CAUSAL, False,
                                   EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(full_end, hi, BLOCK_N2):
            dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d,
                                   offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale, stride_kn,
                                   stride_kd, stride_vn, stride_vd, BLOCK_N2, True, CAUSAL, False,
                                   EVEN_D, EVEN_DV, PREC, UPCAST)
    dq = dq * sm_scale
    dq_ptrs = dq_base + offs_m.to(tl.int64)[:, None] * stride_dqt + offs_d[None, :] * stride_dqd
    tl.store(dq_ptrs, dq.to(dq_ptr.dtype.element_ty), mask=(offs_m[:, None] < TQ) & (offs_d[None, :] < D))


# ----------------------------------------------------------------------------------- launcher
def attn_bwd(do, q, k, v, out, lse2, dlse, *, shift, scale, configs=(None, None), varlen=None,
             lower=None):
    """Gradients (dq, dk, dv) of the attention output (and of the natural lse, ``dlse``, or None).

    ``shift``: None (no mask) or the causal diagonal j <= i + shift, ``lower``: None or the
    window's left edge j >= i + lower, and ``varlen`` (None or ``(table, n_seqs)``), as in
    ``attn_fwd``. Each gradient has its operand's layout.

    ``configs``: (dK/dV config, dQ config) to bypass the autotuner (tests), or None each.
    """
    B, H, T, D = q.shape
    H_kv, S, DV = k.shape[1], k.shape[2], v.shape[3]
    dq, dk, dv = (_attn_configs.alloc_like(t, t.shape, t.dtype) for t in (q, k, v))
    if B * H * T == 0 or S == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = _launch.alloc((B, H, T), torch.float32, q.device)
    has_dlse = dlse is not None
    if has_dlse:
        dlse = dlse.to(torch.float32).contiguous()
    common = dict(_attn_configs.constexprs(D, DV, shift is not None, q.dtype),
                  WINDOW=lower is not None, VARLEN=varlen is not None)
    table, n_seqs = (delta, 0) if varlen is None else varlen
    shift_arg = _attn_configs.diagonal_arg(shift, T, S)
    lower_arg = _attn_configs.diagonal_arg(lower, T, S)
    pre_m = 64 if not _launch.INTERPRET else 32
    _attn_bwd_preprocess[(triton.cdiv(T, pre_m), B * H)](
        out, do, dlse if has_dlse else delta, delta, H, T, DV,
        *out.stride(), *do.stride(),
        BLOCK_M=pre_m, BLOCK_DV=common["BLOCK_DV"], HAS_DLSE=has_dlse,
    )
    qk_scale = scale * LOG2E

    def grid_kv(meta):
        if varlen is None:
            return (triton.cdiv(S, meta["BLOCK_N1"]), B * H_kv)
        return (_varlen.table_rows(S, n_seqs, meta["BLOCK_N1"]), B * H_kv)

    _attn_configs.launch(_attn_bwd_dkdv_kernel, grid_kv, (
        q, k, v, do, lse2, delta, dk, dv, table,
        H, H_kv, H // H_kv, T, S, shift_arg, lower_arg, n_seqs, D, DV, qk_scale, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride(),
    ), common, configs[0])

    def grid_q(meta):
        if varlen is None:
            return (triton.cdiv(T, meta["BLOCK_M2"]), B * H)
        return (_varlen.table_rows(T, n_seqs, meta["BLOCK_M2"]), B * H)

    _attn_configs.launch(_attn_bwd_dq_kernel, grid_q, (
        q, k, v, do, lse2, delta, dq, table,
        H, H // H_kv, T, S, shift_arg, lower_arg, n_seqs, D, DV, qk_scale, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
    ), common, configs[1])
    return dq, dk, dv
