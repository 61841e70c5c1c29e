"""Non-finite values around the Triton attention kernels, in torch ops with no host sync: the
rule "masked keys are absent" (:mod:`kernelkit_math.attention`) without any in-kernel branch.

The kernels leave a masked key out of the scores (``where``, so a non-finite k_j or q_i is
harmless there) but multiply its value by a zero weight inside a partially masked tile: 0 * inf
= NaN would reach a row that does not see key j. So the forward kernels run on
``v_clean = where(isfinite(v), v, 0)`` and :func:`add_nonfinite_values` then adds what the
non-finite values of v contribute, exactly: a visible key's weight w_ij is > 0 (softmax
probabilities; phi(q_i)·phi(k_j) with elu+1), so w_ij v_jc is +inf / -inf / NaN for v_jc = +inf /
-inf / NaN, and a sum holding one of them is NaN if it holds a NaN or both infinities, else that
infinity; finite terms do not change it. Row i sees keys j <= lim_i (:func:`visible_limit`), so
it sees a non-finite v_jc iff the first key holding it is <= lim_i: three (B, H_kv, Dv) first
indices decide every row. (Two cases where the float64 reference differs, both with a weight
that is 0 in floating point: a weight > 0 that underflows in its exp, and a score made -inf by a
non-finite k_j; the reference gives 0 * inf = NaN there, this path the infinity.)

The backward kernels run on the same cleaned operands (q, k, o and dO too: a masked pair's zero
weight times a non-finite q_i or k_j would leak the same way), and :func:`poison_gradients` then
writes NaN exactly on the gradients that a non-finite value can reach through visible pairs:

* a row i is *spoiled* if it sees at least one key and q_i, dO_i (or dlse_i) holds a non-finite
  value or it sees a key j whose k_j or v_j does;
* dq_i (the whole row) is NaN for every spoiled row; dk_j and dv_j (whole rows) are NaN for every
  key j that a spoiled row sees;
* linear attention: a non-finite initial state spoils every row (each reads it); a non-finite
  gradient of the final state reaches every key; dS_0 and dz_0 are NaN where any row is spoiled;
* every other gradient entry is the gradient of the finite computation, exactly as without the
  non-finite values (a key no row sees gets 0 whatever it holds; rows that see no key get 0).

A row-by-row IEEE computation over the visible keys (the torch twins) is non-finite only inside
that set, and may be finite or infinite at some entries of it where this path gives NaN.
"""

from __future__ import annotations

import math

import torch

__all__ = ["visible_limit", "clean", "first_nonfinite_rows", "add_nonfinite_values",
           "nonfinite_state", "spoiled_rows", "poison_gradients"]


def visible_limit(T, S, shift, device):
    """lim (T,) int64: row i sees keys 0..lim_i (min(i + shift, S - 1), or S - 1 with
    ``shift`` None); -1 for a row that sees no key."""
    rows = torch.arange(T, device=device)
    if shift is None:
        return torch.full((T,), S - 1, dtype=torch.int64, device=device)
    return torch.clamp(rows + shift, min=-1, max=S - 1)


def clean(x):
    """x with its non-finite entries replaced by 0 (a new tensor, one pass)."""
    return torch.where(torch.isfinite(x), x, 0.0)


def _first(mask, n):
    """The first index along dim -2 where ``mask`` holds, else n: (..., n, C) -> (..., C)."""
    if n == 0:  # (amin refuses an empty dim)
        return torch.zeros(mask.shape[:-2] + mask.shape[-1:], dtype=torch.int64,
                           device=mask.device)
    idx = torch.arange(n, device=mask.device)[:, None]
    return torch.where(mask, idx, n).amin(dim=-2)


def first_nonfinite_rows(x):
    """(..., S, C) -> (...,) int64: the first row of x holding a non-finite value, else S."""
    S = x.shape[-2]
    return _first(~torch.isfinite(x).all(dim=-1, keepdim=True), S)[..., 0]


def _first_codes(v):
    """For each column c of v (..., S, C): the first key holding NaN, +inf, -inf (S if none),
    as (first_nan_or_both, first_pos, first_neg): a row that sees key f_nan = min(first NaN,
    max(first +inf, first -inf)) gets NaN, else one that sees first +inf (-inf) gets +inf (-inf)."""
    S = v.shape[-2]
    f_nan, f_pos, f_neg = (_first(m, S) for m in (torch.isnan(v), v == math.inf, v == -math.inf))
    return torch.minimum(f_nan, torch.maximum(f_pos, f_neg)), f_pos, f_neg


def _infinities(lim, f_nan, f_pos, f_neg, dtype):
    """(..., T, C) tensor: NaN where lim_i >= f_nan, else +inf / -inf where lim_i >= f_pos /
    f_neg, else 0; lim (T,), the f (..., C)."""
    lim = lim[:, None]
    f_nan, f_pos, f_neg = (f[..., None, :] for f in (f_nan, f_pos, f_neg))
    zero = torch.zeros((), dtype=dtype, device=lim.device)
    corr = torch.where(lim >= f_neg, -math.inf, zero)
    corr = torch.where(lim >= f_pos, math.inf, corr)
    return torch.where(lim >= f_nan, math.nan, corr)


def add_nonfinite_values(out, v, lim, group=1):
    """out + the exact contribution of v's non-finite values, for weights > 0 on visible pairs.

    ``out`` (B, H, T, Dv) was computed from ``clean(v)``; v (B, H_kv, S, Dv) with H = group *
    H_kv (query head h reads value head h // group); ``lim`` from :func:`visible_limit`. Row i,
    feature c becomes NaN if it sees a NaN v_jc or both +inf and -inf, else +inf / -inf if it
    sees that, else stays (out + 0; a NaN of out stays NaN). Memory traffic: three comparisons
    and three where/min reductions over v, and about six elementwise passes over a (B, H, T, Dv)
    tensor (the comparisons, the correction and the sum), no host sync.
    """
    if v.shape[-2] == 0:
        return out
    f_nan, f_pos, f_neg = (f.repeat_interleave(group, dim=1) for f in _first_codes(v))
    return out + _infinities(lim, f_nan, f_pos, f_neg, out.dtype)


def nonfinite_state(state, v):
    """The final state sum_j K_j v_j^T (..., M, Dv) of ``clean(v)`` plus the contribution of the
    non-finite values of v (..., S, Dv), for feature weights K_jm > 0: every m gets column c's
    infinity (NaN if a NaN or both infinities occur in it), as :func:`add_nonfinite_values` for
    a row that sees every key."""
    if v.shape[-2] == 0:
        return state
    lim = torch.full((state.shape[-2],), v.shape[-2] - 1, dtype=torch.int64, device=v.device)
    return state + _infinities(lim, *_first_codes(v), state.dtype)


def poison_gradients(dq, dk, dv, spoiled, lim, group=1, all_keys=None):
    """Write NaN on the gradients a non-finite value reaches (the rule of this module's
    docstring). ``spoiled`` (B, H, T) bool, already restricted to rows that see a key; dq (B, H,
    T, D) with T >= 1; dk, dv (B, H_kv, S, *) or None; ``all_keys`` (B, H_kv) bool or None: heads
    whose every key is reached (linear attention's final state with a non-finite gradient).
    Returns new tensors; no host sync."""
    B, H, T = spoiled.shape
    nan = torch.full((), math.nan, dtype=dq.dtype, device=dq.device)
    dq = torch.where(spoiled[..., None], nan, dq)
    last = torch.where(spoiled, torch.arange(T, device=spoiled.device), -1).amax(dim=-1)
    last = last.reshape(B, H // group, group).amax(dim=-1)  # (B, H_kv): last spoiled row
    # the keys 0..L are seen by a spoiled row: L = lim of the last one (lim is nondecreasing)
    L = torch.where(last >= 0, torch.cat([lim, lim.new_full((1,), -1)])[last], -1)
    if all_keys is not None:
        L = torch.where(all_keys, dk.shape[-2] - 1, L)
    out = [dq]
    for d in (dk, dv):
        if d is not None:
            keys = torch.arange(d.shape[-2], device=d.device)
            d = torch.where((keys <= L[..., None])[..., None], nan.to(d.dtype), d)
        out.append(d)
    return tuple(out)


def spoiled_rows(lim, group, *row_tensors, keys_first):
    """(B, H, T) bool: rows that see a key and whose (B, H, T, *) ``row_tensors`` (None skipped)
    hold a non-finite value, or that see key ``keys_first`` (B, H_kv) (the first key whose k or v
    holds one)."""
    seen = keys_first.repeat_interleave(group, dim=1)[..., None] <= lim
    for x in row_tensors:
        if x is not None:
            seen = seen | ~torch.isfinite(x).all(dim=-1)
    return seen & (lim >= 0)
