"""One SMO subproblem (a working set's pairwise steps) solved in one Triton program.

The batched SMO solver (:func:`kernelkit.linalg.smo.solve`) takes a working set of q <= 1024
variables per outer step and runs up to 10 q pairwise steps on it. Each step is a handful of
reductions over q values and a scalar decision; as a loop of torch operations that is some
twenty kernel launches and a dozen device-to-host reads per step, so on a GPU the launches and
waits, not the arithmetic, would set the time. Here one program holds the working set's a and G
in registers, reads the kernel rows it needs from the q x q block in global memory, and runs
every step on the device: one launch per outer step, no host read inside.

It does exactly what :func:`kernelkit_math.smo.subproblem` (the float64 reference, the
specification) does, with the same float64 operations in the same order, and breaks ties the
same way (the first index): under the interpreter the two agree bit for bit, and on a GPU too,
since the kernel is compiled without contracting a multiply and an add into one fused
multiply-add (``enable_fp_fusion=False``). A float32 K block is widened to float64 when read.
Constants the kernel compares with (``tol``, :data:`kernelkit_math.smo.TAU`) come from a
float64 tensor: Triton would round a Python float argument or literal to float32.

Layers: ``_subproblem_kernel`` (``@triton.jit``, with the scalar ``_pair_update`` and ``_at``),
``subproblem_fwd`` (launcher) and ``subproblem`` (the entry point).
"""

from __future__ import annotations

import numbers

import torch

from kernelkit_gpu import _launch, checks
from kernelkit_gpu._launch import tl, triton
from kernelkit_math.smo import TAU

__all__ = ["MAX_Q", "subproblem", "subproblem_fwd"]

#: Most variables of one working set (the block of one program).
MAX_Q = 1024


def _warps(block):
    """Warps of the program: about 128 values per warp (every step's reductions cross warps
    through shared memory, so fewer warps are cheaper while each thread holds a few values)."""
    return max(1, min(8, block // 128))


@triton.jit
def _at(v, offs, k):
    """v[k] of a vector held by the program (the one term of a sum that is not 0)."""
    return tl.sum(tl.where(offs == k, v, 0.0), axis=0)


@triton.jit
def _pair_update(ai, aj, yi, yj, ci, cj, gi, gj, kii, kjj, kij, tau):
    """libsvm's clipped step on the pair (i, j): :func:`kernelkit_math.smo.pair_update` with
    each ``if`` a select; the new (a_i, a_j)."""
    quad = kii + kjj - 2 * kij
    quad = tl.where(quad > 0, quad, tau)
    # y_i != y_j: a_i - a_j is kept
    delta = (-gi - gj) / quad
    diff = ai - aj
    pi = ai + delta
    pj = aj + delta
    lo_j = (diff > 0) & (pj < 0)
    lo_i = ~(diff > 0) & (pi < 0)
    pi = tl.where(lo_j, diff, tl.where(lo_i, 0.0, pi))
    pj = tl.where(lo_j, 0.0, tl.where(lo_i, -diff, pj))
    hi_i = (diff > ci - cj) & (pi > ci)
    hi_j = ~(diff > ci - cj) & (pj > cj)
    pi = tl.where(hi_i, ci, tl.where(hi_j, cj + diff, pi))
    pj = tl.where(hi_i, ci - diff, tl.where(hi_j, cj, pj))
    # y_i == y_j: a_i + a_j is kept
    delta = (gi - gj) / quad
    total = ai + aj
    si = ai - delta
    sj = aj + delta
    hi_i = (total > ci) & (si > ci)
    lo_j = ~(total > ci) & (sj < 0)
    si = tl.where(hi_i, ci, tl.where(lo_j, total, si))
    sj = tl.where(hi_i, total - ci, tl.where(lo_j, 0.0, sj))
    hi_j = (total > cj) & (sj > cj)
    lo_i = ~(total > cj) & (si < 0)
    si = tl.where(hi_j, total - cj, tl.where(lo_i, 0.0, si))
    sj = tl.where(hi_j, cj, tl.where(lo_i, total, sj))
    opposite = yi != yj
    return tl.where(opposite, pi, si), tl.where(opposite, pj, sj)


@triton.jit
def _subproblem_kernel(a_ptr, g_ptr, y_ptr, c_ptr, k_ptr, const_ptr, a_out, g_out, steps_out,
                       q, budget, stride_kr, stride_kc, BLOCK: tl.constexpr):
    """Up to ``budget`` pairwise steps on the working set (one program); a, G and the steps
    taken to ``a_out``, ``g_out`` and ``steps_out[0]``. ``const_ptr``: float64 (tol, TAU)."""
    offs = tl.arange(0, BLOCK)
    valid = offs < q
    a = tl.load(a_ptr + offs, mask=valid, other=0.0)
    G = tl.load(g_ptr + offs, mask=valid, other=0.0)
    y = tl.load(y_ptr + offs, mask=valid, other=0.0)
    C = tl.load(c_ptr + offs, mask=valid, other=0.0)
    offs64 = offs.to(tl.int64)  # int64 offsets into K: it may be a view of a larger matrix
    diag_step = stride_kr + stride_kc
    cols = offs64 * stride_kc
    diag = tl.load(k_ptr + offs64 * diag_step, mask=valid, other=0.0).to(tl.float64)
    tol = tl.load(const_ptr)
    tau = tl.load(const_ptr + 1)
    positive = y > 0
    steps = budget * 0
    go = budget > 0
    while go:
        u = -y * G
        below = a < C
        above = a > 0
        up = valid & ((positive & below) | (~positive & above))
        low = valid & ((positive & above) | (~positive & below))
        # with finite u: up is empty iff its max is -inf, low iff its min is inf
        ui, i = tl.max(tl.where(up, u, -float("inf")), axis=0, return_indices=True)
        low_min = tl.min(tl.where(low, u, float("inf")), axis=0)
        grad_diff = ui - u
        candidates = low & (grad_diff > 0)
        i64 = i.to(tl.int64)
        kii = tl.load(k_ptr + i64 * diag_step).to(tl.float64)
        row_i = tl.load(k_ptr + i64 * stride_kr + cols, mask=valid, other=0.0).to(tl.float64)
        quad = kii + diag - 2 * row_i
        quad = tl.where(quad > 0, quad, tau)
        # a candidate's score is finite or -inf: none is left iff the min is inf
        best, j = tl.min(tl.where(candidates, -grad_diff * grad_diff / quad, float("inf")),
                         axis=0, return_indices=True)
        stop = (ui == -float("inf")) | (low_min == float("inf")) | (ui - low_min <= tol)
        stop = stop | (best == float("inf"))
        old_i = _at(a, offs, i)
        old_j = _at(a, offs, j)
        yi = tl.load(y_ptr + i)
        yj = tl.load(y_ptr + j)
        j64 = j.to(tl.int64)
        kjj = tl.load(k_ptr + j64 * diag_step).to(tl.float64)
        kij = tl.load(k_ptr + i64 * stride_kr + j64 * stride_kc).to(tl.float64)
        ci = tl.load(c_ptr + i)
        cj = tl.load(c_ptr + j)
        new_i, new_j = _pair_update(old_i, old_j, yi, yj, ci, cj, _at(G, offs, i),
                                    _at(G, offs, j), kii, kjj, kij, tau)
        row_j = tl.load(k_ptr + j64 * stride_kr + cols, mask=valid, other=0.0).to(tl.float64)
        moved = tl.where(offs == i, new_i, tl.where(offs == j, new_j, a))
        a = tl.where(stop, a, moved)
        step = row_i * (yi * (new_i - old_i)) + row_j * (yj * (new_j - old_j))
        G = tl.where(stop, G, G + y * step)
        steps += tl.where(stop, 0, 1)
        go = ~stop & (steps < budget)
    tl.store(a_out + offs, a, mask=valid)
    tl.store(g_out + offs, G, mask=valid)
    tl.store(steps_out, steps)


def subproblem_fwd(alpha, G, y, C, K, consts, budget, a_out, g_out, steps_out, num_warps=None):
    """Launch the kernel on validated operands: ``alpha``, ``G``, ``y``, ``C``, ``a_out``,
    ``g_out`` float64 (q,) contiguous, ``K`` float32 / float64 (q, q) (any strides),
    ``consts`` float64 (tol, TAU), ``steps_out`` int32 (1,), all on one device; ``num_warps``
    default :func:`_warps`. Returns (a_out, g_out, steps_out)."""
    q = alpha.shape[0]
    block = _launch.block_size(q, lo=1)
    _subproblem_kernel[(1,)](alpha, G, y, C, K, consts, a_out, g_out, steps_out, q, budget,
                             K.stride(0), K.stride(1), BLOCK=block,
                             num_warps=num_warps or _warps(block), enable_fp_fusion=False)
    return a_out, g_out, steps_out


def subproblem(alpha, G, y, C, K, tol, budget):
    """Pairwise SMO with libsvm's WSS3 on one working set, in one Triton program.

    Equivalent to :func:`kernelkit_math.smo.subproblem` (the float64 reference): the same
    float64 operations in the same order, so the same steps and the same a and G bit for bit
    (module docstring). Inputs are not modified.

    Parameters
    ----------
    alpha : torch.Tensor of shape (q,)
        A feasible start (0 <= a <= C), float64; 1 <= q <= :data:`MAX_Q`.
    G : torch.Tensor of shape (q,)
        The gradient at ``alpha``, float64, finite.
    y : torch.Tensor of shape (q,)
        Labels +1 / -1, float64.
    C : torch.Tensor of shape (q,)
        Upper bounds, float64, > 0.
    K : torch.Tensor of shape (q, q)
        The kernel block of the working set, float32 or float64 (read in float64), finite.
    tol : float or torch.Tensor
        Stop at u_i - min over I_low of u <= tol; a one-element float64 tensor on the device of
        the others is read by the kernel without a wait on the host.
    budget : int
        Most steps, >= 0.

    Returns
    -------
    alpha : torch.Tensor of shape (q,)
        The new a, float64.
    G : torch.Tensor of shape (q,)
        Its gradient, float64.
    steps : torch.Tensor of shape (1,)
        Steps taken, int32 (on the device: reading it waits for the kernel).

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type, dtype, shape or device, or ``budget`` < 0.

    Examples
    --------
    >>> import os; os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton interpreter
    '1'
    >>> import torch
    >>> from kernelkit_gpu.smo_subproblem import subproblem
    >>> f64 = dict(dtype=torch.float64)
    >>> a, G, steps = subproblem(torch.zeros(2, **f64), -torch.ones(2, **f64),
    ...                          torch.tensor([1.0, -1.0], **f64), torch.ones(2, **f64),
    ...                          torch.eye(2, **f64), 1e-3, 10)
    >>> a.tolist(), G.tolist(), steps.tolist()
    ([1.0, 1.0], [0.0, 0.0], [1])
    """
    for name, t in (("alpha", alpha), ("G", G), ("y", y), ("C", C)):
        checks.check_tensor(t, name, "(q,)")
        checks.check_ndim(t, name, 1, "(q,)")
        checks.check_dtype(t, name, (torch.float64,))
    q = alpha.shape[0]
    for name, t in (("G", G), ("y", y), ("C", C)):
        if t.shape != (q,) or t.device != alpha.device:
            raise ValueError(f"{name} must have alpha's shape ({q},) and device {alpha.device}; "
                             f"got shape {tuple(t.shape)} on {t.device}")
    if not 1 <= q <= MAX_Q:
        raise ValueError(f"alpha must hold 1 to {MAX_Q} variables; got {q}")
    checks.check_tensor(K, "K", "(q, q)")
    checks.check_dtype(K, "K", (torch.float32, torch.float64))
    if K.shape != (q, q) or K.device != alpha.device:
        raise ValueError(f"K must have shape ({q}, {q}) and be on {alpha.device}; got shape "
                         f"{tuple(K.shape)} on {K.device}")
    if not isinstance(budget, numbers.Integral) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"budget must be an integer >= 0; got {budget!r}")
    budget = min(int(budget), 2**31 - 1)
    checks.check_triton_device(alpha, "alpha", fallback="kernelkit_math.smo.subproblem")
    if isinstance(tol, torch.Tensor):
        if tol.numel() != 1 or tol.dtype != torch.float64 or tol.device != alpha.device:
            raise ValueError(f"tol must be a float or a one-element float64 tensor on "
                             f"{alpha.device}; got {tol.dtype} of shape {tuple(tol.shape)} on "
                             f"{tol.device}")
        tol = tol.reshape(1)
    elif not isinstance(tol, numbers.Real) or isinstance(tol, bool):
        raise TypeError(f"tol must be a float or a one-element float64 tensor; got "
                        f"{type(tol).__name__}")
    # filled on the device (a float64 fill, exact), not copied from the host: no wait
    consts = torch.full((2,), TAU, dtype=torch.float64, device=alpha.device)
    consts[:1] = tol
    device = alpha.device
    a_out = _launch.alloc((q,), torch.float64, device)
    g_out = _launch.alloc((q,), torch.float64, device)
    steps = _launch.alloc((1,), torch.int32, device)
    return subproblem_fwd(alpha.contiguous(), G.contiguous(), y.contiguous(), C.contiguous(), K,
                          consts, budget, a_out, g_out, steps)


if not _launch.HAS_TRITON:  # pragma: no cover - exercised by the no-triton CI step
    subproblem = _launch.needs_triton("smo_subproblem.subproblem")  # noqa: F811
