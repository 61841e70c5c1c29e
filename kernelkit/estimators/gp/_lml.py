r"""Log marginal likelihood and its gradient without a dense factorisation (BBMM style).

.. math::

    \log p(y \mid \theta) = -\tfrac12 y^\top K^{-1} y - \tfrac12 \log\det K - \tfrac n2 \log 2\pi

One call of :func:`~kernelkit.linalg.cg.conjugate_gradient` (recording the Lanczos
coefficients) solves K [alpha, u_1..u_t] = [y, z_1..z_t] with the low-rank preconditioner P
(:class:`~kernelkit.linalg.precond.LowRankPreconditioner` on k landmark points drawn once per
fit, :func:`make_probes`), for t probes z_j ~ N(0, P). CG vectors and scalars are float64
whatever the operator's dtype; the residual that stops it is the true one, from float64
products (:meth:`~kernelkit.operators.covariance.CovarianceOperator.exact_matmul`).

- Quadratic term: y^T alpha + alpha^T r (r = y - K alpha, the true residual at exit): its error,
  r^T K^{-1} r, is of second order in the CG tolerance.
- log det K = log det P (exact) + log det(P^{-1/2} K P^{-1/2}); the second term by stochastic
  Lanczos quadrature, (1/t) sum_j (z_j^T P^{-1} z_j) e_1^T log(T_j) e_1, with T_j from the CG
  coefficients of column z_j (:mod:`kernelkit.linalg.slq`). Stochastic: its standard
  deviation is about sqrt(2 / t) ||log(P^{-1/2} K P^{-1/2})||_F, zero when P = K.
- Gradient: with w_j = P^{-1} z_j,

  .. math::

      \frac{\partial}{\partial\theta_i} \log p = \tfrac12 \alpha^\top K_i \alpha
      - \tfrac12 \frac{\partial \log\det P}{\partial\theta_i}
      - \tfrac1{2t} \sum_j \left(u_j^\top K_i w_j - w_j^\top P_i w_j\right),

  (K_i = dK/dtheta_i). The last sum is Hutchinson's estimate of tr(K^{-1} K_i) - tr(P^{-1} P_i)
  (unbiased, since E[w_j z_j^T] = I), so the preconditioner's exact log-determinant gradient is a
  control variate: the estimator is exact when P = K. All the K_i terms come from one backward
  pass of :func:`~kernelkit.operators.covariance.bilinear`, chunk by chunk (on CUDA, for
  [ConstantKernel *] rbf / laplacian / matern / rational quadratic [+ WhiteKernel], from one
  fused Triton pass instead: :mod:`kernelkit.operators.fused`); the P_i terms from
  :meth:`~kernelkit.linalg.precond.LowRankPreconditioner.terms` (in closed form in the
  Cholesky form of P, :func:`~kernelkit.linalg.precond.nystrom_preconditioner`; else by
  autograd through the factor).

The probes are fixed by the caller (the same e_1, e_2 at every theta: common random numbers), so
the estimate is a deterministic, almost smooth function of theta that L-BFGS can optimise.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from kernelkit.estimators.gp import _sharded
from kernelkit.operators import fused
from kernelkit.linalg.cg import conjugate_gradient
from kernelkit.linalg.precond import WOODBURY_MAX_RATIO, nystrom_preconditioner
from kernelkit.linalg.slq import lanczos_quadrature

__all__ = ["AUTO_RANK", "Draws", "SolverSettings", "estimate_residual", "log_marginal_likelihood",
           "fit_ranks", "make_probes", "preconditioner", "resolve_rank", "solve",
           "solve_targets", "uniform_landmarks"]

#: ``preconditioner_rank="auto"``: min(n, max(AUTO_RANK, AUTO_RANK_PER_ROOT_N sqrt(n)),
#: AUTO_FACTOR_ELEMENTS // n) landmarks. The rank sets the CG iterations: on the benchmark's GP
#: (n = 1e4, d = 8, ARD RBF + noise, float32 products, cg_tol 1e-3; docs/decisions.md) 100
#: landmarks took 94 / 62 iterations at the initial / fitted hyperparameters, 300 took 44 / 17
#: and 1000 took 15 / 4; the factor's QR costs O(n k^2) and its k x k eigenproblem O(k^3) once
#: per evaluation.
AUTO_RANK = 1024
#: Past n = (AUTO_RANK / AUTO_RANK_PER_ROOT_N)^2 = 262 144 the rank grows like sqrt(n), so the
#: preconditioner's O(n k^2) build keeps a fixed share of one O(n^2) product. At n = 1e6 near the
#: fitted hyperparameters (GPU, float32 products, cg_tol 1e-3) one evaluation took 30 CG steps
#: (136 s) at rank 1024 and 10 (70 s) at rank 2048.
AUTO_RANK_PER_ROOT_N = 2
#: Elements of one n x k float64 factor (the preconditioner holds a few) under "auto" on the
#: CPU: 2 GiB.
AUTO_FACTOR_ELEMENTS = 2**28
#: On a GPU the last bound is instead what AUTO_GPU_SHARE of the free memory holds at
#: PRECONDITIONER_COPIES[form] n x k float64 matrices: the peak of one evaluation with its
#: gradient, all of its memory, in the preconditioner's Cholesky form (4.1 measured at n = 1e6,
#: k = 1024 and 2048 on a GPU: 33.5 and 67 GB) and in its eigen form, which
#: takes autograd through the factor (7.1 at k = 1334: 75.8 GB; k = 1975 ran out of memory on an
#: 80 GB GPU). The rank is sized for the Cholesky form; an evaluation that may fall into the
#: eigen form (:func:`preconditioner`) uses ``Draws.eigen_landmarks``, a subset sized for it.
PRECONDITIONER_COPIES = {"cholesky": 4.5, "eigen": 7.0}
AUTO_GPU_SHARE = 0.9


@dataclass(frozen=True)
class SolverSettings:
    """Settings of one evaluation: probes, CG tolerance and iterations, preconditioner rank
    (an int, or "auto": :func:`resolve_rank`)."""

    n_probes: int
    cg_tol: float
    max_cg_iter: int
    preconditioner_rank: int | str


def resolve_rank(rank, n, device=None, form="cholesky"):
    """The preconditioner rank for n points: ``rank`` capped at n, or for "auto"
    min(n, max(:data:`AUTO_RANK`, :data:`AUTO_RANK_PER_ROOT_N` sqrt(n)), a memory bound): on the
    CPU :data:`AUTO_FACTOR_ELEMENTS` // n, on a CUDA ``device`` what :data:`AUTO_GPU_SHARE` of
    its free memory holds in the preconditioner's ``form`` (:data:`PRECONDITIONER_COPIES`), after
    PyTorch's cache is emptied."""
    if rank != "auto":
        return min(int(rank), n)
    wanted = max(AUTO_RANK, int(AUTO_RANK_PER_ROOT_N * math.sqrt(n)))
    return max(1, min(n, wanted, factor_columns(n, device, PRECONDITIONER_COPIES[form])))


def fit_ranks(rank, n, device):
    """The landmark counts of a fit's draws, ``(rank, eigen_rank)``: :func:`resolve_rank` for
    the preconditioner's Cholesky form, which the rank is sized for, and for its eigen form,
    which needs more memory (:class:`Draws`); rank 0's under a process group, so that every
    process draws the same landmarks."""
    ranks = [resolve_rank(rank, n, device), resolve_rank(rank, n, device, "eigen")]
    return tuple(int(v) for v in _sharded.from_rank0(ranks))


def factor_columns(n, device, copies):
    """How many columns k of n x k float64 matrices the "auto" sizes may take when ``copies``
    of them are held at once: :data:`AUTO_FACTOR_ELEMENTS` // n, or on a CUDA ``device`` at
    least what :data:`AUTO_GPU_SHARE` of its free memory holds, after PyTorch's cache is
    emptied."""
    cap = AUTO_FACTOR_ELEMENTS // n
    if device is not None and torch.device(device).type == "cuda":
        # PyTorch's cached blocks go back to the driver first: counted as free while cached,
        # they can be too fragmented to hold the factors (a pretraining fit's cache at n = 1e6)
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(torch.device(device))[0]
        cap = max(cap, int(AUTO_GPU_SHARE * free / (8 * copies * n)))
    return cap


class Draws(NamedTuple):
    """The random draws of one fit, fixed for every theta (common random numbers, so the
    estimate is a smooth function of theta).

    Attributes
    ----------
    landmarks : torch.Tensor of shape (k,), int64
        The preconditioner's Nyström points: k distinct training indices, uniformly at random.
    eps_low : torch.Tensor of shape (k, t), float64
        Standard normal; the low-rank part of the probes.
    eps_full : torch.Tensor of shape (n, t), float64
        Standard normal; the full-rank part of the probes.
    eigen_landmarks : torch.Tensor of shape (k_e,), int64, or None
        Fewer landmarks (a subset of ``landmarks``: :func:`uniform_landmarks` of the same seed)
        for an evaluation whose preconditioner may take the eigen form, which needs more memory
        (:func:`preconditioner`). None: always ``landmarks``.
    """

    landmarks: torch.Tensor
    eps_low: torch.Tensor
    eps_full: torch.Tensor
    eigen_landmarks: torch.Tensor | None = None


def uniform_landmarks(n, k, seed, device):
    """k distinct training indices, uniformly at random, sorted: the first k of one permutation
    of range(n), so a larger k from the same seed extends a smaller one's set."""
    return torch.tensor(_landmark_indices(n, k, seed), device=device)  # a copy: writable


@functools.lru_cache(maxsize=8)
def _landmark_indices(n, k, seed):
    """:func:`uniform_landmarks` as a read-only NumPy array, kept for the last few fits (each
    evaluation of a fit asks again: the permutation took ~0.3 ms at n = 2e4)."""
    landmarks = np.sort(np.random.default_rng(seed).permutation(n)[:k])
    landmarks.flags.writeable = False
    return landmarks


def make_probes(n, rank, n_probes, seed, device, eigen_rank=None):
    """The fixed draws of a fit (:class:`Draws`) for ``rank`` landmarks and ``n_probes`` probes:
    the landmarks are :func:`uniform_landmarks` of ``seed``, the normals come from torch's
    generator on ``device`` seeded with it (the same draws on every device of a type; on the
    GPU in microseconds, where NumPy's took 4.8 ms at n = 2e4 with 16 probes). ``eigen_rank``:
    see :class:`Draws` (kept only where it is below ``rank``)."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    eps_low = torch.randn((rank, n_probes), generator=gen, device=device, dtype=torch.float64)
    eps_full = torch.randn((n, n_probes), generator=gen, device=device, dtype=torch.float64)
    eigen = (uniform_landmarks(n, eigen_rank, seed, device)
             if eigen_rank is not None and eigen_rank < rank else None)
    return Draws(uniform_landmarks(n, rank, seed, device), eps_low, eps_full, eigen)


def preconditioner(op, params, probes):
    """P = (Nyström approximation of the kernel part k(X, X) on the landmark rows) +
    (noise + jitter) I, differentiable with respect to ``params`` (float64).

    The landmarks are ``probes.landmarks``, or ``probes.eigen_landmarks`` where those are set
    and P may take the eigen form, which needs more memory (:data:`PRECONDITIONER_COPIES`):
    where the trace of the kernel part exceeds half of
    :data:`kernelkit.linalg.precond.WOODBURY_MAX_RATIO` times the shift (the form follows
    ||B||_F^2, which is at most that trace plus k times the Nyström shift nu = eps ||Y||_F, far
    below it: the factor 2 is the margin).

    Landmarks drawn uniformly replace the greedy pivoted Cholesky used before them: as
    many CG iterations on the benchmark's GP (39 against 44 at rank 300, 14 against 15 at
    rank 1000), no sequential pivot loop (which cost 78 ms at rank 100 on a GPU), and P
    changes smoothly with theta.
    """
    landmarks = probes.landmarks
    shift = (params["noise"] + op.jitter).to(torch.float64)
    if probes.eigen_landmarks is not None:
        with torch.no_grad():
            trace = op.diag(op.data[0], params).sum()
            if float(trace) > 0.5 * WOODBURY_MAX_RATIO * float(shift):
                landmarks = probes.eigen_landmarks
    # P need only be one consistent SPD matrix: distances in the matrix-product form (float64,
    # absolute rounding eps |x|^2 of centred data), one GEMM instead of two passes per feature
    # (n = 2e4, k = 1024, d = 8 on a GPU: the block's forward and backward took 3.7 ms); for
    # [C *] rbf kernel parts their gradient in closed form
    Y = fused.landmark_columns(op, params, landmarks)
    return nystrom_preconditioner(Y, landmarks, shift)


def solve(op, params, rhs, pre, settings, what, lanczos=False, warn=True):
    """K_theta^{-1} rhs by :func:`~kernelkit.linalg.cg.conjugate_gradient` (float64 vectors;
    products in the operator's dtype, the exit residual from float64 products); with ``warn``,
    :func:`warn_unconverged` when the true residual is above ``cg_tol``."""
    def matvec(V):
        return op.matmul(V.to(op.dtype), params).to(torch.float64)

    exact = None if op.dtype == torch.float64 else (lambda V: op.exact_matmul(V, params))
    result = conjugate_gradient(matvec, rhs.to(torch.float64), precond=pre.solve,
                                tol=settings.cg_tol, max_iter=settings.max_cg_iter,
                                exact_matvec=exact, lanczos=lanczos)
    if warn and not result.converged:
        warn_unconverged(what, result, settings, stacklevel=4)
    return result


def estimate_residual(result):
    """The true relative residual an LML estimate rests on: the larger of the solve's at exit
    and that of the run whose Lanczos coefficients give the log determinant (with inexact
    products the solve may go on with exact ones after that run stalled:
    :attr:`~kernelkit.linalg.cg.CGResult.exact_from`)."""
    first = result.lanczos.true_residual if result.lanczos is not None else 0.0
    return max(float(result.residuals[-1]), first)


def warn_unconverged(what, result, settings, stacklevel):
    """The ConvergenceWarning of a solve (``result``, a CGResult) that stopped above cg_tol."""
    if result.converged:  # the log determinant's Lanczos run (estimate_residual)
        stopped = (f"its log determinant comes from a CG run that ended at true relative "
                   f"residual {result.lanczos.true_residual:.2e} > sqrt(cg_tol)="
                   f"{math.sqrt(settings.cg_tol):.2g} with float32 products")
    else:
        stopped = (f"conjugate gradients stopped after {result.n_iter} iterations "
                   f"(max_cg_iter={settings.max_cg_iter}) with true relative residual "
                   f"{result.residuals[-1]:.2e} > cg_tol={settings.cg_tol:g}")
    warnings.warn(
        f"{what}: {stopped}; the result is approximate. Raise max_cg_iter or "
        f"preconditioner_rank, or add noise (WhiteKernel or alpha).", ConvergenceWarning,
        stacklevel=stacklevel + 1,
    )


def log_marginal_likelihood(op, theta, y, probes, settings, eval_gradient=False, info=None,
                            warn=True):
    """Estimate log p(y | theta) (and its gradient) for the covariance ``op``.

    Parameters
    ----------
    op : CovarianceOperator
    theta : ndarray of shape (n_theta,)
        Log-hyperparameters laid out as ``kernel.theta``.
    y : torch.Tensor of shape (n,), float64
    probes : Draws
        From :func:`make_probes`.
    settings : SolverSettings
    eval_gradient : bool
    info : dict, optional
        Receives ``"spread"``: the standard error of the estimate, 0.5 sd(per-probe log-det
        terms) / sqrt(t) (0 without probes; the quadratic term is exact to ``cg_tol``), and
        ``"cg"``: the solve's CGResult (``converged`` says whether the estimate can be trusted),
        and the estimate's parts ``"quadratic"`` (y^T K^-1 y), ``"logdet_pre"`` (log det P) and
        ``"slq"`` (the stochastic estimate of log det P^-1/2 K P^-1/2, the mean of the per-probe
        terms ``"slq_terms"``, an ndarray of shape (t,)).
    warn : bool, default True
        Warn (ConvergenceWarning) when the solve stops above ``cg_tol``.

    Returns
    -------
    lml : float
    grad : ndarray of shape (n_theta,)
        Only when ``eval_gradient``.
    alpha : torch.Tensor of shape (n,)
        K^{-1} y, in the operator's dtype.
    """
    theta_t = torch.tensor(np.asarray(theta, dtype=np.float64), device=op.device,
                           requires_grad=eval_gradient)
    with torch.no_grad():
        params_ng = op.structure.params(theta_t.detach())
        if op.dense:  # the held K (and its float64 twin) first: GPU work queued ahead of the
            op.kernel_matrix(params_ng)  # preconditioner's many small, host-bound steps
            if op.dense_exact:
                op.kernel_matrix(params_ng, torch.float64)
    with torch.set_grad_enabled(eval_gradient):
        params = op.structure.params(theta_t)
        pre = op.agree(preconditioner, op, params, probes)
    z = pre.sample(probes.eps_low, probes.eps_full)
    t = z.shape[1]
    rhs = torch.cat([y[:, None].to(torch.float64), z], dim=1)
    result = solve(op, params_ng, rhs, pre, settings, "log_marginal_likelihood", lanczos=True,
                   warn=warn)
    if warn and result.converged and estimate_residual(result) > math.sqrt(settings.cg_tol):
        warn_unconverged("log_marginal_likelihood", result, settings, stacklevel=2)
    alpha64, u = result.x[:, 0], result.x[:, 1:]
    w = pre.solve(z)  # float64
    # the host's quadrature of the Lanczos coefficients runs while the GPU contracts (queued
    # first), then the backward is queued, then one copy of every number to the host
    surrogate = grad = None
    if eval_gradient:
        A = torch.cat([alpha64[:, None], -u / max(t, 1)], dim=1)
        B = torch.cat([alpha64[:, None], w], dim=1)
        # the K_i terms: fused Triton contractions for the common trees on CUDA, else autograd,
        # queued first: the preconditioner's terms -1/2 log det P + 1/(2t) sum_j w_j^T P w_j
        # are k x k steps that would leave the GPU idle (n = 2e4: 1.5 ms) before them
        contraction = fused.bilinear(op, theta_t, A, B)
        surrogate = pre.terms(w) + 0.5 * contraction
    quadrature = lanczos_quadrature(result.lanczos, range(1, t + 1)) if t else None
    if eval_gradient:
        (grad,) = torch.autograd.grad(surrogate, theta_t, allow_unused=True)
        if grad is None:
            grad = torch.zeros_like(theta_t)
    # y^T K^-1 y = y^T alpha + alpha^T r + r^T K^-1 r (r = y - K alpha, the true residual at
    # exit): the first two terms leave an error of second order in r. y^T alpha alone, first
    # order, moved by up to 66 nats between solves to the same tol 1e-3 at nearly the same
    # theta (n = 1e6, float32 products with and without the exact products' hand-on)
    quad = y.to(torch.float64) @ alpha64 + alpha64 @ result.residual[:, 0]
    numbers = [quad.reshape(1), pre.logdet.detach().reshape(1),
               (z * w).sum(0)] + ([grad.detach()] if eval_gradient else [])
    numbers = torch.cat(numbers).cpu().numpy()
    quadratic, logdet_pre, weights = numbers[0], numbers[1], numbers[2:2 + t]

    slq, spread, terms = 0.0, 0.0, np.zeros(0)
    if t:
        terms = weights * quadrature
        slq = float(np.mean(terms))
        spread = 0.5 * float(np.std(terms, ddof=1)) / math.sqrt(t) if t > 1 else 0.0
    if info is not None:
        info.update(spread=spread, cg=result, quadratic=float(quadratic), slq_terms=terms,
                    logdet_pre=float(logdet_pre), slq=slq)
    logdet = float(logdet_pre) + slq
    n = y.shape[0]
    lml = -0.5 * float(quadratic) - 0.5 * logdet - 0.5 * n * math.log(2.0 * math.pi)
    alpha = alpha64.to(op.dtype)
    if not eval_gradient:
        return lml, alpha
    return lml, numbers[2 + t:], alpha


def solve_targets(op, theta, Y, probes, settings):
    """The fit at ``theta``: ``(lml, A)``, the estimate of log p(Y) summed over the t columns of
    Y (shape (n, t); one :func:`log_marginal_likelihood` per column, the same probes) and
    A = K^{-1} Y, shape (n, t), in the operator's dtype."""
    lml, columns = 0.0, []
    for k in range(Y.shape[1]):
        value, column = log_marginal_likelihood(op, theta, Y[:, k], probes, settings)
        lml += value
        columns.append(column)
    return lml, torch.stack(columns, dim=1)
