"""Products over the visible (query, key) pairs of a causal mask, in plain PyTorch, with their
gradients: the torch side of the rule "masked keys are absent" (:mod:`kernelkit_math.attention`).

``a @ b`` with a_ij = 0 on the masked pairs adds 0 * inf = NaN to row i for a non-finite b_jc that
row i does not see; :func:`visible_mm` leaves those pairs out. :class:`VisibleMatmul` (weights @
values) and :class:`VisibleScores` (queries @ keys^T) carry the rule into torch.autograd. Used by
the attention twins :mod:`kernelkit_gpu.attention.naive` and
:mod:`kernelkit_gpu.attention.linear_naive`.
"""

from __future__ import annotations

import torch

__all__ = ["visible_mm", "VisibleMatmul", "VisibleScores"]


def visible_mm(a, b, visible):
    """sum_j a_ij b_jc over the pairs with ``visible[i, j]`` only: (..., T, S) @ (..., S, C).

    A masked pair contributes nothing whatever a_ij and b_jc hold (``a @ b`` with a_ij = 0 would
    add 0 * inf = NaN for a non-finite b_jc that row i does not see). ``visible`` is a bool
    (T, S) mask. When b holds a non-finite value the product runs on a and b with their
    non-finite entries zeroed, and the visible pairs with a non-finite factor are added key by
    key (only the keys that have one) in IEEE arithmetic.
    """
    a = a.masked_fill(~visible, 0.0)
    finite_b = torch.isfinite(b)
    if bool(finite_b.all()):  # every masked term is 0 * finite = 0
        return a @ b
    finite_a = torch.isfinite(a)
    out = torch.where(finite_a, a, 0.0) @ torch.where(finite_b, b, 0.0)
    bad = (~finite_a & visible).any(-2) | (~finite_b).any(-1)  # (..., S): keys with one
    for j in bad.reshape(-1, bad.shape[-1]).any(0).nonzero()[:, 0].tolist():
        a_j, b_j = a[..., :, j, None], b[..., None, j, :]
        pair = visible[:, j, None] & (~finite_a[..., :, j, None] | ~finite_b[..., None, j, :])
        out = out + torch.where(pair, a_j * b_j, 0.0)
    return out


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
