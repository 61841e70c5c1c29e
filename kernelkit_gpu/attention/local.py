"""Local + summary attention in Triton: exact online softmax over the window blocks, then over
one calibrated summary key per other block (forward); backward through the plain-PyTorch twin.

Layers (see ARCHITECTURE.md):

* ``_local_summary_kernel`` (launcher ``local_summaries``): the summaries (kbar, vbar, bias)
  of the G = ceil(T / block) key blocks, one program per block and head, one pass over q, k, v
  (the torch version, for the twin: :func:`kernelkit_gpu.attention.local_naive.block_summaries`).
* ``_local_fwd_kernel``: one program per (query tile, batch-head), BLOCK_M queries of one
  block (BLOCK_M divides ``block``). Its loop bounds are computed up front from the block index:
  first the window key tiles (BLOCK_N keys, masked at the window's end and, with CAUSAL, at the
  diagonal), then the summary tiles of BLOCK_G summaries in at most two ranges, [0, lo) and,
  without CAUSAL, [hi, G), where lo = b - window and hi = b + window + 1 (no summary of a
  window block is visited). One online softmax (running max and sum in the log2 domain,
  float32 accumulators) runs through both; masks are ``tl.where`` on scores, no data-dependent
  branch.
* ``local_fwd``: the launcher; ``LocalAttentionFunction``: forward in Triton, backward by
  recomputing the twin under autograd (documented cost: the twin's O(T^2) memory);
  ``local_attention``: the public function.

The float64 reference is :func:`kernelkit_math.attention_local.local_attention`; the twin is
:func:`kernelkit_gpu.attention.local_naive.local_attention_naive`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelkit_gpu import checks
from kernelkit_gpu import _launch
from kernelkit_gpu.epilogues import LOG2E
from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu.attention._tiles import _load_cols, _load_rows, _mm
from kernelkit_gpu.attention.local_naive import (TRITON_BLOCKS, block_summaries,
                                                 check_local_qkv, local_attention_naive)

__all__ = ["local_attention", "local_fwd", "local_summaries", "LocalAttentionFunction",
           "TRITON_BLOCKS"]


#: Largest block x BLOCK_D tile of the summaries kernel, by "16-bit input" (the sizes that ran on
#: the GPU, docs/benchmarks.md: float32 up to 128 x 64, 16-bit up to 128 x 128); past it the
#: summaries are computed by torch (:func:`kernelkit_gpu.attention.local_naive.block_summaries`).
SUMMARY_TILE_MAX = {False: 8192, True: 16384}


@triton.jit
def _online_step(acc, l_i, m_i, s, valid):
    """Fold a tile of log2-domain scores ``s`` (rows x cols, masked by ``valid``) and its value
    rows ``vals`` into the running (acc, l, m) of the query block."""
    s = tl.where(valid, s, float("-inf"))
    m_ij = tl.maximum(m_i, tl.max(s, 1))
    m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # a row with nothing visible yet
    p = tl.exp2(s - m_sub[:, None])
    alpha = tl.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return acc, l_i, m_ij, p


@triton.jit
def _summary_tile(acc, l_i, m_i, q, kb_base, kl_base, vb_base, bias_base, gs, g_end, offs_d,
                  offs_dv, D, DV, qk_scale, stride_gn, stride_gd, stride_wn, stride_wd,
                  SPLIT: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """Fold the summaries ``gs`` (those < g_end; bias in the log2 domain) into the running
    softmax of the query block."""
    kbT = _load_cols(kb_base, offs_d, gs, stride_gd, stride_gn, D, g_end, True, True)
    bias = tl.load(bias_base + gs, mask=gs < g_end, other=0.0)
    s = _mm(q, kbT, None, PREC, UPCAST)
    if SPLIT:  # kbar = hi + lo, both in q's dtype: float32-like accuracy on tensor cores
        klT = _load_cols(kl_base, offs_d, gs, stride_gd, stride_gn, D, g_end, True, True)
        s = _mm(q, klT, s, PREC, UPCAST)
    s = s * qk_scale + bias[None, :]
    acc, l_i, m_i, p = _online_step(acc, l_i, m_i, s, gs[None, :] < g_end)
    vb = _load_rows(vb_base, gs, offs_dv, stride_wn, stride_wd, g_end, DV, True, True)
    acc = _mm(p.to(vb.dtype), vb, acc, PREC, UPCAST)
    return acc, l_i, m_i


@triton.jit(do_not_specialize=["H", "T", "G", "WINDOW"])
def _local_fwd_kernel(
    q_ptr, k_ptr, v_ptr, kb_ptr, kl_ptr, vb_ptr, bias_ptr, o_ptr,
    H, T, G, D, DV, WINDOW, qk_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gn, stride_gd,
    stride_wb, stride_wh, stride_wn, stride_wd,
    stride_ob, stride_oh, stride_ot, stride_od,
    BLOCK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, CAUSAL: tl.constexpr, SPLIT: tl.constexpr,
    PREC: tl.constexpr, UPCAST: tl.constexpr,
):
    """out[b, h, rows of tile pid_m]: window keys exactly, then the summaries outside the
    window. BLOCK_M divides BLOCK, so the tile lies in one block, qb."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    kb_base = kb_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh
    kl_base = kl_ptr + b.to(tl.int64) * stride_gb + h.to(tl.int64) * stride_gh
    vb_base = vb_ptr + b.to(tl.int64) * stride_wb + h.to(tl.int64) * stride_wh
    bias_base = bias_ptr + bh.to(tl.int64) * G
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_base, offs_m, offs_d, stride_qt, stride_qd, T, D, True, True)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)

    # Window: key blocks lo_b .. hi_b - 1, keys [lo_b BLOCK, end); causal: none after the
    # tile's last row. Summaries: [0, lo_b) and (not causal) [hi_b, G).
    qb = (pid_m * BLOCK_M) // BLOCK
    lo_b = tl.maximum(qb - WINDOW, 0)
    if CAUSAL:
        hi_b = qb + 1
        end = tl.minimum((pid_m + 1) * BLOCK_M, T)
    else:
        hi_b = tl.minimum(qb + WINDOW + 1, G)
        end = tl.minimum(hi_b * BLOCK, T)
    for n0 in range(lo_b * BLOCK, end, BLOCK_N):
        cols = n0 + offs_n
        kT = _load_cols(k_base, offs_d, cols, stride_kd, stride_kn, D, end, True, True)
        s = _mm(q, kT, None, PREC, UPCAST) * qk_scale
        valid = cols[None, :] < end
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        acc, l_i, m_i, p = _online_step(acc, l_i, m_i, s, valid)
        v = _load_rows(v_base, cols, offs_dv, stride_vn, stride_vd, end, DV, True, True)
        acc = _mm(p.to(v.dtype), v, acc, PREC, UPCAST)

    for g0 in range(0, lo_b, BLOCK_G):
        acc, l_i, m_i = _summary_tile(acc, l_i, m_i, q, kb_base, kl_base, vb_base, bias_base,
                                      g0 + offs_g, lo_b, offs_d, offs_dv, D, DV, qk_scale,
                                      stride_gn, stride_gd, stride_wn, stride_wd, SPLIT, PREC,
                                      UPCAST)
    if not CAUSAL:
        for g0 in range(hi_b, G, BLOCK_G):
            acc, l_i, m_i = _summary_tile(acc, l_i, m_i, q, kb_base, kl_base, vb_base, bias_base,
                                          g0 + offs_g, G, offs_d, offs_dv, D, DV, qk_scale,
                                          stride_gn, stride_gd, stride_wn, stride_wd, SPLIT,
                                          PREC, UPCAST)

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # l_i > 0 on every row < T
    rows = offs_m.to(tl.int64)
    o_ptrs = o_base + rows[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < T) & (offs_dv[None, :] < DV))


@triton.jit(do_not_specialize=["H", "T"])
def _local_summary_kernel(
    q_ptr, k_ptr, v_ptr, kb_ptr, kl_ptr, vb_ptr, bias_ptr,
    H, T, D, DV, qk_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, SPLIT: tl.constexpr,
):
    """The summary of key block g (program 0) of head bh (program 1), in float32 and the log2
    domain: w = softmax_j(qk_scale qbar·k_j) (base 2), kbar = w k, vbar = w v,
    bias2 = log2 sum_j 2^(qk_scale qbar·k_j) - qk_scale qbar·kbar. Outputs are contiguous
    (B, H, G, D), (B, H, G, Dv) and (B, H, G); kbar as hi (+ lo with SPLIT) in k's dtype."""
    g = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    G = tl.cdiv(T, BLOCK)
    rows = g * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh, rows,
                   offs_d, stride_qt, stride_qd, T, D, True, True).to(tl.float32)
    k = _load_rows(k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh, rows,
                   offs_d, stride_kn, stride_kd, T, D, True, True).to(tl.float32)
    v = _load_rows(v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh, rows,
                   offs_dv, stride_vn, stride_vd, T, DV, True, True).to(tl.float32)
    count = tl.minimum(T - g * BLOCK, BLOCK).to(tl.float32)
    qbar = tl.sum(q, 0) / count
    z = tl.where(rows < T, tl.sum(k * qbar[None, :], 1) * qk_scale, float("-inf"))
    z_max = tl.max(z, 0)
    e = tl.exp2(z - z_max)  # 0 on the rows past T
    total = tl.sum(e, 0)
    w = e / total
    kbar = tl.sum(w[:, None] * k, 0)
    vbar = tl.sum(w[:, None] * v, 0)
    bias2 = tl.log2(total) + z_max - qk_scale * tl.sum(qbar * kbar, 0)
    out = bh.to(tl.int64) * G + g
    hi = kbar.to(kb_ptr.dtype.element_ty)
    tl.store(kb_ptr + out * D + offs_d, hi, mask=offs_d < D)
    if SPLIT:
        lo = (kbar - hi.to(tl.float32)).to(kl_ptr.dtype.element_ty)
        tl.store(kl_ptr + out * D + offs_d, lo, mask=offs_d < D)
    tl.store(vb_ptr + out * DV + offs_dv, vbar.to(vb_ptr.dtype.element_ty), mask=offs_dv < DV)
    tl.store(bias_ptr + out, bias2)


# ---------------------------------------------------------------------------------- launcher
def local_summaries(q, k, v, *, block, scale):
    """The block summaries for the Triton forward, one pass over q, k, v (one program per key
    block and head; float32 arithmetic): ``(kb_hi, kb_lo, vbar, bias2)``, kbar = kb_hi + kb_lo
    in k's dtype (kb_lo is kb_hi for float32: one part suffices), vbar in v's dtype, bias2
    float32 in the log2 domain; shapes (B, H, G, D), (B, H, G, Dv), (B, H, G). Equal to
    :func:`kernelkit_gpu.attention.local_naive.block_summaries` up to float32 rounding."""
    B, H, T, D = q.shape
    DV = v.shape[-1]
    G = triton.cdiv(T, block)
    split = q.dtype != torch.float32
    kb_hi = _launch.alloc((B, H, G, D), q.dtype, q.device)
    kb_lo = _launch.alloc((B, H, G, D), q.dtype, q.device) if split else kb_hi
    vbar = _launch.alloc((B, H, G, DV), q.dtype, q.device)
    bias2 = _launch.alloc((B, H, G), torch.float32, q.device)
    if B * H * G == 0:
        return kb_hi, kb_lo, vbar, bias2
    block_d, block_dv = _launch.block_size(D), _launch.block_size(DV)
    if block * max(block_d, block_dv) > SUMMARY_TILE_MAX[split]:
        # the kernel holds a whole block of q, k and v at once: float32 blocks of 128 x 128
        # failed on the GPU and larger tiles were never run; torch does it,
        # in float64 (O(T D) work; float32 lost 3e-4 of the bias to cancellation for k + 100)
        kbar, vb, bias = block_summaries(q.double(), k.double(), v.double(), block, scale)
        kb_hi.copy_(kbar)
        if split:
            kb_lo.copy_(kbar - kb_hi.double())
        vbar.copy_(vb)
        bias2.copy_(bias * LOG2E)
        return kb_hi, kb_lo, vbar, bias2
    _local_summary_kernel[(G, B * H)](
        q, k, v, kb_hi, kb_lo, vbar, bias2, H, T, D, DV, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(),
        BLOCK=block, BLOCK_D=block_d, BLOCK_DV=block_dv, SPLIT=split,
        num_warps=4 if block * max(block_d, block_dv) <= 8192 else 8,
    )
    return kb_hi, kb_lo, vbar, bias2


def local_fwd(q, k, v, *, block, window, is_causal, scale):
    """Summaries, then the forward kernel, on validated (B, H, T, D) tensors with unit last
    stride; returns out (B, H, T, Dv) in q's dtype."""
    B, H, T, D = q.shape
    DV = v.shape[-1]
    out = _launch.alloc((B, H, T, DV), q.dtype, q.device)
    if B * H * T == 0:
        return out
    # tl.dot operands share q's dtype; 16-bit: kbar as hi + lo (two products), so that a key
    # offset (k + 1000) loses no more digits in the summaries than in the keys themselves
    kb_hi, kb_lo, vbar, bias = local_summaries(q, k, v, block=block, scale=scale)
    split = kb_lo is not kb_hi
    G = kb_hi.shape[2]
    # Tiles (BLOCK_M queries x BLOCK_N keys or BLOCK_G summaries) no larger than the block;
    # 16-bit: 64 (tensor cores; k and v tiles of 64 x D pipelined in 2 stages); float32: the
    # small FMA-friendly tiles of the softmax kernels (larger ones spill registers).
    if q.dtype == torch.float32:
        block_m, block_n, block_g = min(block, 32), 16, 16
    else:
        block_m, block_n, block_g = min(block, 64), min(block, 64), 64
    block_g = min(block_g, _launch.block_size(G))
    grid = (triton.cdiv(T, block_m), B * H)
    _local_fwd_kernel[grid](
        q, k, v, kb_hi, kb_lo, vbar, bias, out,
        H, T, G, D, DV, min(window, G), scale * LOG2E,  # a wider window changes nothing
        *q.stride(), *k.stride(), *v.stride(), *kb_hi.stride(), *vbar.stride(), *out.stride(),
        BLOCK=block, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g,
        BLOCK_D=_launch.block_size(D), BLOCK_DV=_launch.block_size(DV), CAUSAL=is_causal,
        SPLIT=split, PREC=_attn_configs.dot_precision(q.dtype),
        UPCAST=_attn_configs.upcast(q.dtype), num_warps=4, num_stages=2,
    )
    return out


class LocalAttentionFunction(torch.autograd.Function):
    """Forward: the Triton kernel. Backward: the gradients of the plain-PyTorch twin, its forward
    recomputed under autograd (O(B H T^2) memory for the window and summary scores)."""

    @staticmethod
    def forward(ctx, q, k, v, block, window, is_causal, scale):
        ctx.save_for_backward(q, k, v)
        ctx.settings = (block, window, is_causal, scale)
        return local_fwd(q, k, v, block=block, window=window, is_causal=is_causal, scale=scale)

    @staticmethod
    def backward(ctx, dout):
        block, window, is_causal, scale = ctx.settings
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = local_attention_naive(q, k, v, block=block, window=window,
                                        is_causal=is_causal, scale=scale)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
        return dq, dk, dv, None, None, None, None


def local_attention(q, k, v, *, block=32, window=1, is_causal=False, scale=None):
    r"""Local + summary attention: each query attends exactly to the keys of its block and the
    ``window`` blocks on each side (causal: before it), and to one calibrated summary key for
    every other block (causal: every earlier block). Triton forward; backward through the twin.

    .. math::

        \mathrm{out}_i = \frac{\sum_{j \in W(i)} e^{s q_i \cdot k_j} v_j
            + \sum_{g \in F(i)} e^{s q_i \cdot \bar k_g + \mathrm{bias}_g} \bar v_g}
            {\sum_{j \in W(i)} e^{s q_i \cdot k_j} + \sum_{g \in F(i)} e^{s q_i \cdot \bar k_g
            + \mathrm{bias}_g}}

    with the summaries kbar_g, vbar_g, bias_g calibrated on the block's mean query
    (:mod:`kernelkit_math.attention_local`). The output is a softmax over an augmented key set:
    its weights on the keys are a distribution in every row, by construction. Equivalent to
    ``kernelkit_math.attention_local.local_attention(q, k, v, block=block, window=window,
    is_causal=is_causal, scale=scale)`` up to dtype tolerance. Each row reads at most
    (2 window + 1) block keys and ceil(T / block) summaries: O(T (block window + T / block) D)
    work, e.g. 445 keys per row at T = 16384, block 64, window 1 (softmax: 16384).

    Parameters
    ----------
    q, k : torch.Tensor, shape (B, H, T, D)
    v : torch.Tensor, shape (B, H, T, Dv)
        One dtype (float16, bfloat16 or float32), one device: CUDA, or the CPU under the
        Triton interpreter. Self-attention: q and k have the same length T. D, Dv up to 256.
        The inputs must be finite (not checked: a NaN or infinity in a key block reaches every
        row through its summary, and a masked future key of the causal diagonal tile as well).
    block : {16, 32, 64, 128}, default 32
        Positions per block: the window's unit and the summarised segment (the twin
        :func:`~kernelkit_gpu.attention.local_naive.local_attention_naive` takes any size).
    window : int, default 1
        Neighbouring blocks on each side (causal: before) attended exactly, >= 0.
    is_causal : bool
        Query i sees keys j <= i (top-left, T == S) and the summaries of the blocks wholly
        before its window (they depend on those blocks' own positions only).
    scale : float, optional
        Score multiplier, > 0; default 1 / sqrt(D).

    Returns
    -------
    torch.Tensor, shape (B, H, T, Dv), q's dtype

    Raises
    ------
    TypeError
        A non-tensor operand or unsupported dtype, a non-integer block or window, a non-bool flag.
    ValueError
        Shapes as :func:`kernelkit_gpu.softmax_attention` (no GQA), q and k of different
        lengths, a block outside {16, 32, 64, 128}, a window < 0, a bad scale, CPU tensors
        without the interpreter.

    Notes
    -----
    Numerics: summaries computed in float32, then stored for the tensor-core products as kbar
    = hi + lo in the input dtype (16-bit: two products, ~16 significant bits, so keys far from
    the origin keep their digits) and vbar in the input dtype; scores and accumulators float32;
    probabilities rounded to v's dtype before P @ V (as :func:`kernelkit_gpu.softmax_attention`).
    Measured against the float64 reference (tests): float32 within 2e-5, float16 / bfloat16
    within 8 units of the dtype, relative to max(1, max |out|); on the real heads the bfloat16
    forward's error against exact softmax equals the float64 method's (0.245 vs 0.246).
    Accuracy on all-MiniLM-L6-v2 heads and speed against softmax attention: docs/decisions.md,
    ``benchmarks/attention_local.py``.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.attention.local import local_attention
    >>> x = torch.randn(1, 2, 40, 16)
    >>> local_attention(x, x, x, block=16, window=1).shape
    torch.Size([1, 2, 40, 16])
    """
    block, window, scale = check_local_qkv(q, k, v, block, window, is_causal, scale,
                                           checks.ATTN_DTYPES)
    if block not in TRITON_BLOCKS:
        raise ValueError(f"block must be one of {TRITON_BLOCKS} for the Triton kernel; got "
                         f"{block} (local_attention_naive takes any block >= 1)")
    for name, d in (("q/k head dim D", q.shape[-1]), ("v head dim Dv", v.shape[-1])):
        if d > checks.MAX_HEAD_DIM:
            raise ValueError(f"{name} must be at most {checks.MAX_HEAD_DIM}; got {d}")
    checks.check_triton_device(q, "q, k and v", "kernelkit_gpu.attention.local_naive")
    qs, ks, vs = (_launch.unit_last_stride(t) for t in (q, k, v))
    return LocalAttentionFunction.apply(qs, ks, vs, block, window, is_causal, scale)
