"""FlashAttention-2-style softmax attention in Triton: online-softmax forward, fused backward.

Layers (see ARCHITECTURE.md):

* ``_attn_fwd_kernel``: one program per (BLOCK_M queries, batch-head). Q stays in registers, K and
  V are streamed in BLOCK_N tiles; running max ``m`` and sum ``l`` in the log2 domain (log2(e) is
  folded into the scale, so every exponential is one ``exp2``); float32 accumulators. The key loop
  runs in two stages: unmasked full tiles (keys fully visible to every query of the block), then the
  masked tiles (the causal diagonal and the ragged last tile). With ``is_causal`` the tiles above
  the diagonal are never visited, and query blocks are scheduled longest-first.
* ``_attn_bwd_preprocess``: delta_i = rowsum(dO_i * O_i) - dlse_i.
* ``_attn_bwd_dkdv_kernel``: one program per (BLOCK_N1 keys, batch, key/value head); it loops over
  the H / H_kv query heads of its group and over the query blocks, accumulating dK and dV in
  registers. GQA therefore needs no atomics and no (B, H, S, D) scratch buffers.
* ``_attn_bwd_dq_kernel``: one program per (BLOCK_M2 queries, batch-head), looping over key blocks.
* ``attn_fwd`` / ``attn_bwd``: launchers; ``SoftmaxAttentionFunction``: the autograd.Function;
  ``softmax_attention``: the public function.

The float64 reference is ``kernelkit_math.attention.softmax_attention``; the plain-PyTorch twin is
:func:`kernelkit_gpu.attention_naive.softmax_attention_naive`.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from kernelkit_gpu import _prepare as P
from kernelkit_gpu.attention_naive import MAX_HEAD_DIM, check_qkv, check_scale

__all__ = ["softmax_attention", "attn_fwd", "attn_bwd", "SoftmaxAttentionFunction"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

#: Shared memory budget used to prune configs (bytes; sm_90 allows 227 KiB per block).
_SMEM_BUDGET = 227 * 1024

#: Autotune the attention kernels (softmax and kernel smoother) over their small config sets.
#: False (or KERNELKIT_ATTN_AUTOTUNE=0 at import): the first config that fits, no benchmarking;
#: the GPU test suite uses this to bound compilation time and checks every config separately.
AUTOTUNE = os.environ.get("KERNELKIT_ATTN_AUTOTUNE", "1") != "0"


def _dot_precision(dtype):
    """float32 operands: IEEE float32 products (FMA units). Split-TF32 ("tf32x3") would run on
    tensor cores, but each of its products carries ~2^-21 relative error, 2-3x the error of eager
    float32 attention at small head dims: outside the 2x FlashAttention rule the tests enforce.
    16-bit operands: native tensor-core products with float32 accumulation."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _upcast(dtype):
    """The interpreter's tl.dot mis-multiplies bfloat16 operands (it multiplies bit patterns):
    there the kernels round to bfloat16 as on the GPU and multiply in float32."""
    return bool(P.INTERPRET and dtype == torch.bfloat16)


# ------------------------------------------------------------------------------------- configs
#: Configs tagged ``fallback`` are tried only when every regular config is pruned (head dims
#: above 128, float32 operands): fewer compilations during autotuning of the common cases.
_FALLBACK = set()


def _sig(c):
    return tuple(sorted(c.kwargs.items())) + (c.num_warps, c.num_stages)


def _cfg(bm_key, bn_key, bm, bn, warps, stages, fallback=False):
    c = triton.Config({bm_key: bm, bn_key: bn}, num_warps=warps, num_stages=stages)
    if fallback:
        _FALLBACK.add(_sig(c))
    return c


def _fwd_configs():
    if P.INTERPRET:
        return [_cfg("BLOCK_M", "BLOCK_N", 32, 16, 4, 1)]
    return [
        # first: the default without autotuning (sm_90, D = 128: 165 registers, no spills)
        _cfg("BLOCK_M", "BLOCK_N", 128, 64, 8, 3),
        _cfg("BLOCK_M", "BLOCK_N", 128, 128, 8, 3),  # 224 KiB of shared memory at D = 128
        _cfg("BLOCK_M", "BLOCK_N", 128, 64, 4, 3),
        _cfg("BLOCK_M", "BLOCK_N", 64, 64, 4, 3),
        _cfg("BLOCK_M", "BLOCK_N", 64, 32, 4, 2, fallback=True),
    ]


def _dkdv_configs():
    if P.INTERPRET:
        return [_cfg("BLOCK_M1", "BLOCK_N1", 16, 32, 4, 1)]
    return [
        # sm_90, bf16, D = 128 (ptxas): 64 x 128 spills ~300 B, 32 x 128 (2 stages) ~0-160 B,
        # 16 x 128 none; the autotuner measures which costs least.
        _cfg("BLOCK_M1", "BLOCK_N1", 32, 128, 8, 2),
        _cfg("BLOCK_M1", "BLOCK_N1", 64, 128, 8, 2),
        _cfg("BLOCK_M1", "BLOCK_N1", 16, 128, 8, 3),
        _cfg("BLOCK_M1", "BLOCK_N1", 16, 64, 8, 2, fallback=True),  # D = 256: spills ~0.3 KiB
    ]


def _dq_configs():
    if P.INTERPRET:
        return [_cfg("BLOCK_M2", "BLOCK_N2", 32, 16, 4, 1)]
    return [
        _cfg("BLOCK_M2", "BLOCK_N2", 128, 64, 8, 2),
        _cfg("BLOCK_M2", "BLOCK_N2", 128, 32, 8, 3),
        _cfg("BLOCK_M2", "BLOCK_N2", 64, 64, 4, 2),
        _cfg("BLOCK_M2", "BLOCK_N2", 64, 32, 4, 3, fallback=True),
    ]


#: float32 operands use IEEE products on the FMA units, which keep whole operand fragments in
#: registers: larger tiles spill kilobytes (ptxas, sm_90, D = 128). These compile without spills
#: for D <= 128; float32 is accurate, not fast (cast to bfloat16 for speed).
_FP32_CONFIGS = {
    "fwd": _cfg("BLOCK_M", "BLOCK_N", 32, 16, 4, 2),
    "dkdv": _cfg("BLOCK_M1", "BLOCK_N1", 16, 32, 4, 2),
    "dq": _cfg("BLOCK_M2", "BLOCK_N2", 32, 16, 4, 2),
}


def _elsize(args):
    t = args.get("q_ptr")
    return t.element_size() if hasattr(t, "element_size") else 2


def _prune(configs, args, m_key, n_key, streamed_bytes, register_words, which):
    """Drop configs whose pipelined tiles overflow shared memory, or whose live tiles would need
    far more than the 255 registers a thread has (head dims above 128). Keeps at least the
    smallest config. Estimates only: the autotuner measures the survivors. float32: one fixed
    FMA-friendly config (``_FP32_CONFIGS``)."""
    if P.INTERPRET:
        return configs[:1]
    es = _elsize(args)
    if es == 4:
        return [_FP32_CONFIGS[which]]
    bd, bdv = args["BLOCK_D"], args["BLOCK_DV"]
    kept = []
    for c in configs:
        bm, bn = c.kwargs[m_key], c.kwargs[n_key]
        streamed, resident = streamed_bytes(bm, bn, bd, bdv, es)
        smem = streamed * max(1, c.num_stages) + resident
        regs = register_words(bm, bn, bd, bdv, es) / (32 * c.num_warps)
        if smem <= _SMEM_BUDGET and regs <= 320:
            kept.append(c)
    regular = [c for c in kept if _sig(c) not in _FALLBACK]
    kept = regular or kept
    if not kept:  # nothing fits the estimates: the smallest tile, fewest stages, most warps
        kept = [min(configs, key=lambda c: (c.kwargs[m_key] * c.kwargs[n_key], c.num_stages,
                                             -c.num_warps))]
    return kept if AUTOTUNE else kept[:1]


def _prune_fwd(configs, named_args, **kwargs):
    # shared memory: pipelined K and V tiles, Q staged once (matches ptxas for sm_90);
    # registers: Q, the float32 output and score tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M", "BLOCK_N",
                  lambda m, n, d, dv, es: (n * (d + dv) * es, m * d * es),
                  lambda m, n, d, dv, es: m * (d * es / 4 + dv + n), "fwd")


def _prune_dkdv(configs, named_args, **kwargs):
    # shared memory: pipelined Q and dO tiles, K and V resident; registers: the float32 dK, dV
    # and two (BLOCK_N1, BLOCK_M1) tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M1", "BLOCK_N1",
                  lambda m, n, d, dv, es: (m * (d + dv) * es, n * (d + dv) * es),
                  lambda m, n, d, dv, es: n * ((d + dv) * es / 4 + d + dv + 2 * m), "dkdv")


def _prune_dq(configs, named_args, **kwargs):
    # shared memory: pipelined K and V tiles, Q and dO resident; registers: the float32 dQ and
    # two (BLOCK_M2, BLOCK_N2) tiles.
    return _prune(configs, dict(named_args, **kwargs), "BLOCK_M2", "BLOCK_N2",
                  lambda m, n, d, dv, es: (n * (d + dv) * es, m * (d + dv) * es),
                  lambda m, n, d, dv, es: m * ((d + dv) * es / 4 + d + 2 * n), "dq")


def candidate_configs(dtype, d, dv):
    """The configs the autotuner would try for (dtype, D, Dv): {"fwd": [...], "dkdv": [...], "dq": [...]}."""
    args = dict(q_ptr=torch.empty(0, dtype=dtype), BLOCK_D=_block_dim(d), BLOCK_DV=_block_dim(dv))
    saved = globals()["AUTOTUNE"]
    globals()["AUTOTUNE"] = True
    try:
        return {"fwd": _prune_fwd(_fwd_configs(), args), "dkdv": _prune_dkdv(_dkdv_configs(), args),
                "dq": _prune_dq(_dq_configs(), args)}
    finally:
        globals()["AUTOTUNE"] = saved


def _launch(kernel, grid, args, kwargs, config):
    """Launch through the autotuner, or (``config`` given) the plain jit function with that config."""
    if config is None:
        kernel[grid](*args, **kwargs)
    else:
        kernel.fn[grid](*args, **kwargs, **config.all_kwargs())


# ------------------------------------------------------------------------------ jit helpers
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


# ------------------------------------------------------------------------------------ forward
@triton.jit
def _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n, offs_d, offs_dv,
                   S, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                   EVEN_DV: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """One key tile: update the running max, sum and output of the query block."""
    cols = n0 + offs_n
    kT = _load_cols(k_base, offs_d, cols, stride_kd, stride_kn, D, S, not EVEN_D, MASKED)
    qk = _mm(q, kT, None, PREC, UPCAST)
    if MASKED:
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(valid, qk * qk_scale, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # a row with no visible key yet
        p = tl.exp2(qk - m_sub[:, None])
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_sub = m_ij
        p = tl.exp2(qk * qk_scale - m_sub[:, None])
    alpha = tl.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = _load_rows(v_base, cols, offs_dv, stride_vn, stride_vd, S, DV, MASKED, not EVEN_DV)
    acc = _mm(p.to(v.dtype), v, acc, PREC, UPCAST)
    return acc, l_i, m_ij


@triton.autotune(configs=_fwd_configs(), key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "PREC"],
                 prune_configs_by={"early_config_prune": _prune_fwd})
@triton.jit(do_not_specialize=["H", "GROUP", "T", "S"])
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    H, GROUP, T, S, D, DV, qk_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """out[b, h, block] and lse2 (log2-domain log-sum-exp) of BLOCK_M queries."""
    num_m = tl.cdiv(T, BLOCK_M)
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest rows first: better tail balance
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_base, offs_m, offs_d, stride_qt, stride_qd, T, D, True, not EVEN_D)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)

    # Keys [0, full_end) are visible to every query of the block and lie in full tiles.
    if CAUSAL:
        hi = tl.minimum(S, m0 + BLOCK_M)
        full_end = (tl.minimum(S, m0 + 1) // BLOCK_N) * BLOCK_N
    else:
        hi = S
        full_end = (S // BLOCK_N) * BLOCK_N
    for n0 in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                       offs_d, offs_dv, S, D, DV, qk_scale,
                                       stride_kn, stride_kd, stride_vn, stride_vd,
                                       False, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
    for n0 in range(full_end, hi, BLOCK_N):
        acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                       offs_d, offs_dv, S, D, DV, qk_scale,
                                       stride_kn, stride_kd, stride_vn, stride_vd,
                                       True, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)

    empty = l_i == 0.0  # no visible key (S == 0): output 0, lse -inf
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    rows = offs_m.to(tl.int64)
    o_ptrs = o_base + rows[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < T) & (offs_dv[None, :] < DV))
    tl.store(lse_ptr + bh.to(tl.int64) * T + rows, lse2, mask=offs_m < T)


# ----------------------------------------------------------------------------------- backward
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
                        offs_dv, T, D, DV, qk_scale,
                        stride_qt, stride_qd, stride_gt, stride_gd,
                        BLOCK_M1: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                        EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, PREC: tl.constexpr,
                        UPCAST: tl.constexpr):
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
            valid = valid & (offs_n[:, None] <= offs_m[None, :])
        pT = tl.where(valid, pT, 0.0)
    dv = _mm(pT.to(do.dtype), do, dv, PREC, UPCAST)
    dpT = _mm(v, tl.trans(do), None, PREC, UPCAST)
    dsT = pT * (dpT - di[None, :])
    dk = _mm(dsT.to(qT.dtype), tl.trans(qT), dk, PREC, UPCAST)
    return dk, dv


@triton.autotune(configs=_dkdv_configs(), key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "PREC"],
                 prune_configs_by={"early_config_prune": _prune_dkdv})
@triton.jit(do_not_specialize=["H", "H_KV", "GROUP", "T", "S"])
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    H, H_KV, GROUP, T, S, D, DV, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr,
    PREC: tl.constexpr, UPCAST: tl.constexpr,
):
    """dK and dV of BLOCK_N1 keys of one key/value head, summed over the GROUP query heads."""
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // H_KV
    hk = bhk % H_KV
    n0 = pid_n * BLOCK_N1
    offs_n = n0 + tl.arange(0, BLOCK_N1)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k = _load_rows(k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh, offs_n, offs_d,
                   stride_kn, stride_kd, S, D, True, not EVEN_D)
    v = _load_rows(v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh, offs_n, offs_dv,
                   stride_vn, stride_vd, S, DV, True, not EVEN_DV)
    dk = tl.zeros((BLOCK_N1, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N1, BLOCK_DV), tl.float32)

    # Query blocks [lo, mid) hold the causal diagonal (masked); [mid, t_full) are fully visible
    # full blocks; [max(mid, t_full), T) is the masked ragged tail.
    if CAUSAL:
        lo = (n0 // BLOCK_M1) * BLOCK_M1
        mid = tl.cdiv(n0 + BLOCK_N1 - 1, BLOCK_M1) * BLOCK_M1
        diag_end = tl.minimum(mid, tl.cdiv(T, BLOCK_M1) * BLOCK_M1)
    else:
        lo = 0
        mid = 0
        diag_end = 0
    t_full = (T // BLOCK_M1) * BLOCK_M1
    for hh in range(0, GROUP):
        h = hk * GROUP + hh
        bh = b * H + h
        q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        do_base = do_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh
        lse_base = lse_ptr + bh.to(tl.int64) * T
        delta_base = delta_ptr + bh.to(tl.int64) * T
        for m0 in range(lo, diag_end, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, T, D, DV, qk_scale,
                                         stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, True, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
        for m0 in range(mid, t_full, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, T, D, DV, qk_scale,
                                         stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, False, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
        for m0 in range(tl.maximum(mid, t_full), T, BLOCK_M1):
            dk, dv = _attn_bwd_dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, m0,
                                         offs_n, offs_d, offs_dv, T, D, DV, qk_scale,
                                         stride_qt, stride_qd, stride_gt, stride_gd,
                                         BLOCK_M1, True, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
    dk = dk * sm_scale
    rows = offs_n.to(tl.int64)
    dk_ptrs = dk_ptr + b.to(tl.int64) * stride_dkb + hk.to(tl.int64) * stride_dkh \
        + rows[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    dv_ptrs = dv_ptr + b.to(tl.int64) * stride_dvb + hk.to(tl.int64) * stride_dvh \
        + rows[:, None] * stride_dvn + offs_dv[None, :] * stride_dvd
    tl.store(dk_ptrs, dk.to(dk_ptr.dtype.element_ty), mask=(offs_n[:, None] < S) & (offs_d[None, :] < D))
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=(offs_n[:, None] < S) & (offs_dv[None, :] < DV))


@triton.jit
def _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d, offs_dv,
                      S, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                      BLOCK_N2: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                      EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, PREC: tl.constexpr,
                      UPCAST: tl.constexpr):
    """dQ of the query block from one block of BLOCK_N2 keys."""
    cols = n0 + tl.arange(0, BLOCK_N2)
    kT = _load_cols(k_base, offs_d, cols, stride_kd, stride_kn, D, S, not EVEN_D, MASKED)
    vT = _load_cols(v_base, offs_dv, cols, stride_vd, stride_vn, DV, S, not EVEN_DV, MASKED)
    qk = _mm(q, kT, None, PREC, UPCAST)
    p = tl.exp2(qk * qk_scale - lse2[:, None])
    if MASKED:
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        p = tl.where(valid, p, 0.0)
    dp = _mm(do, vT, None, PREC, UPCAST)
    ds = p * (dp - di[:, None])
    dq = _mm(ds.to(kT.dtype), tl.trans(kT), dq, PREC, UPCAST)
    return dq


@triton.autotune(configs=_dq_configs(), key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "PREC"],
                 prune_configs_by={"early_config_prune": _prune_dq})
@triton.jit(do_not_specialize=["H", "GROUP", "T", "S"])
def _attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    H, GROUP, T, S, D, DV, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr,
    PREC: tl.constexpr, UPCAST: tl.constexpr,
):
    """dQ of BLOCK_M2 queries of one head: sum over the visible key blocks."""
    num_m = tl.cdiv(T, BLOCK_M2)
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = num_m - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    m0 = pid_m * BLOCK_M2
    offs_m = m0 + tl.arange(0, BLOCK_M2)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh, offs_m, offs_d,
                   stride_qt, stride_qd, T, D, True, not EVEN_D)
    do = _load_rows(do_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh, offs_m, offs_dv,
                    stride_gt, stride_gd, T, DV, True, not EVEN_DV)
    rows = bh.to(tl.int64) * T + offs_m
    lse2 = tl.load(lse_ptr + rows, mask=offs_m < T, other=0.0)
    di = tl.load(delta_ptr + rows, mask=offs_m < T, other=0.0)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    dq = tl.zeros((BLOCK_M2, BLOCK_D), tl.float32)
    if CAUSAL:
        hi = tl.minimum(S, m0 + BLOCK_M2)
        full_end = (tl.minimum(S, m0 + 1) // BLOCK_N2) * BLOCK_N2
    else:
        hi = S
        full_end = (S // BLOCK_N2) * BLOCK_N2
    for n0 in range(0, full_end, BLOCK_N2):
        dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d, offs_dv,
                               S, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                               BLOCK_N2, False, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
    for n0 in range(full_end, hi, BLOCK_N2):
        dq = _attn_bwd_dq_step(dq, q, do, lse2, di, k_base, v_base, n0, offs_m, offs_d, offs_dv,
                               S, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                               BLOCK_N2, True, CAUSAL, EVEN_D, EVEN_DV, PREC, UPCAST)
    dq = dq * sm_scale
    dq_ptrs = dq_ptr + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh \
        + offs_m.to(tl.int64)[:, None] * stride_dqt + offs_d[None, :] * stride_dqd
    tl.store(dq_ptrs, dq.to(dq_ptr.dtype.element_ty), mask=(offs_m[:, None] < T) & (offs_d[None, :] < D))


# ---------------------------------------------------------------------------------- launchers
def _alloc(shape, dtype, device):
    """Every output and scratch buffer comes from here (tests poison it with NaN)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _block_dim(d):
    return max(16, triton.next_power_of_2(d))


def attn_fwd(q, k, v, *, causal, scale, config=None):
    """Launch the forward kernel on validated (B, H, T, D) / (B, H_kv, S, D) tensors.

    Returns ``(out, lse2)``: out (B, H, T, Dv) in q's dtype, lse2 (B, H, T) float32 in the log2
    domain (log2 sum_j 2^(scale log2(e) q_i·k_j)); multiply by ln 2 for the natural lse.
    """
    B, H, T, D = q.shape
    H_kv, S, DV = k.shape[1], k.shape[2], v.shape[3]
    out = _alloc((B, H, T, DV), q.dtype, q.device)
    lse2 = _alloc((B, H, T), torch.float32, q.device)
    if B * H * T == 0:
        return out, lse2
    if S == 0:
        out.zero_()
        lse2.fill_(-math.inf)
        return out, lse2

    def grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]), B * H)

    _launch(_attn_fwd_kernel, grid, (
        q, k, v, out, lse2,
        H, H // H_kv, T, S, D, DV, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
    ), dict(
        BLOCK_D=_block_dim(D), BLOCK_DV=_block_dim(DV), EVEN_D=_block_dim(D) == D,
        EVEN_DV=_block_dim(DV) == DV, CAUSAL=causal, PREC=_dot_precision(q.dtype),
        UPCAST=_upcast(q.dtype),
    ), config)
    return out, lse2


def attn_bwd(do, q, k, v, out, lse2, dlse, *, causal, scale, configs=(None, None)):
    """Gradients (dq, dk, dv) of the attention output (and of the natural lse, ``dlse``, or None).

    ``configs``: (dK/dV config, dQ config) to bypass the autotuner (tests), or None each.
    """
    B, H, T, D = q.shape
    H_kv, S, DV = k.shape[1], k.shape[2], v.shape[3]
    dq = _alloc(q.shape, q.dtype, q.device)
    dk = _alloc(k.shape, k.dtype, k.device)
    dv = _alloc(v.shape, v.dtype, v.device)
    if B * H * T == 0 or S == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = _alloc((B, H, T), torch.float32, q.device)
    has_dlse = dlse is not None
    if has_dlse:
        dlse = dlse.to(torch.float32).contiguous()
    block_dv = _block_dim(DV)
    pre_m = 64 if not P.INTERPRET else 32
    _attn_bwd_preprocess[(triton.cdiv(T, pre_m), B * H)](
        out, do, dlse if has_dlse else delta, delta, H, T, DV,
        *out.stride(), *do.stride(),
        BLOCK_M=pre_m, BLOCK_DV=block_dv, HAS_DLSE=has_dlse,
    )
    common = dict(BLOCK_D=_block_dim(D), BLOCK_DV=block_dv, EVEN_D=_block_dim(D) == D,
                  EVEN_DV=block_dv == DV, CAUSAL=causal,
                  PREC=_dot_precision(q.dtype), UPCAST=_upcast(q.dtype))
    qk_scale = scale * LOG2E

    def grid_kv(meta):
        return (triton.cdiv(S, meta["BLOCK_N1"]), B * H_kv)

    _launch(_attn_bwd_dkdv_kernel, grid_kv, (
        q, k, v, do, lse2, delta, dk, dv,
        H, H_kv, H // H_kv, T, S, D, DV, qk_scale, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride(),
    ), common, configs[0])

    def grid_q(meta):
        return (triton.cdiv(T, meta["BLOCK_M2"]), B * H)

    _launch(_attn_bwd_dq_kernel, grid_q, (
        q, k, v, do, lse2, delta, dq,
        H, H // H_kv, T, S, D, DV, qk_scale, scale,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
    ), common, configs[1])
    return dq, dk, dv


class SoftmaxAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward and backward both in Triton; the lse output is differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse2 = attn_fwd(q, k, v, causal=causal, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse2)
        ctx.causal, ctx.scale = causal, scale
        ctx.set_materialize_grads(False)
        return out, lse2 * LN2

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse2 = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = attn_bwd(dout, q, k, v, out, lse2, dlse, causal=ctx.causal, scale=ctx.scale)
        return dq, dk, dv, None, None


def _last_dim_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def softmax_attention(q, k, v, *, is_causal=False, scale=None, enable_gqa=False, return_lse=False):
    r"""Softmax (scaled dot-product) attention: FlashAttention-2-style Triton kernels, fwd and bwd.

    .. math::

        \mathrm{out}_i = \sum_j \frac{e^{s_{ij}}}{\sum_{j'} e^{s_{ij'}}}\, v_j, \qquad
        s_{ij} = \mathrm{scale}\; q_i \cdot k_j, \qquad
        \mathrm{lse}_i = \log \sum_j e^{s_{ij}}

    The sums run over the visible keys: all of them, or ``j <= i`` with ``is_causal`` (top-left
    aligned, as :func:`torch.nn.functional.scaled_dot_product_attention`). Equivalent to
    ``kernelkit_math.attention.softmax_attention(q, k, v, causal=is_causal, scale=scale)`` up to
    dtype tolerance, and to ``scaled_dot_product_attention(q, k, v, is_causal=is_causal,
    scale=scale, enable_gqa=enable_gqa)``. Neither the (T, S) scores nor the probabilities are ever
    stored: memory is O(B H T (D + Dv)).

    Parameters
    ----------
    q : torch.Tensor, shape (B, H, T, D)
    k : torch.Tensor, shape (B, H_kv, S, D)
    v : torch.Tensor, shape (B, H_kv, S, Dv)
        One dtype (float16, bfloat16 or float32) and one device: CUDA, or the CPU when the Triton
        interpreter is on (``TRITON_INTERPRET=1`` before import; slow, for tests). Any strides.
        Any T, S >= 0 (T != S allowed); D, Dv from 1 to 256 (padded to a power of two >= 16 with
        masking; 64 and 128 are the tuned sizes).
    is_causal : bool
        Top-left aligned causal mask: key j visible to query i iff j <= i.
    scale : float, optional
        Score multiplier, > 0; default 1 / sqrt(D).
    enable_gqa : bool
        Grouped-query attention: H_kv may divide H; query head h reads key/value head
        h // (H / H_kv). Without it H_kv must equal H.
    return_lse : bool
        Also return the log-sum-exp (natural log). It is differentiable: its gradient enters the
        backward through delta_i = rowsum(dO_i O_i) - dlse_i.

    Returns
    -------
    out : torch.Tensor, shape (B, H, T, Dv), q's dtype
    lse : torch.Tensor, shape (B, H, T), float32; only with ``return_lse``. With S = 0 (no key
        visible) out is 0 and lse is -inf.

    Raises
    ------
    TypeError
        A non-tensor operand, a dtype other than float16 / bfloat16 / float32 or mixed dtypes, a
        non-bool flag, a non-numeric scale.
    ValueError
        Wrong ranks, mismatched batch / heads / lengths / head dims (q and k must share D), H_kv
        not dividing H (or differing from H without ``enable_gqa``), a head dim above 256,
        tensors on different devices, a non-finite or non-positive ``scale``, CPU tensors without
        the interpreter.

    Notes
    -----
    Numerics: scores and every accumulator are float32; the probabilities are rounded to the input
    dtype before the P @ V product (as FlashAttention), exponentials are ``exp2`` with log2(e)
    folded into the scale. float16 / bfloat16 use the tensor cores; float32 inputs use IEEE float32
    products (CUDA cores, small tiles: accurate but many times slower than bfloat16; split TF32
    was measured in emulation at up to 2.5x the error of eager float32, outside the rule). The
    tests check the FlashAttention rule: the error against the float64 reference is at most twice
    that of the eager PyTorch computation in the same dtype
    (:func:`kernelkit_gpu.attention_naive.softmax_attention_naive`), for the output and for dq,
    dk, dv.

    Performance design (sm_90): 16-bit configs BLOCK_M x BLOCK_N in {128 x 128, 128 x 64, 64 x 64}
    with 4-8 warps and 3 pipeline stages, autotuned once per (D, Dv, causal, dtype), never per
    length (set ``AUTOTUNE = False`` or KERNELKIT_ATTN_AUTOTUNE=0 for the first config that fits).
    ``benchmarks/attention_softmax.py`` measures it against SDPA.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.softmax_attention import softmax_attention
    >>> q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 1, 7, 16), torch.randn(1, 1, 7, 16)
    >>> out, lse = softmax_attention(q, k, v, is_causal=True, enable_gqa=True, return_lse=True)
    >>> out.shape, lse.shape
    (torch.Size([1, 2, 5, 16]), torch.Size([1, 2, 5]))
    """
    B, H, H_kv, T, S, D, Dv = check_qkv(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                                        max_head_dim=MAX_HEAD_DIM)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be True or False; got {return_lse!r}")
    scale = check_scale(scale, D)
    _check_device(q)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    out, lse = SoftmaxAttentionFunction.apply(q, k, v, is_causal, scale)
    return (out, lse) if return_lse else out


def _check_device(t):
    if t.device.type == "cpu" and not P.INTERPRET:
        raise ValueError(
            "q, k and v are CPU tensors but the Triton interpreter is off: set the environment "
            "variable TRITON_INTERPRET=1 before importing kernelkit_gpu (slow; for tests), move the "
            "tensors to a CUDA device, or use kernelkit_gpu.attention_naive on the CPU"
        )
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q, k and v must be on a CUDA device (or the CPU under the interpreter); "
                         f"got {t.device}")

