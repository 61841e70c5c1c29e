"""Gated / decayed linear attention with one gate per head and step, in Triton.

The recurrence is that of :mod:`kernelkit_math.gated_attention` with a scalar log-gate
ln alpha_t per (batch, head, step) (RetNet's decay, Mamba2's and simple GLA's gates; GLA's
per-channel gates run the PyTorch path). Layers:

* ``_gated_fwd_kernel``: one program per (batch-head, BLOCK_V columns of v); it walks the
  sequence in chunks of BLOCK_C steps, holding the state S (BLOCK_D x BLOCK_V, float32) in
  registers. Per chunk, with G the cumulative log-gate from the chunk's start (zero gates, -inf,
  summed apart as counts R, so no infinity is subtracted; ``_chunk_gates``):
  out = (s q * exp(G)) @ S + ((s q k^T) o exp(G_i - G_j) [j <= i, R_i = R_j]) @ v, then
  S <- exp(G_C) S + (k * exp(G_C - G))^T v. Pairs j > i are set to 0 with ``tl.where`` before
  the product with v; a non-finite v_j would still reach them as 0 * inf, so the caller checks v
  first (:mod:`kernelkit_gpu.attention.gate`) and runs the PyTorch twin when it is not finite.
* ``_gated_bwd_dq_kernel`` (the chunks forward, the state rebuilt) and
  ``_gated_bwd_dkdv_kernel`` (the chunks in reverse, with the gradient dS of the state at the
  chunk's end): dq and dk summed over the column blocks by the caller, dv, and the initial
  state's gradient; the log-gates' gradient is the reverse cumulative sum of
  q . dq - k . dk (:func:`gated_bwd`). The backward checks q, k, v and the incoming gradients
  and recomputes the twin under autograd where one is not finite.
* ``gated_fwd`` / ``gated_bwd``: the launchers; ``GatedLinearAttentionFunction`` ties them to
  autograd.

The chunks run one after another inside a program, so the parallelism is B x H x ceil(Dv /
BLOCK_V) programs: enough for a batch of many heads, little for one sequence of few heads.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelkit_gpu import _launch
from kernelkit_gpu.attention import _configs as _attn_configs
from kernelkit_gpu.attention import gate
from kernelkit_gpu.attention._tiles import _load_rows, _mm
from kernelkit_gpu.attention.gated_naive import gated_linear_attention_naive

__all__ = ["gated_fwd", "gated_bwd", "GatedLinearAttentionFunction"]


@triton.jit
def _program(H, D, DV, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr):
    """This program's (batch-head, column block), its batch and head (int64), and the offsets
    and mask of its BLOCK_D x BLOCK_V slice of a contiguous (B, H, D, Dv) state."""
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    state = (pid_bh.to(tl.int64) * D + offs_d[:, None]) * DV + offs_v[None, :]
    state_mask = (offs_d[:, None] < D) & (offs_v[None, :] < DV)
    return pid_bh, pid_v, (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64), state, state_mask


@triton.jit
def _initial_state(s0_ptr, state, state_mask, HAS_INIT: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_V: tl.constexpr):
    """This program's slice of S_0 in float32 (zeros without one)."""
    if HAS_INIT:
        S = tl.load(s0_ptr + state, mask=state_mask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros((BLOCK_D, BLOCK_V), tl.float32)
    return S


@triton.jit
def _rows(ptr, b, h, sb, sh, t, st, sc, T, C, col0, BLOCK: tl.constexpr):
    """Rows t of the (b, h) slice of a (B, H, T, C) tensor, columns col0 .. col0 + BLOCK
    (masked against T and C), as float32."""
    base = ptr + b * sb + h * sh + col0 * sc
    return _load_rows(base, t, tl.arange(0, BLOCK), st, sc, T, C - col0, True, True).to(
        tl.float32)


@triton.jit
def _gated_fwd_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, s0_ptr, o_ptr, sT_ptr,
    H, T, D, DV, scale,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd,
    sgb, sgh, sgt, sob, soh, sot, sod,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
    HAS_INIT: tl.constexpr, RETURN_STATE: tl.constexpr, PREC: tl.constexpr,
    UPCAST: tl.constexpr, F32_PREC: tl.constexpr,
):
    pid_bh, pid_v, b, h, state, state_mask = _program(H, D, DV, BLOCK_D, BLOCK_V)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    q_base = q_ptr + b * sqb + h * sqh
    k_base = k_ptr + b * skb + h * skh
    g_base = g_ptr + b * sgb + h * sgh
    o_base = o_ptr + b * sob + h * soh + pid_v * BLOCK_V * sod
    S = _initial_state(s0_ptr, state, state_mask, HAS_INIT, BLOCK_D, BLOCK_V)
    rows = offs_c[:, None]
    cols = offs_c[None, :]
    for c0 in range(0, T, BLOCK_C):
        t = c0 + offs_c
        q = _load_rows(q_base, t, offs_d, sqt, sqd, T, D, True, True)
        k = _load_rows(k_base, t, offs_d, skt, skd, T, D, True, True)
        v = _rows(v_ptr, b, h, svb, svh, t, svt, svd, T, DV, pid_v * BLOCK_V, BLOCK_V)
        G, R, start, to_end, carry = _chunk_gates(g_base, t, sgt, T, BLOCK_C)
        # float32 operands (the state, the decayed scores) multiply with F32_PREC
        out = tl.dot(q.to(tl.float32) * (scale * start[:, None]), S, input_precision=F32_PREC)
        scores = _mm(q, tl.trans(k), None, PREC, UPCAST) * scale
        keep = (cols <= rows) & (R[:, None] == R[None, :])
        decay = tl.exp(tl.where(keep, G[:, None] - G[None, :], 0.0))
        scores = tl.where(keep, scores * decay, 0.0)
        out = tl.dot(scores, v, out, input_precision=F32_PREC)
        o_ptrs = o_base + t.to(tl.int64)[:, None] * sot + tl.arange(0, BLOCK_V)[None, :] * sod
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty),
                 mask=(t[:, None] < T) & (offs_v[None, :] < DV))
        kw = k.to(tl.float32) * to_end[:, None]
        S = S * carry + tl.dot(tl.trans(kw), v, input_precision=F32_PREC)
    if RETURN_STATE:
        tl.store(sT_ptr + state, S, mask=state_mask)


@triton.jit
def _chunk_gates(g_base, t, sgt, T, BLOCK_C: tl.constexpr):
    """Per step of a chunk: G (finite log-gates summed from the chunk's start), R (zero gates so
    far), the weight of the incoming state exp(G) (0 after a zero gate), and of the chunk's end:
    the end's (G, R) and the incoming state's weight there."""
    g = tl.load(g_base + t.to(tl.int64) * sgt, mask=t < T, other=0.0).to(tl.float32)
    zero = g == float("-inf")
    G = tl.cumsum(tl.where(zero, 0.0, g), 0)
    R = tl.cumsum(zero.to(tl.int32), 0)
    start = tl.where(R == 0, tl.exp(G), 0.0)
    last = tl.arange(0, BLOCK_C) == BLOCK_C - 1
    G_end = tl.sum(tl.where(last, G, 0.0), 0)
    R_end = tl.sum(tl.where(last, R, 0), 0)
    to_end = tl.where(R == R_end, tl.exp(G_end - G), 0.0)
    carry = tl.where(R_end == 0, tl.exp(G_end), 0.0)
    return G, R, start, to_end, carry


@triton.jit
def _gated_bwd_dq_kernel(
    k_ptr, v_ptr, g_ptr, s0_ptr, do_ptr, dq_ptr,
    H, T, D, DV, scale,
    skb, skh, skt, skd, svb, svh, svt, svd, sgb, sgh, sgt, sdb, sdh, sdt, sdd,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
    HAS_INIT: tl.constexpr, F32_PREC: tl.constexpr,
):
    """dq over this program's BLOCK_V columns of v (a partial sum: the caller adds the column
    blocks): s (exp(G) dO S_prev^T + ((dO v^T) o W) k), the state rebuilt as in the forward."""
    pid_bh, pid_v, b, h, state, state_mask = _program(H, D, DV, BLOCK_D, BLOCK_V)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    g_base = g_ptr + b * sgb + h * sgh
    dq_base = dq_ptr + (pid_v * tl.num_programs(0) + pid_bh).to(tl.int64) * T * D
    S = _initial_state(s0_ptr, state, state_mask, HAS_INIT, BLOCK_D, BLOCK_V)
    rows = offs_c[:, None]
    cols = offs_c[None, :]
    for c0 in range(0, T, BLOCK_C):
        t = c0 + offs_c
        k = _rows(k_ptr, b, h, skb, skh, t, skt, skd, T, D, 0, BLOCK_D)
        v = _rows(v_ptr, b, h, svb, svh, t, svt, svd, T, DV, pid_v * BLOCK_V, BLOCK_V)
        do = _rows(do_ptr, b, h, sdb, sdh, t, sdt, sdd, T, DV, pid_v * BLOCK_V, BLOCK_V)
        G, R, start, to_end, carry = _chunk_gates(g_base, t, sgt, T, BLOCK_C)
        keep = (cols <= rows) & (R[:, None] == R[None, :])
        w = tl.where(keep, tl.exp(tl.where(keep, G[:, None] - G[None, :], 0.0)), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=F32_PREC)  # dO_i . v_j
        dq = tl.dot(do, tl.trans(S), input_precision=F32_PREC) * start[:, None]
        dq = tl.dot(tl.where(keep, dp * w, 0.0), k, dq, input_precision=F32_PREC) * scale
        tl.store(dq_base + t.to(tl.int64)[:, None] * D + offs_d[None, :], dq,
                 mask=(t[:, None] < T) & (offs_d[None, :] < D))
        S = S * carry + tl.dot(tl.trans(k * to_end[:, None]), v, input_precision=F32_PREC)


@triton.jit
def _gated_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, do_ptr, dsT_ptr, dk_ptr, dv_ptr, ds0_ptr,
    H, T, D, DV, scale,
    sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sgb, sgh, sgt,
    sdb, sdh, sdt, sdd,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
    F32_PREC: tl.constexpr,
):
    """dv (this program's columns) and dk (a partial sum over the column blocks), the chunks in
    reverse with dS, the gradient of the state at the current chunk's end (from the final
    state's gradient dS_T); dS at the start is the initial state's gradient."""
    pid_bh, pid_v, b, h, state, state_mask = _program(H, D, DV, BLOCK_D, BLOCK_V)
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    g_base = g_ptr + b * sgb + h * sgh
    dk_base = dk_ptr + (pid_v * tl.num_programs(0) + pid_bh).to(tl.int64) * T * D
    dv_base = dv_ptr + pid_bh.to(tl.int64) * T * DV
    dS = tl.load(dsT_ptr + state, mask=state_mask, other=0.0)
    rows = offs_c[:, None]
    cols = offs_c[None, :]
    n_chunks = tl.cdiv(T, BLOCK_C)
    for i in range(0, n_chunks):
        c0 = (n_chunks - 1 - i) * BLOCK_C
        t = c0 + offs_c
        q = _rows(q_ptr, b, h, sqb, sqh, t, sqt, sqd, T, D, 0, BLOCK_D)
        k = _rows(k_ptr, b, h, skb, skh, t, skt, skd, T, D, 0, BLOCK_D)
        v = _rows(v_ptr, b, h, svb, svh, t, svt, svd, T, DV, pid_v * BLOCK_V, BLOCK_V)
        do = _rows(do_ptr, b, h, sdb, sdh, t, sdt, sdd, T, DV, pid_v * BLOCK_V, BLOCK_V)
        G, R, start, to_end, carry = _chunk_gates(g_base, t, sgt, T, BLOCK_C)
        keep = (cols <= rows) & (R[:, None] == R[None, :])  # [i (query), j (key)]
        w = tl.where(keep, tl.exp(tl.where(keep, G[:, None] - G[None, :], 0.0)), 0.0) * scale
        a = tl.where(keep, tl.dot(q, tl.trans(k), input_precision=F32_PREC) * w, 0.0)
        dp = tl.where(keep, tl.dot(do, tl.trans(v), input_precision=F32_PREC) * w, 0.0)
        kw = k * to_end[:, None]
        dv = tl.dot(tl.trans(a), do, input_precision=F32_PREC)
        dv = tl.dot(kw, dS, dv, input_precision=F32_PREC)
        dk = tl.dot(tl.trans(dp), q, input_precision=F32_PREC)
        dk += tl.dot(v, tl.trans(dS), input_precision=F32_PREC) * to_end[:, None]
        tl.store(dv_base + t.to(tl.int64)[:, None] * DV + offs_v[None, :], dv,
                 mask=(t[:, None] < T) & (offs_v[None, :] < DV))
        tl.store(dk_base + t.to(tl.int64)[:, None] * D + offs_d[None, :], dk,
                 mask=(t[:, None] < T) & (offs_d[None, :] < D))
        qs = q * (start * scale)[:, None]
        dS = dS * carry + tl.dot(tl.trans(qs), do, input_precision=F32_PREC)
    tl.store(ds0_ptr + state, dS, mask=state_mask)


def _blocks(d, dv):
    """(BLOCK_C, BLOCK_D, BLOCK_V, num_warps) for head dims d and dv."""
    block_d = _launch.block_size(d)
    block_v = min(64, _launch.block_size(dv))
    if _launch.INTERPRET:
        return 16, block_d, block_v, 4
    return (64 if block_d <= 64 else 32), block_d, block_v, 4


def gated_fwd(q, k, v, log_alpha, *, scale=None, initial_state=None, return_state=False):
    """The Triton forward on (B, H, T, D) q, k, (B, H, T, Dv) v (any strides) and the (B, H, T)
    log-gates ``log_alpha`` (float32); returns ``(out, state)``: out (B, H, T, Dv) in q's dtype,
    state (B, H, D, Dv) float32 or None."""
    B, H, T, D = q.shape
    dv = v.shape[-1]
    block_c, block_d, block_v, warps = _blocks(D, dv)
    out = _launch.alloc((B, H, T, dv), q.dtype, q.device)
    state = _launch.alloc((B, H, D, dv), torch.float32, q.device) if return_state else out
    s0 = initial_state.to(torch.float32).contiguous() if initial_state is not None else out
    grid = (B * H, triton.cdiv(dv, block_v))
    _gated_fwd_kernel[grid](
        q, k, v, log_alpha, s0, out, state,
        H, T, D, dv, 1.0 if scale is None else float(scale),
        *q.stride(), *k.stride(), *v.stride(), *log_alpha.stride(), *out.stride(),
        BLOCK_C=block_c, BLOCK_D=block_d, BLOCK_V=block_v,
        HAS_INIT=initial_state is not None, RETURN_STATE=return_state,
        PREC=_attn_configs.dot_precision(q.dtype), UPCAST=_attn_configs.upcast(q.dtype),
        F32_PREC="ieee" if q.dtype == torch.float32 or _launch.INTERPRET else "tf32",
        num_warps=warps, num_stages=1,
    )
    return out, (state if return_state else None)


def gated_bwd(q, k, v, log_alpha, scale, initial_state, final_state, dout, dstate):
    """The Triton backward: ``(dq, dk, dv, dlog_alpha, dinitial_state)`` for the forward of
    :func:`gated_fwd` that returned ``final_state``, given the gradients ``dout`` of its output
    and ``dstate`` of its final state. d ln alpha_t is the reverse cumulative sum of
    q_t . dq_t - k_t . dk_t (plus <dS_T, S_T> at the last step): the pairs (t, j) that step r
    lies between, as the unrolled sum's weights exp(sum_{j < r <= t} ln alpha_r) say."""
    B, H, T, D = q.shape
    dv_cols = v.shape[-1]
    block_c, block_d, block_v, warps = _blocks(D, dv_cols)
    n_v = triton.cdiv(dv_cols, block_v)
    f32 = torch.float32
    dq_parts = _launch.alloc((n_v, B * H, T, D), f32, q.device)
    dk_parts = _launch.alloc((n_v, B * H, T, D), f32, q.device)
    dv = _launch.alloc((B, H, T, dv_cols), f32, q.device)
    ds0 = _launch.alloc((B, H, D, dv_cols), f32, q.device)
    dst = dstate.to(f32).contiguous()
    s0 = initial_state.to(f32).contiguous() if initial_state is not None else dst
    prec = "ieee" if q.dtype == torch.float32 or _launch.INTERPRET else "tf32"
    scale = 1.0 if scale is None else float(scale)
    grid = (B * H, n_v)
    common = dict(BLOCK_C=block_c, BLOCK_D=block_d, BLOCK_V=block_v, F32_PREC=prec,
                  num_warps=warps, num_stages=1)
    _gated_bwd_dq_kernel[grid](
        k, v, log_alpha, s0, dout, dq_parts, H, T, D, dv_cols, scale,
        *k.stride(), *v.stride(), *log_alpha.stride(), *dout.stride(),
        HAS_INIT=initial_state is not None, **common)
    _gated_bwd_dkdv_kernel[grid](
        q, k, v, log_alpha, dout, dst, dk_parts, dv, ds0, H, T, D, dv_cols, scale,
        *q.stride(), *k.stride(), *v.stride(), *log_alpha.stride(), *dout.stride(), **common)
    dq = dq_parts.sum(0).view(B, H, T, D)
    dk = dk_parts.sum(0).view(B, H, T, D)
    dlog = (q.to(f32) * dq).sum(-1) - (k.to(f32) * dk).sum(-1)
    if T:
        dlog[..., -1] += (dst * final_state.to(f32)).sum((-1, -2))
    dlog = torch.flip(torch.cumsum(torch.flip(dlog, (-1,)), -1), (-1,))
    dlog = torch.where(torch.isneginf(log_alpha), 0.0, dlog)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dlog, ds0


class GatedLinearAttentionFunction(torch.autograd.Function):
    """Forward by :func:`gated_fwd`, backward by :func:`gated_bwd`; where an input (forward: v;
    backward: q, k, v and the incoming gradients) is not finite, the PyTorch twin instead
    (recomputed under autograd for the backward), which keeps masked pairs out exactly. Inputs:
    q, k, v, log_alpha (B, H, T) float32, scale, initial_state (or None); outputs out and the
    final state (float32)."""

    @staticmethod
    def forward(ctx, q, k, v, log_alpha, scale, initial_state):
        ctx.scale = scale
        check = gate.start(v)  # read after the launch
        out, state = gated_fwd(q, k, v, log_alpha, scale=scale, initial_state=initial_state,
                               return_state=True)
        if check is not None and not check.finite():
            out, state = gated_linear_attention_naive(
                q, k, v, log_alpha[..., None], scale=scale, initial_state=initial_state,
                return_state=True)
        ctx.save_for_backward(q, k, v, log_alpha, initial_state, state)
        return out, state

    @staticmethod
    def backward(ctx, dout, dstate):
        q, k, v, log_alpha, initial_state, state = ctx.saved_tensors
        if gate.all_finite(q, k, v, dout, dstate):
            dq, dk, dv, dlog, ds0 = gated_bwd(q, k, v, log_alpha, ctx.scale, initial_state,
                                              state, dout, dstate)
            return dq, dk, dv, dlog, None, (ds0 if initial_state is not None else None)
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_(t.requires_grad) if t is not None else None
                      for t in (q, k, v, log_alpha, initial_state)]
            out, state = gated_linear_attention_naive(
                inputs[0], inputs[1], inputs[2], inputs[3][..., None], scale=ctx.scale,
                initial_state=inputs[4], return_state=True)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = torch.autograd.grad((out, state), wanted,
                                        (dout, dstate.to(state.dtype)), allow_unused=True)
        it = iter(grads)
        result = [next(it) if t is not None and t.requires_grad else None for t in inputs]
        return result[0], result[1], result[2], result[3], None, result[4]
