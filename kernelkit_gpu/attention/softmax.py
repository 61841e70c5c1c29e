"""FlashAttention-2-style softmax attention in Triton: online-softmax forward, fused backward.

Layers (see ARCHITECTURE.md):

* ``_attn_fwd_kernel``: one program per (BLOCK_M queries, batch-head). Q stays in registers, K and
  V are streamed in BLOCK_N tiles; running max ``m`` and sum ``l`` in the log2 domain (log2(e) is
  folded into the scale, so every exponential is one ``exp2``); float32 accumulators. The key loop
  runs in two stages: unmasked full tiles (keys fully visible to every query of the block), then the
  masked tiles (the causal diagonal and the ragged last tile). With ``is_causal`` the mask is
  ``j <= i + SHIFT`` (a runtime integer: 0 top-left, S - T bottom-right, possibly negative), the
  tiles above that diagonal are never visited, and query blocks are scheduled longest-first.
  A sliding window is the band ``i + LOWER <= j <= i + SHIFT``: its right edge is that causal
  diagonal (moved by ``right``), its left edge the ``WINDOW`` constexpr with the runtime
  ``LOWER``; the key loop then starts at the tile of the block's first row's left edge and
  runs masked tiles, full tiles, masked tiles, so a query block reads about
  (left + right + BLOCK_M) / BLOCK_N + 2 tiles. Without a window the loops are the causal /
  full ones, unchanged (the branch is on the constexpr).
* the backward kernels and their launcher ``attn_bwd``: :mod:`kernelkit_gpu.attention.softmax_bwd`;
  config sets, pruning and the ``AUTOTUNE`` switch: :mod:`kernelkit_gpu.attention._configs`; the
  ``@triton.jit`` tile helpers: :mod:`kernelkit_gpu.attention._tiles`.
* ``attn_fwd``: the forward launcher; ``SoftmaxAttentionFunction``: the autograd.Function (it
  calls ``attn_fwd`` and ``attn_bwd`` through this module's namespace, where tests spy on them);
  ``softmax_attention``: the public function.

The float64 reference is ``kernelkit_math.attention.softmax_attention``; the plain-PyTorch twin is
:func:`kernelkit_gpu.softmax_attention_naive`.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu.attention import gate
from kernelkit_gpu.attention import _varlen
from kernelkit_gpu.attention._varlen import _table_row
from kernelkit_gpu import checks
from kernelkit_gpu import _launch
from kernelkit_gpu.attention._tiles import _load_cols, _load_rows, _mm
from kernelkit_gpu.epilogues import LOG2E
from kernelkit_gpu.attention.naive import softmax_attention_naive
from kernelkit_gpu.attention.softmax_bwd import attn_bwd
from kernelkit_math.attention import mask_band

__all__ = ["softmax_attention", "attn_fwd", "SoftmaxAttentionFunction"]

LN2 = 0.6931471805599453


# ------------------------------------------------------------------------------------ forward
@triton.jit
def _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n, offs_d, offs_dv,
                   S, SHIFT, LOWER, D, DV, qk_scale, stride_kn, stride_kd, stride_vn, stride_vd,
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                   EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, PREC: tl.constexpr,
                   UPCAST: tl.constexpr):
    """One key tile: update the running max, sum and output of the query block."""
    cols = n0 + offs_n
    kT = _load_cols(k_base, offs_d, cols, stride_kd, stride_kn, D, S, not EVEN_D, MASKED)
    qk = _mm(q, kT, None, PREC, UPCAST)
    if MASKED:
        valid = cols[None, :] < S
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None] + SHIFT)
        if WINDOW:
            valid = valid & (cols[None, :] >= offs_m[:, None] + LOWER)
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


@triton.autotune(configs=_attn_configs.fwd_configs(),
                 key=["BLOCK_D", "BLOCK_DV", "CAUSAL", "WINDOW", "PREC", "VARLEN"],
                 prune_configs_by={"early_config_prune": _attn_configs.prune_fwd})
@triton.jit(do_not_specialize=["H", "GROUP", "T", "S", "SHIFT", "LOWER", "NSEQ"])
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, tab_ptr,
    H, GROUP, T, S, SHIFT, LOWER, NSEQ, D, DV, qk_scale,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    PREC: tl.constexpr, UPCAST: tl.constexpr, VARLEN: tl.constexpr,
):
    """out[b, h, block] and lse2 (log2-domain log-sum-exp) of BLOCK_M queries; with CAUSAL, query
    i sees keys j <= i + SHIFT; with WINDOW, keys j >= i + LOWER (a sliding window's left edge;
    its right edge is the CAUSAL diagonal, :func:`attn_fwd`). With VARLEN (B = 1, T = S = the
    packed tokens), the block is row ``pid`` of the tile table
    (:mod:`kernelkit_gpu.attention._varlen`): its sequence's rows are the batch, of length
    TQ = SK = the sequence's length."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    lse_base = lse_ptr + bh.to(tl.int64) * T
    if VARLEN:
        start, TQ, m0 = _table_row(tab_ptr, pid_m, T, NSEQ, BLOCK_M)
        SK = TQ
        start = start.to(tl.int64)
        q_base += start * stride_qt
        k_base += start * stride_kn
        v_base += start * stride_vn
        o_base += start * stride_ot
        lse_base += start
    else:
        TQ = T
        SK = S
        if CAUSAL:
            pid_m = tl.cdiv(T, BLOCK_M) - 1 - pid_m  # longest rows first: better tail balance
        m0 = pid_m * BLOCK_M

    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = _load_rows(q_base, offs_m, offs_d, stride_qt, stride_qd, TQ, D, True, not EVEN_D)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)

    # Keys [0, full_end) are visible to every query of the block (to its first row, m0) and lie
    # in full tiles; keys from hi on are visible to none (its last row sees j < m0 + BLOCK_M +
    # SHIFT). Both clamped at 0: with SHIFT < 0 the first rows may see no key at all.
    if CAUSAL:
        hi = tl.maximum(tl.minimum(SK, m0 + BLOCK_M + SHIFT), 0)
        full_end = (tl.maximum(tl.minimum(SK, m0 + 1 + SHIFT), 0) // BLOCK_N) * BLOCK_N
    else:
        hi = SK
        full_end = (SK // BLOCK_N) * BLOCK_N
    if WINDOW:
        # The window's left edge: keys before m0 + LOWER are visible to no query of the block
        # (the tiles before lo are never read), keys from its last row's edge m0 + BLOCK_M - 1
        # + LOWER on to every one (full_start, a tile boundary). Tiles [lo, full_start) are
        # masked, [full_start, full_end) full, the rest up to hi masked.
        lo = (tl.maximum(m0 + LOWER, 0) // BLOCK_N) * BLOCK_N
        full_start = tl.cdiv(tl.maximum(m0 + BLOCK_M - 1 + LOWER, 0), BLOCK_N) * BLOCK_N
        for n0 in range(lo, tl.minimum(full_start, hi), BLOCK_N):
            acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                           offs_d, offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale,
                                           stride_kn, stride_kd, stride_vn, stride_vd,
                                           True, CAUSAL, True, EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(full_start, full_end, BLOCK_N):
            acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                           offs_d, offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale,
                                           stride_kn, stride_kd, stride_vn, stride_vd,
                                           False, CAUSAL, True, EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(tl.maximum(full_start, full_end), hi, BLOCK_N):
            acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                           offs_d, offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale,
                                           stride_kn, stride_kd, stride_vn, stride_vd,
                                           True, CAUSAL, True, EVEN_D, EVEN_DV, PREC, UPCAST)
    else:
        for n0 in range(0, full_end, BLOCK_N):
            acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                           offs_d, offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale,
                                           stride_kn, stride_kd, stride_vn, stride_vd,
                                           False, CAUSAL, False, EVEN_D, EVEN_DV, PREC, UPCAST)
        for n0 in range(full_end, hi, BLOCK_N):
            acc, l_i, m_i = _attn_fwd_step(acc, l_i, m_i, q, k_base, v_base, n0, offs_m, offs_n,
                                           offs_d, offs_dv, SK, SHIFT, LOWER, D, DV, qk_scale,
                                           stride_kn, stride_kd, stride_vn, stride_vd,
                                           True, CAUSAL, False, EVEN_D, EVEN_DV, PREC, UPCAST)

    empty = l_i == 0.0  # no visible key (S == 0, i + SHIFT < 0, i + LOWER >= S): 0, lse -inf
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    rows = offs_m.to(tl.int64)
    o_ptrs = o_base + rows[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < TQ) & (offs_dv[None, :] < DV))
    tl.store(lse_base + rows, lse2, mask=offs_m < TQ)


# ---------------------------------------------------------------------------------- launcher
def attn_fwd(q, k, v, *, shift, scale, config=None, varlen=None, lower=None):
    """Launch the forward kernel on validated (B, H, T, D) / (B, H_kv, S, D) tensors.

    ``shift``: None (no mask), or the causal diagonal: query i sees keys j <= i + shift
    (:func:`kernelkit_math.attention.causal_shift`). ``lower``: None, or a sliding window's left
    edge: query i sees keys j >= i + lower. A window's band i + lower <= j <= i + upper
    (:func:`kernelkit_math.attention.mask_band`) runs as ``lower`` and ``shift = upper``: its
    right edge is a causal diagonal. ``varlen``: None, or ``(table, n_seqs)`` for a packed
    batch (B = 1, T = S = the packed tokens; :mod:`kernelkit_gpu.attention._varlen`; the
    diagonals within each sequence).

    Returns ``(out, lse2)``: out (B, H, T, Dv) in q's dtype and layout, lse2 (B, H, T) float32
    in the log2 domain (log2 sum_j 2^(scale log2(e) q_i·k_j)); multiply by ln 2 for the natural
    lse.
    """
    B, H, T, D = q.shape
    H_kv, S, DV = k.shape[1], k.shape[2], v.shape[3]
    out = _attn_configs.alloc_like(q, (B, H, T, DV), q.dtype)
    lse2 = _launch.alloc((B, H, T), torch.float32, q.device)
    if B * H * T == 0:
        return out, lse2
    if S == 0:
        out.zero_()
        lse2.fill_(-math.inf)
        return out, lse2
    table, n_seqs = (lse2, 0) if varlen is None else varlen

    def grid(meta):
        if varlen is None:
            return (triton.cdiv(T, meta["BLOCK_M"]), B * H)
        return (_varlen.table_rows(T, n_seqs, meta["BLOCK_M"]), B * H)

    _attn_configs.launch(_attn_fwd_kernel, grid, (
        q, k, v, out, lse2, table,
        H, H // H_kv, T, S, _attn_configs.diagonal_arg(shift, T, S),
        _attn_configs.diagonal_arg(lower, T, S), n_seqs, D, DV, scale * LOG2E,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
    ), dict(_attn_configs.constexprs(D, DV, shift is not None, q.dtype), WINDOW=lower is not None,
            VARLEN=varlen is not None), config)
    return out, lse2


class SoftmaxAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward and backward both in Triton; the lse output is differentiable.

    A masked (causal or windowed) backward whose incoming gradients are not all finite computes
    that call's gradients through the plain-PyTorch twin instead
    (:mod:`kernelkit_gpu.attention.gate`): ``twin(q, k, v)`` returns the exact twin's (out, lse)
    of the call; ``shift``, ``lower`` (the band's diagonals) and ``varlen`` (None or
    ``(table, n_seqs)``) as in :func:`attn_fwd`.
    """

    @staticmethod
    def forward(ctx, q, k, v, shift, lower, scale, twin, varlen):
        out, lse2 = attn_fwd(q, k, v, shift=shift, scale=scale, varlen=varlen, lower=lower)
        ctx.save_for_backward(q, k, v, out, lse2)
        ctx.shift, ctx.lower, ctx.scale, ctx.twin, ctx.varlen = shift, lower, scale, twin, varlen
        ctx.set_materialize_grads(False)
        return out, lse2 * LN2

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse2 = ctx.saved_tensors
        masked = ctx.shift is not None or ctx.lower is not None
        if masked and not gate.all_finite(dout, dlse):
            return (*_twin_gradients(q, k, v, dout, dlse, ctx.twin), None, None, None, None, None)
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = attn_bwd(dout, q, k, v, out, lse2, dlse, shift=ctx.shift, scale=ctx.scale,
                              varlen=ctx.varlen, lower=ctx.lower)
        return dq, dk, dv, None, None, None, None, None


def _twin_gradients(q, k, v, dout, dlse, twin):
    """(dq, dk, dv) of a masked call through the plain-PyTorch twin (its forward recomputed)."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out, lse = twin(q, k, v)
    pairs = [(o, g) for o, g in ((out, dout), (lse, dlse)) if g is not None]
    grads = torch.autograd.grad([o for o, _ in pairs], (q, k, v), [g for _, g in pairs],
                                allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for t, g in zip((q, k, v), grads))


def softmax_attention(q, k, v, *, is_causal=False, causal_alignment="top_left", scale=None,
                      enable_gqa=False, return_lse=False, window_size=None):
    r"""Softmax (scaled dot-product) attention: FlashAttention-2-style Triton kernels, fwd and bwd.

    .. math::

        \mathrm{out}_i = \sum_j \frac{e^{s_{ij}}}{\sum_{j'} e^{s_{ij'}}}\, v_j, \qquad
        s_{ij} = \mathrm{scale}\; q_i \cdot k_j, \qquad
        \mathrm{lse}_i = \log \sum_j e^{s_{ij}}

    The sums run over the visible keys: all of them, or ``j <= i + shift`` with ``is_causal``
    (shift 0: top-left aligned, as :func:`torch.nn.functional.scaled_dot_product_attention`;
    shift S - T: bottom-right aligned, as FlashAttention), and with ``window_size=(left,
    right)`` only ``i + shift - left <= j <= i + shift + right`` (a sliding window; its tiles
    alone are visited: the cost grows with T times the window, not T S). Equivalent to
    ``kernelkit_math.attention.softmax_attention(q, k, v, is_causal=is_causal,
    causal_alignment=causal_alignment, scale=scale, window_size=window_size)`` up to dtype
    tolerance, and (top-left, no window) to
    ``scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
    enable_gqa=enable_gqa)``. Neither the (T, S) scores nor the probabilities are ever
    stored: memory is O(B H T (D + Dv)).

    Masked keys are absent, not weighted by 0 (the rule of :mod:`kernelkit_math.attention`): a
    NaN or infinity in v_j, k_j or q_i reaches exactly the outputs and gradients that a row-by-row
    computation over the visible keys gives, and rows that see no key output 0 whatever k and v
    hold. Only causal and windowed calls mask keys, so only they are checked
    (:mod:`kernelkit_gpu.attention.gate`): one float32 sum over each of q, k and v, read on the
    host after the kernels are queued; if all are finite the Triton result is returned, if not
    the call runs the
    plain-PyTorch twin :func:`kernelkit_gpu.softmax_attention_naive` (exact, slower), forward
    and backward. Their backward checks dO and dlse the same way and, if one is not finite,
    computes that call's gradients through the twin (its forward recomputed from q, k, v).
    Calls without a causal mask or a window are never checked. Under CUDA graph capture or
    torch.compile tracing the check is skipped (no host read is possible): non-finite inputs
    then run the kernels as they are (IEEE arithmetic over their tiles).

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
        Causal mask: key j visible to query i iff j <= i + shift (``causal_alignment``).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True or a window is given (validated always).
        ``"top_left"``: shift 0, as SDPA's ``is_causal=True`` (torch
        ``CausalVariant.UPPER_LEFT``); ``"bottom_right"``: shift S - T, FlashAttention's
        alignment for decoding with a KV cache (torch ``CausalVariant.LOWER_RIGHT``: the T
        queries are the last T of S positions). With T > S the first T - S rows see no key:
        out 0, lse -inf, no gradient through them.
    scale : float, optional
        Score multiplier, > 0; default 1 / sqrt(D).
    enable_gqa : bool
        Grouped-query attention: H_kv may divide H; query head h reads key/value head
        h // (H / H_kv). Without it H_kv must equal H.
    return_lse : bool
        Also return the log-sum-exp (natural log). It is differentiable: its gradient enters the
        backward through delta_i = rowsum(dO_i O_i) - dlse_i.
    window_size : None or tuple (left, right) of int, default None
        Sliding-window (local) attention as FlashAttention's ``window_size``: query i sees keys
        j with i + shift - left <= j <= i + shift + right, -1 meaning no bound on that side;
        None or (-1, -1): no window. ``shift`` is the causal mask's, from
        ``causal_alignment`` (0 top-left, S - T bottom-right) whether or not ``is_causal``;
        FlashAttention aligns its window bottom-right, so ``causal_alignment="bottom_right"``
        gives its mask for any T, S (with T == S both agree). With ``is_causal`` the window also
        stops at the causal diagonal (``right`` is 0 in effect, as in FlashAttention). Rows
        whose window holds no key output 0 (lse -inf).

    Returns
    -------
    out : torch.Tensor, shape (B, H, T, Dv), q's dtype; laid out as q: a (B, T, H, D) tensor
        passed as ``x.transpose(1, 2)`` gets an output that is ``y.transpose(1, 2)`` of a
        contiguous (B, T, H, Dv) tensor (so are dq, dk, dv of k and v)
    lse : torch.Tensor, shape (B, H, T), float32; only with ``return_lse``. Rows with no visible
        key (S = 0, or bottom-right with T > S) have out 0 and lse -inf.

    Raises
    ------
    TypeError
        A non-tensor operand, a dtype other than float16 / bfloat16 / float32 or mixed dtypes, a
        non-bool flag, a non-numeric scale, a non-string ``causal_alignment``.
    ValueError
        Wrong ranks, mismatched batch / heads / lengths / head dims (q and k must share D), H_kv
        not dividing H (or differing from H without ``enable_gqa``), a head dim above 256,
        tensors on different devices, a non-finite or non-positive ``scale``, a
        ``causal_alignment`` other than "top_left" / "bottom_right", a ``window_size`` without
        two entries or with one below -1 (TypeError: not a tuple of ints), CPU tensors without
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
    (:func:`kernelkit_gpu.softmax_attention_naive`), for the output and for dq,
    dk, dv.

    Performance design (sm_90): 16-bit configs BLOCK_M x BLOCK_N in {128 x 128, 128 x 64, 64 x 64}
    with 4-8 warps and 3 pipeline stages, autotuned once per (D, Dv, causal, dtype), never per
    length (set ``kernelkit_gpu.attention._configs.AUTOTUNE = False``, or KERNELKIT_ATTN_AUTOTUNE=0
    before import, for the first config that fits).
    ``benchmarks/attention_softmax.py`` measures it against SDPA.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.attention.softmax import softmax_attention
    >>> q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 1, 7, 16), torch.randn(1, 1, 7, 16)
    >>> out, lse = softmax_attention(q, k, v, is_causal=True, enable_gqa=True, return_lse=True)
    >>> out.shape, lse.shape
    (torch.Size([1, 2, 5, 16]), torch.Size([1, 2, 5]))
    """
    B, H, H_kv, T, S, D, Dv = checks.check_qkv(q, k, v, is_causal=is_causal, enable_gqa=enable_gqa,
                                          max_head_dim=checks.MAX_HEAD_DIM)
    checks.check_flag(return_lse, "return_lse")
    lower, upper = mask_band(is_causal, causal_alignment, window_size, T, S)
    scale = checks.check_scale(scale, D)
    checks.check_triton_device(q, "q, k and v", "kernelkit_gpu.attention.naive")
    masked = lower is not None or upper is not None
    check = gate.start(q, k, v) if masked else None  # read after the launch
    qs, ks, vs = (_launch.unit_last_stride(t) for t in (q, k, v))
    twin = functools.partial(softmax_attention_naive, is_causal=is_causal,
                             causal_alignment=causal_alignment, scale=scale, enable_gqa=True,
                             return_lse=True, window_size=window_size)
    out, lse = SoftmaxAttentionFunction.apply(qs, ks, vs, upper, lower, scale, twin, None)
    if check is not None and not check.finite():  # the exact twin (Notes)
        return softmax_attention_naive(q, k, v, is_causal=is_causal,
                                       causal_alignment=causal_alignment, scale=scale,
                                       enable_gqa=enable_gqa, return_lse=return_lse,
                                       window_size=window_size)
    return (out, lse) if return_lse else out
