r"""Gated and decayed linear attention (RetNet's decay, Mamba2's and GLA's gates)."""

from __future__ import annotations

import numbers

from kernelkit.attention._dispatch import (_check_backend, _check_layout, _check_q_scale,
                                           runs_triton)

__all__ = ["gated_linear_attention"]


def gated_linear_attention(q, k, v, log_gate=None, *, decay=None, scale=None,
                           initial_state=None, return_state=False, layout="bhtd",
                           cu_seqlens=None, max_seqlen=None, backend="auto"):
    r"""Causal linear attention whose state forgets: a per-head decay and data-dependent gates.

    .. math::

        S_t = \operatorname{diag}(\alpha_t)\, S_{t-1} + k_t v_t^\top,\qquad
        \mathrm{out}_t = (s\, q_t)^\top S_t,\qquad
        \alpha_t = \gamma \exp(g_t),

    with g_t the log-gate of step t (one value per head and step as in Mamba2 and simple GLA,
    or one per channel of the state as in GLA), gamma a fixed decay per head (RetNet) and s the
    ``scale``. No feature map and no normalisation (flash-linear-attention's convention for
    these forms). Unrolled, out_t = sum_{j <= t} (sum_c s q_tc k_jc w_tjc) v_j with w_tjc the
    product of alpha_rc over j < r <= t: with a decay alone, the dot-product kernel q·k times
    the exponential kernel gamma^(t - j) in position, a kernel smoother without its
    denominator. The float64 reference is :mod:`kernelkit_math.gated_attention`.

    Parameters
    ----------
    q, k : torch.Tensor of shape (B, H, T, D)
    v : torch.Tensor of shape (B, H, T, Dv)
        One floating dtype, one device. T is the same for all three (the recurrence runs over
        the keys as they come); no grouped heads.
    log_gate : torch.Tensor of shape (B, H, T) or (B, H, T, D), optional
        ln of the forget gate of each step, <= 0 (a gate of exactly 0, -inf here, empties the
        state); same device, any floating dtype (computed in float32, float64 for float64 q).
        None: no data-dependent gate.
    decay : float or sequence of H floats, optional
        A fixed forget gate per head, in [0, 1] (RetNet uses 1 - 2^(-5 - h)). None: 1.
    scale : float, optional
        Multiplies q (flash-linear-attention's default is 1 / sqrt(D); here None multiplies by
        nothing, as :func:`~kernelkit.attention.linear_attention`).
    initial_state : torch.Tensor of shape (B, H, D, Dv), optional
        S_0, continuing an earlier call (with ``cu_seqlens``: one per sequence,
        (n_seqs, H, D, Dv)).
    return_state : bool
        Also return the final state, float32 (float64 for float64 q).
    layout : {"bhtd", "bthd"}, default "bhtd"
        (B, H, T, D) or (B, T, H, D) operands and output; with "bthd" ``log_gate`` is (B, T, H)
        or (B, T, H, D). States are (B, H, D, Dv) in both.
    cu_seqlens : torch.Tensor of shape (n_seqs + 1,), int32 or int64, optional
        A packed batch: q, k (total, H, D), v (total, H, Dv), ``log_gate`` (total, H) or
        (total, H, D); each sequence starts from its own state. Runs one call per sequence.
    max_seqlen : int, optional
        Only with ``cu_seqlens``: checked as an upper bound of the lengths.
    backend : {"auto", "torch", "triton"}, default "auto"
        "auto" and "torch" run the chunked PyTorch path
        (:func:`kernelkit_gpu.attention.gated_naive.gated_linear_attention_naive`,
        differentiable, any device, float64 too). "triton" runs the Triton kernels, forward
        and backward (:mod:`kernelkit_gpu.attention.gated`; CUDA, or the CPU under
        ``TRITON_INTERPRET=1``) for one gate per head and step (or none), D and Dv <= 128,
        float16, bfloat16 or float32; else a ValueError that says why not. The Triton kernels
        have run under the interpreter only so far; "auto" will take them once they have been
        measured on a GPU.

    Returns
    -------
    out : torch.Tensor, v's shape in the given layout, q's dtype
    state : torch.Tensor of shape (B, H, D, Dv), only with ``return_state``

    Raises
    ------
    TypeError, ValueError
        For tensors of other shapes, dtypes or devices, a log-gate above 0, a decay outside
        [0, 1] or of the wrong length, a bad ``scale``, ``layout``, ``cu_seqlens`` or
        ``backend``.

    Notes
    -----
    A NaN or infinity in q_t reaches output row t; one in k_j or v_j every row t >= j and the
    final state, even across a gate of exactly 0 (0 * NaN is NaN), as in the reference.

    Examples
    --------
    >>> import torch
    >>> from kernelkit.attention import gated_linear_attention
    >>> q = k = v = torch.randn(1, 2, 7, 16)
    >>> g = -torch.rand(1, 2, 7)  # Mamba2-style: one log-gate per head and step
    >>> gated_linear_attention(q, k, v, g, decay=0.9, scale=0.25).shape
    torch.Size([1, 2, 7, 16])
    """
    import torch

    _check_layout(layout)
    _check_backend(backend)
    scale = _check_q_scale(scale)
    if cu_seqlens is not None:
        return _packed(q, k, v, log_gate, decay, scale, initial_state, return_state, cu_seqlens,
                       max_seqlen, backend)
    if max_seqlen is not None:
        raise ValueError("max_seqlen is only read with cu_seqlens")
    _check_tensors(q, k, v, 4, "(B, H, T, D)")
    if layout == "bthd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        if isinstance(log_gate, torch.Tensor) and log_gate.ndim in (3, 4):
            log_gate = log_gate.transpose(1, 2)
    out = _dense(q, k, v, log_gate, decay, scale, initial_state, return_state, backend)
    if layout == "bthd":
        out = (out[0].transpose(1, 2), out[1]) if return_state else out.transpose(1, 2)
    return out


def _check_tensors(q, k, v, ndim, shape):
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape {shape}; got "
                            f"{type(t).__name__}")
        if t.ndim != ndim:
            raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor; got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device; got {q.device}, {k.device}, "
                         f"{v.device}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (no grouped heads); got "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    if v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"v must have shape {tuple(q.shape[:-1])} + (Dv,); got "
                         f"{tuple(v.shape)}")


def _log_alpha(q, log_gate, decay):
    """ln alpha of every step, (B, H, T, 1) or (B, H, T, D), in the working dtype."""
    import torch

    B, H, T, D = q.shape
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    la = q.new_zeros((B, H, T, 1), dtype=work)
    if log_gate is not None:
        if not isinstance(log_gate, torch.Tensor) or not log_gate.dtype.is_floating_point:
            raise TypeError("log_gate must be a floating torch.Tensor of shape (B, H, T) or "
                            f"(B, H, T, D); got {type(log_gate).__name__}")
        if log_gate.device != q.device:
            raise ValueError(f"log_gate must be on q's device {q.device}; got {log_gate.device}")
        if tuple(log_gate.shape) == (B, H, T):
            g = log_gate[..., None]
        elif tuple(log_gate.shape) == (B, H, T, D):
            g = log_gate
        else:
            raise ValueError(f"log_gate must have shape {(B, H, T)} (one value per head and "
                             f"step) or {(B, H, T, D)} (one per channel) in layout 'bhtd'; got "
                             f"{tuple(log_gate.shape)}")
        if bool((g > 0).any()):
            raise ValueError("log_gate must be <= 0 (the log of a forget gate in [0, 1])")
        la = la + g.to(work)
    if decay is not None:
        gamma = _check_decay(decay, H)
        la = la + torch.log(torch.tensor(gamma, dtype=work, device=q.device))[:, None, None]
    return la


def _check_decay(decay, H):
    """The list of H decays in [0, 1] from a number, a sequence or a 0-d / 1-d tensor."""
    import torch

    if isinstance(decay, torch.Tensor) and decay.ndim <= 1:
        values = decay.reshape(-1).tolist()
    elif isinstance(decay, (list, tuple)):
        values = list(decay)
    else:
        values = [decay]
    if any(isinstance(x, bool) or not isinstance(x, numbers.Real) for x in values):
        raise TypeError(f"decay must be a number or a sequence of H = {H} numbers; got "
                        f"{decay!r}")
    if len(values) == 1:
        values = values * H
    if len(values) != H:
        raise ValueError(f"decay must be a number or one per head ({H}); got {len(values)}")
    if not all(0.0 <= float(x) <= 1.0 for x in values):
        raise ValueError(f"decay must be in [0, 1]; got {values}")
    return [float(x) for x in values]


def _why_not_triton(q, v, la):
    """Why the Triton kernel cannot run this call whatever the device, or None."""
    from kernelkit_gpu.attention.gated_naive import TRITON_MAX_HEAD_DIM as MAX_HEAD_DIM

    if la.shape[-1] != 1:
        return "its kernel takes one gate per head and step, and log_gate has one per channel"
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_DIM:
        return (f"its kernel takes head dims up to {MAX_HEAD_DIM}; got D = {q.shape[-1]}, "
                f"Dv = {v.shape[-1]}")
    return None


def _dense(q, k, v, log_gate, decay, scale, initial_state, return_state, backend):
    import torch

    from kernelkit_gpu.attention.gated_naive import gated_linear_attention_naive

    la = _log_alpha(q, log_gate, decay)
    if initial_state is not None:
        want = (q.shape[0], q.shape[1], q.shape[-1], v.shape[-1])
        if not isinstance(initial_state, torch.Tensor) or tuple(initial_state.shape) != want:
            raise ValueError(f"initial_state must be a torch.Tensor of shape {want}; got "
                             f"{getattr(initial_state, 'shape', type(initial_state).__name__)}")
        if initial_state.device != q.device:
            raise ValueError(f"initial_state must be on q's device {q.device}; got "
                             f"{initial_state.device}")
    # "auto" keeps the PyTorch path until the Triton kernels have run on a GPU (they have run
    # under the interpreter only; docs/decisions.md): backend="triton" opts in
    if backend == "triton" and runs_triton(backend, q, _why_not_triton(q, v, la)):
        from kernelkit_gpu.attention.gated import GatedLinearAttentionFunction

        out, state = GatedLinearAttentionFunction.apply(
            q, k, v, la[..., 0].to(torch.float32), scale, initial_state)
        return (out, state) if return_state else out
    return gated_linear_attention_naive(q, k, v, la, scale=scale, initial_state=initial_state,
                                        return_state=return_state)


def _packed(q, k, v, log_gate, decay, scale, initial_state, return_state, cu_seqlens,
            max_seqlen, backend):
    """One dense call per sequence of a packed batch."""
    import torch

    from kernelkit_gpu.attention import varlen_naive as VN

    _check_tensors(q, k, v, 3, "(total_tokens, H, D) with cu_seqlens")
    total = VN.check_packed(q, k, v)
    n_seqs = VN.check_cu_seqlens(cu_seqlens, q.device, max_seqlen)
    if initial_state is not None and (not isinstance(initial_state, torch.Tensor)
                                      or initial_state.ndim != 4
                                      or initial_state.shape[0] != n_seqs):
        raise ValueError("with cu_seqlens, initial_state must hold one state per sequence: "
                         f"shape (n_seqs={n_seqs}, H, D, Dv)")
    if log_gate is not None and not isinstance(log_gate, torch.Tensor):
        raise TypeError("log_gate must be a floating torch.Tensor of shape (total, H) or "
                        f"(total, H, D); got {type(log_gate).__name__}")
    gate = None if log_gate is None else (log_gate[..., None] if log_gate.ndim == 2
                                          else log_gate)
    if gate is not None and gate.shape[0] != total:
        raise ValueError(f"log_gate must have shape (total={total}, H) or (total, H, D); got "
                         f"{tuple(log_gate.shape)}")
    tensors = (q, k, v) if gate is None else (q, k, v, gate)

    def one(i, qb, kb, vb, gb=None):
        state = None if initial_state is None else initial_state[i:i + 1]
        g = None if gb is None else (gb[..., 0] if log_gate.ndim == 2 else gb)
        return _dense(qb, kb, vb, g, decay, scale, state, True, backend)

    parts = VN.per_sequence(one, cu_seqlens, total, max_seqlen, *tensors)
    out = torch.cat([VN.to_packed(o) for o, _ in parts], 0)
    return (out, torch.cat([s for _, s in parts], 0)) if return_state else out
