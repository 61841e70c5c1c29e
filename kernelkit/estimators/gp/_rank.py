"""The preconditioner rank of a fit with ``preconditioner_rank="auto"``, adapted to the cost it
meets at the fit's first evaluation.

:func:`kernelkit.estimators.gp._lml.resolve_rank` sizes the rank from n and the memory alone.
What a rank is worth depends on the data: CG's steps fall as the rank grows (roughly as 1 / k:
ridge-function data at n = 2e4 near the fitted theta, 54 steps at rank 1024 and 14 at 4096;
n = 1e6, 30 at 1024 and 10 at 2048), each costing one product with K, O(n^2), while the
preconditioner and its gradient cost O(n k^2) per evaluation. At n = 1e5 on a GPU a step with 16
columns took 47 ms and the ridge fit took 123 steps per evaluation at rank 1024; on the
benchmark data 5.

So after the optimiser's first evaluation (:class:`~kernelkit.estimators.gp._optimizer.
StochasticObjective`), with its CG steps s_0 at rank k_0, the fit times one product with K
(:func:`step_seconds`) and the preconditioner with its gradient at k_0 and 2 k_0
(:func:`preconditioner_seconds`), and takes the rank that minimises the modelled cost of an
evaluation (:func:`cheapest_rank`),

.. math::

    T(k) = s_0 \\tau \\, k_0 / k + a + b k^2,

when that saves at least :data:`MIN_SAVING` of T(k_0); the evaluation is then repeated with the
new rank's draws (the optimiser never sees values from two sets of draws). The timings are
rank 0's under a process group, so every process takes the same rank.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from kernelkit.estimators.gp import _lml, _sharded

__all__ = ["MIN_SAVING", "RANK_STEP", "RankAdapter", "cheapest_rank", "preconditioner_seconds",
           "rank_ceiling", "step_seconds"]

#: A new rank must cut the modelled cost of an evaluation by at least this share (the model's
#: steps-versus-rank law is rough; a change costs one evaluation more).
MIN_SAVING = 0.2
#: Ranks are multiples of this (whole tensor-core tiles).
RANK_STEP = 256


def rank_ceiling(n, device):
    """The largest rank "auto" may adapt to: what the memory holds in the preconditioner's
    Cholesky form (:func:`kernelkit.estimators.gp._lml.factor_columns`), at most n."""
    return max(1, min(n, _lml.factor_columns(n, device, _lml.PRECONDITIONER_COPIES["cholesky"])))


def cheapest_rank(steps, rank, ceiling, step_s, pre_times):
    """The rank that minimises the modelled cost of an evaluation (module docstring), or
    ``rank`` where no other saves :data:`MIN_SAVING` of its cost.

    Parameters
    ----------
    steps : int
        CG steps at ``rank``.
    rank, ceiling : int
        The current rank k_0 and the largest allowed.
    step_s : float
        Seconds of one CG step (one product with K).
    pre_times : tuple of two (int, float) pairs
        Seconds of the preconditioner with its gradient at k_0 and at a larger rank: a + b k^2
        is fitted through them (b from k_0 alone where the larger rank took no longer: timing
        noise).
    """
    if ceiling <= rank or steps <= 1:
        return rank
    (k0, t0), (k1, t1) = pre_times
    b = (t1 - t0) / (k1**2 - k0**2) if k1 > k0 else 0.0
    if b <= 0:
        b = t0 / k0**2
    a = max(0.0, t0 - b * k0**2)

    def cost(k):
        return steps * rank / k * step_s + a + b * k**2

    candidates = list(range(RANK_STEP * (rank // RANK_STEP + 1), ceiling + 1, RANK_STEP))
    best = min(candidates + [ceiling], key=cost)
    return best if cost(best) <= (1.0 - MIN_SAVING) * cost(rank) else rank


def _timed(fn, device, repeats=2):
    """The fewest seconds of ``repeats`` calls of ``fn`` (synchronised on CUDA)."""
    best = np.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - begin)
    return best


def step_seconds(op, theta, columns):
    """Seconds of one product of the covariance ``op`` at ``theta`` with ``columns`` float64
    vectors: one CG step (the first call, timed too, compiled it in the evaluation before)."""
    with torch.no_grad():
        params = op.structure.params(torch.as_tensor(theta, dtype=torch.float64,
                                                     device=op.device))
        V = torch.ones((op.n, columns), dtype=op.dtype, device=op.device)
        return _timed(lambda: op.matmul(V, params), op.device)


def preconditioner_seconds(op, theta, probes):
    """Seconds of the preconditioner on ``probes``' landmarks at ``theta`` with its part of the
    gradient, as one evaluation builds and differentiates it."""
    theta_t = torch.tensor(np.asarray(theta, dtype=np.float64), device=op.device,
                           requires_grad=True)
    W = probes.eps_full

    def build():
        params = op.structure.params(theta_t)
        pre = op.agree(_lml.preconditioner, op, params, probes)
        torch.autograd.grad(pre.terms(W), theta_t, allow_unused=True)

    return _timed(build, op.device)


class RankAdapter:
    """``adapter(theta, probes, steps)``: the draws of the rank for the rest of a fit (module
    docstring) after its first evaluation at ``theta`` took ``steps`` CG steps (the most over
    the targets) on ``probes``, or None to keep them; called once, by the optimiser's
    :class:`~kernelkit.estimators.gp._optimizer.StochasticObjective`.

    Parameters
    ----------
    op : CovarianceOperator
    n_probes : int
    seed : int
        The fit's probe seed (:func:`kernelkit.estimators.gp._lml.make_probes`).
    report : FitReport, optional
        Told of the decision (:meth:`kernelkit.estimators.gp._progress.FitReport.rank`).
    """

    def __init__(self, op, n_probes, seed, report=None):
        self.op, self.n_probes, self.seed, self.report = op, n_probes, seed, report

    def _draws(self, rank, probes):
        eigen = probes.eigen_landmarks
        return _lml.make_probes(self.op.n, rank, self.n_probes, self.seed, self.op.device,
                                eigen_rank=None if eigen is None else eigen.numel())

    def __call__(self, theta, probes, steps):
        op, rank = self.op, int(probes.landmarks.numel())
        # rank 0's: every process takes the same branch (the timings below are collective)
        steps, ceiling = (int(v) for v in _sharded.from_rank0(
            [steps, rank_ceiling(op.n, op.device)]))
        if ceiling <= rank or steps <= 1:
            return None
        step_s = step_seconds(op, theta, self.n_probes + 1)
        larger = min(2 * rank, ceiling)
        pre_times = ((rank, preconditioner_seconds(op, theta, probes)),
                     (larger, preconditioner_seconds(op, theta, self._draws(larger, probes))))
        chosen = cheapest_rank(steps, rank, ceiling, step_s, pre_times)
        chosen = int(_sharded.from_rank0([chosen])[0])  # rank 0's timings decide
        if self.report is not None:
            self.report.rank(rank, chosen, steps, step_s, pre_times)
        return None if chosen == rank else self._draws(chosen, probes)
