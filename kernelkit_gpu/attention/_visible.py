"""Products over the visible (query, key) pairs of a causal mask, in plain PyTorch, with their
gradients: the torch side of the rule "masked keys are absent" (:mod:`kernelkit_math.attention`).

``a @ b`` with a_ij = 0 on the masked pairs adds 0 * inf = NaN to row i for a non-finite b_jc that
row i does not see; :func:`visible_mm` leaves those pairs out. :class:`VisibleMatmul` (weights @
values) and :class:`VisibleScores` (queries @ keys^T) carry the rule into torch.autograd. Used by
the attention twins :mod:`kernelkit_gpu.attention.naive` and
:mod:`kernelkit_gpu.attention.linear_naive`.
"""

from __future__ import annotations

import math

import torch

__all__ = ["visible_mm", "VisibleMatmul", "VisibleScores"]


def _nonfinite_terms(a, b, visible):
    """sum over the visible j of a_ij b_jc, restricted to the non-finite b_jc: 0, +inf, -inf or
    NaN per (i, c), as IEEE adds the products (inf * 0 and inf - inf are NaN). The counts are
    the four indicator products of the Triton kernels
    (:func:`kernelkit_gpu.attention._tiles._nonfinite_terms`)."""
    f = torch.float64 if a.dtype == torch.float64 else torch.float32
    vis = visible.expand(a.shape)
    sgn = (vis & (a > 0)).to(f) - (vis & (a < 0)).to(f)
    mag = sgn.abs()
    b_inf = b.isinf().to(f)
    b_sgn = (b == math.inf).to(f) - (b == -math.inf).to(f)
    n_nan = vis.to(f) @ b.isnan().to(f) + (vis.to(f) - mag) @ b_inf  # vis - mag: a_ij 0 or NaN
    d, t = sgn @ b_sgn, mag @ b_inf  # n_pos - n_neg, n_pos + n_neg
    terms = torch.where(t + d > 0, math.inf, 0.0) + torch.where(t - d > 0, -math.inf, 0.0)
    return torch.where(n_nan > 0, math.nan, terms).to(a.dtype)


def visible_mm(a, b, visible):
    """sum_j a_ij b_jc over the pairs with ``visible[i, j]`` only: (..., T, S) @ (..., S, C).

    A masked pair contributes nothing whatever a_ij and b_jc hold (``a @ b`` with a_ij = 0 would
    add 0 * inf = NaN for a non-finite b_jc that row i does not see). ``visible`` is a bool
    (T, S) mask. The exact branch (non-finite b) costs a few products of 0/1 indicators.
    """
    a = a.masked_fill(~visible, 0.0)
    finite = torch.isfinite(b)
    if bool(finite.all()):  # every masked term is 0 * finite = 0
        return a @ b
    return a @ torch.where(finite, b, 0.0) + _nonfinite_terms(a, b, visible)


class VisibleMatmul(torch.autograd.Function):
    """``visible_mm(a, b, visible)`` with the matching gradients: da = (g b^T) on the visible
    pairs, 0 elsewhere; db = sum over the visible i of a_ij g_i (a NaN g_i of a row that does
    not see key j stays out of db_j)."""

    @staticmethod
    def forward(ctx, a, b, visible):
        ctx.save_for_backward(a, b, visible)
        return visible_mm(a, b, visible)

    @staticmethod
    def backward(ctx, g):
        a, b, visible = ctx.saved_tensors
        da = (g @ b.transpose(-1, -2)).masked_fill(~visible, 0.0)
        db = visible_mm(a.transpose(-1, -2), g, visible.transpose(-1, -2))
        return da, db, None


class VisibleScores(torch.autograd.Function):
    """Scores ``x @ y^T`` (..., T, S) of which only the ``visible`` pairs are used downstream:
    the gradients sum over those pairs only, dx = sum_{j visible} g_ij y_j and dy likewise, so a
    NaN y_j (or x_i) reaches only the rows (keys) that see it."""

    @staticmethod
    def forward(ctx, x, y, visible):
        ctx.save_for_backward(x, y, visible)
        return x @ y.transpose(-1, -2)

    @staticmethod
    def backward(ctx, g):
        x, y, visible = ctx.saved_tensors
        return (visible_mm(g, y, visible),
                visible_mm(g.transpose(-1, -2), x, visible.transpose(-1, -2)), None)
