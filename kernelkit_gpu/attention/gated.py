"""Gated / decayed linear attention with one gate per head and step, forward in Triton.

The recurrence is that of :mod:`kernelkit_math.gated_attention` with a scalar log-gate
ln alpha_t per (batch, head, step) (RetNet's decay, Mamba2's and simple GLA's gates; GLA's
per-channel gates run the PyTorch path). Layers:

* ``_gated_fwd_kernel``: one program per (batch-head, BLOCK_V columns of v); it walks the
  sequence in chunks of BLOCK_C steps, holding the state S (BLOCK_D x BLOCK_V, float32) in
  registers. Per chunk, with G the cumulative log-gate from the chunk's start (zero gates, -inf,
  summed apart as counts R, so no infinity is subtracted):
  out = (s q * exp(G)) @ S + ((s q k^T) o exp(G_i - G_j) [j <= i, R_i = R_j]) @ v, then
  S <- exp(G_C) S + (k * exp(G_C - G))^T v. Pairs j > i are set to 0 with ``tl.where`` before
  the product with v; a non-finite v_j would still reach them as 0 * inf, so the caller checks v
  first (:mod:`kernelkit_gpu.attention.gate`) and runs the PyTorch twin when it is not finite.
* ``gated_fwd``: the launcher; ``GatedLinearAttentionFunction``: forward in Triton, backward by
  recomputing the twin (:func:`kernelkit_gpu.attention.gated_naive.gated_linear_attention_naive`)
  under autograd (the twin's memory, one more forward).

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

__all__ = ["gated_fwd", "GatedLinearAttentionFunction"]


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
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    q_base = q_ptr + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    k_base = k_ptr + b.to(tl.int64) * skb + h.to(tl.int64) * skh
    v_base = v_ptr + b.to(tl.int64) * svb + h.to(tl.int64) * svh + pid_v * BLOCK_V * svd
    g_base = g_ptr + b.to(tl.int64) * sgb + h.to(tl.int64) * sgh
    o_base = o_ptr + b.to(tl.int64) * sob + h.to(tl.int64) * soh + pid_v * BLOCK_V * sod
    state = (pid_bh.to(tl.int64) * D + offs_d[:, None]) * DV + offs_v[None, :]
    state_mask = (offs_d[:, None] < D) & (offs_v[None, :] < DV)
    if HAS_INIT:
        S = tl.load(s0_ptr + state, mask=state_mask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros((BLOCK_D, BLOCK_V), tl.float32)
    rows = offs_c[:, None]
    cols = offs_c[None, :]
    last = offs_c == BLOCK_C - 1
    for c0 in range(0, T, BLOCK_C):
        t = c0 + offs_c
        q = _load_rows(q_base, t, offs_d, sqt, sqd, T, D, True, True)
        k = _load_rows(k_base, t, offs_d, skt, skd, T, D, True, True)
        v = _load_rows(v_base, t, tl.arange(0, BLOCK_V), svt, svd, T, DV - pid_v * BLOCK_V,
                       True, True)
        g = tl.load(g_base + t.to(tl.int64) * sgt, mask=t < T, other=0.0).to(tl.float32)
        zero = g == float("-inf")
        G = tl.cumsum(tl.where(zero, 0.0, g), 0)  # the finite log-gates summed from the start
        R = tl.cumsum(zero.to(tl.int32), 0)  # zero gates so far
        start = tl.where(R == 0, tl.exp(G), 0.0)  # weight of the chunk's incoming state
        # float32 operands (the state, the decayed scores) multiply with F32_PREC
        out = tl.dot(q.to(tl.float32) * (scale * start[:, None]), S, input_precision=F32_PREC)
        scores = _mm(q, tl.trans(k), None, PREC, UPCAST) * scale
        keep = (cols <= rows) & (R[:, None] == R[None, :])
        decay = tl.exp(tl.where(keep, G[:, None] - G[None, :], 0.0))
        scores = tl.where(keep, scores * decay, 0.0)
        out = tl.dot(scores, v.to(tl.float32), out, input_precision=F32_PREC)
        o_ptrs = o_base + t.to(tl.int64)[:, None] * sot + tl.arange(0, BLOCK_V)[None, :] * sod
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty),
                 mask=(t[:, None] < T) & (offs_v[None, :] < DV))
        G_end = tl.sum(tl.where(last, G, 0.0), 0)
        R_end = tl.sum(tl.where(last, R, 0), 0)
        to_end = tl.where(R == R_end, tl.exp(G_end - G), 0.0)
        kw = k.to(tl.float32) * to_end[:, None]
        carry = tl.where(R_end == 0, tl.exp(G_end), 0.0)
        S = S * carry + tl.dot(tl.trans(kw), v.to(tl.float32), input_precision=F32_PREC)
    if RETURN_STATE:
        tl.store(sT_ptr + state, S, mask=state_mask)


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


class GatedLinearAttentionFunction(torch.autograd.Function):
    """Forward by :func:`gated_fwd` (the PyTorch twin where v is not finite), backward by
    recomputing the twin under autograd. Inputs: q, k, v, log_alpha (B, H, T) float32,
    scale, initial_state (or None); outputs out and the final state (float32)."""

    @staticmethod
    def forward(ctx, q, k, v, log_alpha, scale, initial_state):
        ctx.save_for_backward(q, k, v, log_alpha, initial_state)
        ctx.scale = scale
        check = gate.start(v)  # read after the launch
        out, state = gated_fwd(q, k, v, log_alpha, scale=scale, initial_state=initial_state,
                               return_state=True)
        if check is not None and not check.finite():
            out, state = gated_linear_attention_naive(
                q, k, v, log_alpha[..., None], scale=scale, initial_state=initial_state,
                return_state=True)
        return out, state

    @staticmethod
    def backward(ctx, dout, dstate):
        q, k, v, log_alpha, initial_state = ctx.saved_tensors
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
