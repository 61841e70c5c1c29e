r"""Linear attention with fused feature maps: chunked Triton kernels, forward and backward.

Layers: the ``@triton.jit`` kernels and their launchers live in
:mod:`kernelkit_gpu.attention.linear_chunk` (``_la_state_kernel``, ``_la_chunk_kernel``,
``_la_dden_kernel``); this module holds the pass structure (``linear_attention_fwd`` /
``linear_attention_bwd``), the autograd Function and the public :func:`linear_attention`.
The plain-PyTorch twin is :func:`kernelkit_gpu.linear_attention_naive`;
the float64 reference is :func:`kernelkit_math.attention.linear_attention`.

Parallelisation (B = 1, H = 16, T = 65536 must fill 132 SMs)
--------------------------------------------------------------
The sequence is cut into segments of ``seg_len`` positions (a multiple of the chunk), chosen so
that B*H x segments x value tiles is about eight waves of SMs (the causal sweep holds one
program per SM at a time, so fewer waves would lose up to a wave to quantisation).

Causal forward: (1) segment sums S_seg = phi(K_seg)^T V_seg, z_seg = sum phi(k) in parallel
(``_la_state_kernel``); (2) an exclusive prefix sum over the few segments in torch (float32) plus
the initial state gives each segment's starting state; (3) each (b, h, segment, Dv tile) program
walks its segment chunk by chunk: intra-chunk (phi(Q_c) phi(K_c)^T, lower triangle incl. the
diagonal) V_c plus the inter-chunk phi(Q_c) S, then S += phi(K_c)^T V_c. The denominator rides
along in float32 (row sums of the masked scores plus phi(Q_c) . z); the division is fused.

Non-causal forward: (1) segment sums as above, summed in torch to the full state (S, z);
(2) out = phi(Q) S / max(phi(Q) z, eps), row blocks in parallel. q, k, v are read once, o
written once (plus L2-resident states).

Backward (both modes): dden = -(dout . out) / g (one row kernel), then the reverse segment
sums dS_seg = phi(Q)^T dnum, dz_seg = phi(Q)^T dden, a suffix sum (plus the incoming gradient of
the returned final state), and three sweeps of the same chunk kernel: dV (reverse, phi(K) x
phi(Q) x dnum), dK (reverse, v x dnum x phi(Q) with the rank-one dden term, times phi'(k)) and
dQ (forward, from the forward pass's saved segment states, times phi'(q)). Gradients reach q, k,
v and the initial state (S_0, z_0); the returned final state is differentiable too.
"""

from __future__ import annotations

import torch
import triton

from kernelkit_gpu import checks
from kernelkit_gpu import _launch
from kernelkit_gpu.attention import gate
from kernelkit_gpu.attention import linear_chunk as LC
from kernelkit_gpu.attention.linear_naive import (check_args, linear_attention_naive, run_shifted,
                                                  twin_top_left)
from kernelkit_math import random_features as rf
from kernelkit_math.attention import causal_shift, resolve_is_causal
from kernelkit_math.registry import fill_doc

__all__ = ["linear_attention", "linear_attention_fwd", "linear_attention_bwd", "LinearAttentionFunction"]

#: Largest D (or feature-map size M) and Dv of the Triton kernels.
MAX_DIM = checks.MAX_HEAD_DIM


def _chunk_multiple(chunk):
    """Segments are multiples of every chunk the autotuner may pick (16, 32 or 64)."""
    return chunk or 64


#: Programs per launch, in waves over the SMs, of the segmented state sums and sweeps.
WAVES = 8


def _plan_segments(n_pos, bh, dv, device, chunk):
    """(positions per segment, segment count): about :data:`WAVES` waves of programs.

    8 waves for the state sums too: on an sm_90 GPU at B1 H16 T65536 D128 non-causal (forward,
    elu+1), 4 waves for the state sums took 0.83 ms, 8 waves 0.71 ms, 16 waves 0.73 ms.
    """
    seg = LC.segment_length(n_pos, bh, triton.cdiv(dv, 64), device, _chunk_multiple(chunk), WAVES)
    return seg, triton.cdiv(max(n_pos, 1), seg)


def _expand_seg(x, n_seg):
    """A per-(b, h) state as a (B*H, n_seg, ...) view with segment stride 0."""
    return x.unsqueeze(1).expand(x.shape[0], n_seg, *x.shape[1:])


def _segment_sums(b, c, n_seg, seg_len, map_b, *, den=None, eps=0.0, w=None, wz=1):
    B, H, _, dab = b.shape
    dc = c.shape[3]
    s = _launch.alloc((B * H, n_seg, dab, dc), torch.float32, b.device)
    z = _launch.alloc((B * H, n_seg, dab), torch.float32, b.device) if wz else \
        torch.zeros((B * H, n_seg, dab), dtype=torch.float32, device=b.device)
    LC.state_sums(b, c, n_seg=n_seg, seg_len=seg_len, map_b=map_b, map_c=0, den=den, eps=eps, w=w,
                  wz=wz, s_out=s, z_out=z)
    return s, z


# ------------------------------------------------------------------------------------ forward
def linear_attention_fwd(q, k, v, S0, z0, code, causal, normalize, eps, chunk):
    """Forward passes. Returns (out, den or None, saved states, S_final, z_final, segmentation).

    q (B, H, T, M), k (B, H, S, M), v (B, H, S, Dv) with unit last stride; S0 (B*H, M, Dv), z0
    (B*H, M) float32 or None. States are (B*H, ...) float32.
    """
    B, H, T, M = q.shape
    S, Dv = k.shape[2], v.shape[3]
    bh, dev = B * H, q.device
    out = _launch.alloc((B, H, T, Dv), q.dtype, dev)
    den = _launch.alloc((bh, T), torch.float32, dev) if normalize else None
    if causal:
        seg, ns = _plan_segments(max(T, S), bh, Dv, dev, chunk)
        s_seg, z_seg = _segment_sums(k, v, ns, seg, code)
        first_s = S0[:, None] if S0 is not None else torch.zeros_like(s_seg[:, :1])
        first_z = z0[:, None] if z0 is not None else torch.zeros_like(z_seg[:, :1])
        s_pre = torch.cat([first_s, s_seg[:, :-1]], dim=1).cumsum(dim=1)
        z_pre = torch.cat([first_z, z_seg[:, :-1]], dim=1).cumsum(dim=1)
        s_fin, z_fin = s_pre[:, -1] + s_seg[:, -1], z_pre[:, -1] + z_seg[:, -1]
        LC.chunk_sweep(q, k, v, out, s0=s_pre, seg_len=seg, n_seg=ns, causal=True, chunk=chunk,
                       map_a=code, map_b=code, den_out=den, z0=z_pre, eps=eps)
        return out, den, (s_pre, z_pre), s_fin, z_fin, (seg, ns)
    seg1, ns1 = _plan_segments(S, bh, Dv, dev, None)
    s_seg, z_seg = _segment_sums(k, v, ns1, seg1, code)
    s_fin, z_fin = s_seg.sum(dim=1), z_seg.sum(dim=1)
    if S0 is not None:
        s_fin, z_fin = s_fin + S0, z_fin + z0
    seg, ns = _plan_segments(T, bh, Dv, dev, chunk)
    LC.chunk_sweep(q, q, q, out, s0=_expand_seg(s_fin, ns), seg_len=seg, n_seg=ns, causal=False,
                   chunk=chunk, map_a=code, den_out=den, z0=_expand_seg(z_fin, ns), eps=eps)
    return out, den, (s_fin, z_fin), s_fin, z_fin, None


# ----------------------------------------------------------------------------------- backward
def linear_attention_bwd(dout, dSf, dzf, q, k, v, out, den, states, segs, code, causal, normalize,
                         eps, chunk):
    """Backward passes. Returns (dq, dk, dv, dS0, dz0); dS0 (B*H, M, Dv), dz0 (B*H, M) float32."""
    B, H, T, M = q.shape
    S, Dv = k.shape[2], v.shape[3]
    bh, dev = B * H, q.device
    dout = _launch.unit_last_stride(dout)
    zf_grad = dzf is not None and not normalize and bool(dzf.ne(0).any())
    if dSf is None:
        dSf = torch.zeros((bh, M, Dv), dtype=torch.float32, device=dev)
    if dzf is None:
        dzf = torch.zeros((bh, M), dtype=torch.float32, device=dev)
    dden = None
    if normalize:
        dden = LC.dden_rows(dout, out, den, eps, _launch.alloc((bh, T), torch.float32, dev))
    den_arg = den if normalize else None
    wz = 2 if normalize else 0
    # dK's rank-one term: alpha = 1, beta = dden; kept for normalize=False when z_final has a gradient.
    rank1_k = 2 if (normalize or zf_grad) else 0
    w_k = dden if normalize else torch.zeros((bh, T), dtype=torch.float32, device=dev)
    scale = 1 if normalize else 0
    dq = _launch.alloc(q.shape, q.dtype, dev)
    dk = _launch.alloc(k.shape, k.dtype, dev)
    dv = _launch.alloc(v.shape, v.dtype, dev)
    if causal:
        seg, ns = segs
        ds_seg, dz_seg = _segment_sums(q, dout, ns, seg, code, den=den_arg, eps=eps, w=dden, wz=wz)
        # suffix sums: the state of every later segment, plus the final state's gradient
        ds_suf = torch.cat([ds_seg[:, 1:], dSf.float()[:, None]], dim=1).flip(1).cumsum(1).flip(1)
        dz_suf = torch.cat([dz_seg[:, 1:], dzf.float()[:, None]], dim=1).flip(1).cumsum(1).flip(1)
        dS0, dz0 = ds_suf[:, 0] + ds_seg[:, 0], dz_suf[:, 0] + dz_seg[:, 0]
        s_pre, z_pre = states
        LC.chunk_sweep(k, q, dout, dv, s0=ds_suf, seg_len=seg, n_seg=ns, causal=True, reverse=True,
                       chunk=chunk, map_a=code, map_b=code, den=den_arg, scale=3 * scale, eps=eps)
        LC.chunk_sweep(v, dout, q, dk, s0=ds_suf.transpose(-1, -2), seg_len=seg, n_seg=ns,
                       causal=True, reverse=True, chunk=chunk, map_c=code, x=k, dmap=code,
                       den=den_arg, scale=2 * scale, eps=eps, w=w_k, rank1=rank1_k, u0=dz_suf)
        LC.chunk_sweep(dout, v, k, dq, s0=s_pre.transpose(-1, -2), seg_len=seg, n_seg=ns,
                       causal=True, chunk=chunk, map_c=code, x=q, dmap=code, den=den_arg,
                       scale=scale, eps=eps, w=dden, rank1=scale, u0=z_pre)
        return dq, dk, dv, dS0, dz0
    s_fin, z_fin = states
    seg1, ns1 = _plan_segments(T, bh, Dv, dev, None)
    ds_seg, dz_seg = _segment_sums(q, dout, ns1, seg1, code, den=den_arg, eps=eps, w=dden, wz=wz)
    dS, dz = ds_seg.sum(dim=1) + dSf.float(), dz_seg.sum(dim=1) + dzf.float()
    segk, nsk = _plan_segments(S, bh, max(Dv, M), dev, chunk)
    LC.chunk_sweep(k, k, k, dv, s0=_expand_seg(dS, nsk), seg_len=segk, n_seg=nsk, causal=False,
                   chunk=chunk, map_a=code)
    LC.chunk_sweep(v, v, v, dk, s0=_expand_seg(dS.transpose(-1, -2), nsk), seg_len=segk,
                   n_seg=nsk, causal=False, chunk=chunk, x=k, dmap=code, rank1=rank1_k,
                   u0=_expand_seg(dz, nsk))
    segq, nsq = _plan_segments(T, bh, M, dev, chunk)
    LC.chunk_sweep(dout, dout, dout, dq, s0=_expand_seg(s_fin.transpose(-1, -2), nsq),
                   seg_len=segq, n_seg=nsq, causal=False, chunk=chunk, x=q, dmap=code,
                   den=den_arg, scale=scale, eps=eps, w=dden, rank1=scale,
                   u0=_expand_seg(z_fin, nsq))
    return dq, dk, dv, dS, dz


class LinearAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: (q, k, v, S0, z0) -> (out, S_final, z_final); see the module docstring.

    ``causal`` is top-left here. A causal backward whose incoming gradients are not all finite
    computes that call's gradients through the plain-PyTorch twin instead
    (:mod:`kernelkit_gpu.attention.gate`)."""

    @staticmethod
    def forward(ctx, q, k, v, S0, z0, code, causal, normalize, eps, chunk):
        B, H, _, M = q.shape
        Dv = v.shape[3]
        s0 = S0.reshape(B * H, M, Dv).float() if S0 is not None else None
        z0_ = z0.reshape(B * H, M).float() if z0 is not None else None
        out, den, states, s_fin, z_fin, segs = linear_attention_fwd(
            q, k, v, s0, z0_, code, causal, normalize, eps, chunk)
        ctx.save_for_backward(q, k, v, out if normalize else None, den, *states, S0, z0)
        ctx.cfg = (code, causal, normalize, eps, chunk, segs, S0 is not None)
        return out, s_fin.reshape(B, H, M, Dv), z_fin.reshape(B, H, M)

    @staticmethod
    def backward(ctx, dout, dSf, dzf):
        q, k, v, out, den, st0, st1, S0, z0 = ctx.saved_tensors
        code, causal, normalize, eps, chunk, segs, has_init = ctx.cfg
        if causal and not gate.all_finite(dout, dSf, dzf):
            return (*_twin_gradients(q, k, v, S0, z0, (dout, dSf, dzf), ctx.cfg), *[None] * 5)
        B, H, T, M = q.shape
        Dv = v.shape[3]
        if dout is None:
            dout = torch.zeros((B, H, T, Dv), dtype=q.dtype, device=q.device)
        dSf = dSf.reshape(B * H, M, Dv) if dSf is not None else None
        dzf = dzf.reshape(B * H, M) if dzf is not None else None
        dq, dk, dv, dS0, dz0 = linear_attention_bwd(
            dout, dSf, dzf, q, k, v, out, den, (st0, st1), segs, code, causal, normalize, eps, chunk)
        if has_init:
            dS0, dz0 = dS0.reshape(B, H, M, Dv), dz0.reshape(B, H, M)
        else:
            dS0 = dz0 = None
        return dq, dk, dv, dS0, dz0, None, None, None, None, None


def _twin_gradients(q, k, v, S0, z0, grads, cfg):
    """(dq, dk, dv, dS0, dz0) of a top-left causal call through the plain-PyTorch twin (its
    forward recomputed); dS0, dz0 are None without an initial state."""
    code, _, normalize, eps, chunk, _, has_init = cfg
    leaves = [t.detach().requires_grad_(True) for t in ((q, k, v, S0, z0) if has_init else
                                                         (q, k, v))]
    with torch.enable_grad():
        out, (s_fin, z_fin) = twin_top_left(*leaves[:3], code, True, normalize, eps,
                                            tuple(leaves[3:]) or None, chunk)
    pairs = [(o, g) for o, g in zip((out, s_fin, z_fin), grads) if g is not None]
    got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                              allow_unused=True)
    got = [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, got)]
    return (*got, None, None) if not has_init else tuple(got)


@fill_doc(fused=rf.feature_map_set_doc(fused=True))
def linear_attention(q, k, v, *, feature_map="elu+1", is_causal=False, causal_alignment="top_left",
                     normalize=True, eps=1e-6, initial_state=None, return_state=False,
                     chunk_size=None, causal=None):
    r"""Linear attention phi(q)·phi(k) with the feature map fused into chunked Triton kernels.

    With Q = phi(q) (B, H, T, M), K = phi(k) (B, H, S, M) and the state (S_0, z_0), zero by
    default:

    .. math::

        \text{num}_t = Q_t^\top \Big(S_0 + \sum_{s \in V(t)} K_s v_s^\top\Big), \quad
        \text{den}_t = Q_t \cdot \Big(z_0 + \sum_{s \in V(t)} K_s\Big), \quad
        \text{out}_t = \frac{\text{num}_t}{\max(\text{den}_t, \varepsilon)}

    V(t) is every key, or {s <= t + shift} with ``is_causal`` (shift 0 top-left aligned, as
    ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``; S - T bottom-right
    aligned: ``causal_alignment``). Equivalent to ``kernelkit_math.attention.linear_attention(q,
    k, v, feature_map, is_causal=is_causal, causal_alignment=causal_alignment,
    normalize=normalize, eps=eps, initial_state=..., return_state=...)`` up to dtype tolerance.

    Parameters
    ----------
    q : torch.Tensor, shape (B, H, T, D)
    k : torch.Tensor, shape (B, H, S, D)
    v : torch.Tensor, shape (B, H, S, Dv)
        float16, bfloat16 or float32, one dtype, on a CUDA device (CPU under
        ``TRITON_INTERPRET=1``). Any strides (a unit stride in the last dim avoids a copy), so a
        (B, T, H, D) tensor passed as ``x.transpose(1, 2)`` is used in place. D, Dv <= 256;
        any T, S, causal or not (alignment: ``causal_alignment``).
    feature_map : {fused} or None
        A registry map with a fused code, applied inside the kernels (and its derivative in the
        backward). None: q and k are already feature-mapped (e.g. FAVOR+ features of size M,
        M <= 256, M != D allowed).
    is_causal : bool
        ``causal`` is the deprecated name of ``is_causal`` (FutureWarning).
    causal_alignment : {"top_left", "bottom_right"}, default "top_left"
        Only read when ``is_causal`` is True (validated always). ``"top_left"``: key s visible
        to query t iff s <= t (torch ``CausalVariant.UPPER_LEFT``, SDPA's ``is_causal=True``);
        ``"bottom_right"``: iff s <= t + S - T (torch ``CausalVariant.LOWER_RIGHT``,
        FlashAttention's KV-cache decoding). With T > S the first T - S queries see no key and
        read the initial state alone (output 0 without one). The kernels run top-left with as
        many queries as keys (:func:`kernelkit_gpu.attention.linear_naive.run_shifted`): T < S
        pads the queries in front with S - T zero rows (the causal sweep then covers S query
        positions), T > S computes the first T - S rows from the initial state alone.
    normalize : bool
        Divide by the guarded denominator; False returns the numerator.
    eps : float
        Denominator floor (>= 0); a guarded denominator of 0 (eps = 0) gives 0.
    initial_state : (torch.Tensor (B, H, M, Dv), torch.Tensor (B, H, M)) or None
        State (S_0, z_0) added before the first key, e.g. the ``return_state`` of the previous
        segment of a sequence; any floating dtype (used as float32). Gradients flow into it.
    return_state : bool
        Also return (S_final (B, H, M, Dv), z_final (B, H, M)), float32: the state after all S
        keys, differentiable.
    chunk_size : {16, 32, 64, 128} or None
        Chunk length of the causal kernels; None lets the autotuner pick (64 or 128).

    Returns
    -------
    out : torch.Tensor, shape (B, H, T, Dv), dtype of q
    state : (S_final, z_final), float32; only with ``return_state``.

    Raises
    ------
    TypeError
        Non-tensors, float64 or integer dtypes, mismatched dtypes, non-bool flags, a non-string
        ``causal_alignment``.
    ValueError
        Bad shapes (named), D or Dv > 256, unknown feature map, eps < 0, bad chunk_size,
        initial_state or ``causal_alignment``, a CPU tensor without the interpreter.

    Notes
    -----
    Accumulation and states are float32 in every dtype. bfloat16 rounds phi(q), phi(k), the
    intra-chunk scores and the state to bfloat16 for the tensor-core products (as a bfloat16
    PyTorch computation rounds its intermediates); float16 computes the inter-chunk product in
    TF32 so that the state never overflows float16; float32 uses IEEE float32 products (exact
    float32 semantics, several times slower than the 16-bit paths). Measured max errors relative
    to max |reference| (T = 256, D = 64): float32 ~4e-7, float16 ~3e-4, bfloat16 ~3e-3 for the
    output, at most 1.1e-6 / 1.1e-3 / 6.8e-3 for the gradients, each no more than a PyTorch
    computation of the same quantity in that dtype (table in
    :mod:`kernelkit_gpu.attention.linear_chunk`).

    NaN is never hidden, and masked keys are absent (the rule of
    :mod:`kernelkit_math.attention`): a NaN in q_t makes row t NaN, one in k_s or v_s every row
    that sees key s and the final state, and no other row; the gradients follow the same rule.
    Rows that see no key read the initial state alone (0 without one, whatever q_t holds). Only
    causal calls mask keys, so only they are checked (:mod:`kernelkit_gpu.attention.gate`):
    one float32 sum over each of q, k, v (and S_0, z_0 if given), read on the host after the
    kernels are queued; if all are finite the Triton result is returned, if not the call runs
    the plain-PyTorch twin
    :func:`kernelkit_gpu.linear_attention_naive` (exact, slower), forward and backward. A
    causal backward checks the gradients of the output and of the final state the same way and,
    if one is not finite, computes that call's gradients through the twin (its forward
    recomputed). Non-causal calls are never checked. Under CUDA graph capture or torch.compile
    tracing the check is skipped (no host read is possible): non-finite inputs then run the
    kernels as they are (IEEE arithmetic over their tiles and chunks).

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.attention.linear import linear_attention
    >>> q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)
    >>> out, (S, z) = linear_attention(q, k, v, is_causal=True, return_state=True)
    >>> out.shape, S.shape, z.shape
    (torch.Size([1, 2, 20, 16]), torch.Size([1, 2, 16, 16]), torch.Size([1, 2, 16]))
    """
    causal = resolve_is_causal(is_causal, causal, "linear_attention")
    B, H, T, S, M, Dv, code, chunk = check_args(
        q, k, v, feature_map, causal, normalize, eps, initial_state, return_state, chunk_size,
        allowed_dtypes=checks.ATTN_DTYPES, max_dim=MAX_DIM)
    shift = causal_shift(causal, causal_alignment, T, S)
    checks.check_triton_device(q, "q", "kernelkit_gpu.linear_attention_naive")
    S0, z0 = (None, None) if initial_state is None else initial_state
    check = gate.start(q, k, v, S0, z0) if causal else None  # read after the launch

    def run(q, k, v, causal):  # top-left aligned; (out, (S_final, z_final))
        if B * H == 0 or q.shape[2] == 0 or k.shape[2] == 0:
            return linear_attention_naive(q, k, v, feature_map=feature_map, is_causal=causal,
                                          normalize=normalize, eps=eps, initial_state=initial_state,
                                          return_state=True, chunk_size=chunk_size)
        q, k, v = (_launch.unit_last_stride(t) for t in (q, k, v))
        out, s_fin, z_fin = LinearAttentionFunction.apply(
            q, k, v, S0, z0, code, causal, normalize, float(eps), chunk)
        return out, (s_fin, z_fin)

    out, state = run_shifted(run, q, k, v, shift)
    if check is not None and not check.finite():  # the exact twin (Notes)
        return linear_attention_naive(q, k, v, feature_map=feature_map, is_causal=True,
                                      causal_alignment=causal_alignment, normalize=normalize,
                                      eps=eps, initial_state=initial_state,
                                      return_state=return_state, chunk_size=chunk_size)
    return (out, state) if return_state else out
