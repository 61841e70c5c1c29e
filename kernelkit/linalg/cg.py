"""Preconditioned conjugate gradients for several right-hand sides at once, with the true residual
at exit and iterative refinement.

Each column of B is its own CG run (its own step lengths), but the runs share every product
with A, which is where the time goes for kernel matrices: one ``matvec(P)`` of shape (n, k)
costs about as much as one of shape (n, 1).

Precision contract: the products may be inexact (float32 kernel values on the GPU); every CG
scalar and vector is float64, and the residual that decides convergence and is reported is the
true one, ``B - A X`` recomputed with ``exact_matvec`` (float64 products). When it is above
``tol`` although the recurrence says otherwise (the float32 products' floor), CG restarts on
that residual: iterative refinement, x += (solution of A d = r with the inexact products).
Where a refinement step fails to halve the true residual, the products cannot take it further
(their error is too large against A's smallest eigenvalues), and the later runs use
``exact_matvec`` for their products: ``tol`` is met whenever exact CG would meet it.

With ``lanczos=True`` the first run also records each column's CG coefficients: preconditioned
CG on column b is the Lanczos process on P^{-1/2} A P^{-1/2} started from P^{-1/2} b, and its
tridiagonal matrix comes from the step lengths (:func:`kernelkit.linalg.slq.tridiagonal`),
which stochastic Lanczos quadrature turns into log-determinant estimates
(:func:`kernelkit.linalg.slq.lanczos_quadrature`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kernelkit_gpu.flags import PendingFlag

__all__ = ["CGResult", "ConvergenceBar", "LanczosCoefficients", "conjugate_gradient"]

#: A refinement step must shrink the largest true relative residual at least this much, or the
#: solve stops (the inexact products cannot take it further).
REFINE_GAIN = 0.5
#: With inexact products the true residual of a run is recomputed every CHECK_EVERY steps, and
#: once the recurrence's residual has fallen DRIFT_CHECK times below the last true one (when the
#: run's target is lower still). Where the true residual is more than DRIFT times the
#: recurrence's, the recurrence has left the truth (the products' floor) and the run ends, for a
#: refinement restart, keeping the better of its iterate and the last checked one (0 at first).
#: (The residual norm of CG is not monotone: exact CG on cond 1e5 rose to 5.7 times the
#: start and was still above it at step 100, so "no fall since the last check" cannot be the
#: test.) Where the products cannot resolve A (a GP trial point with almost no noise,
#: cond(A) ~ 1e9 on float32 products) the solve had run to max_cg_iter with a true residual of
#: 4; in KernelRidge at n = 1e6 (float32 products, tol 1e-6) the first run's recurrence fell to
#: 3e-6 by step ~70 while the true residual stayed at 1.2e-2 from step ~20 (docs/benchmarks.md).
CHECK_EVERY = 100
DRIFT_CHECK = 1e-3
DRIFT = 10.0
#: A run also ends where 1/2 x^T A x - b^T x (float64, exact products), which CG lowers at
#: every step, rose by more than this fraction of itself since the last check: divergence.
ENERGY_SLACK = 1e-8
#: The host reads the device's "any column left" flag one step late (no wait per step) only
#: below this many rows: there a step's ~30 small kernels cost as much as the product, while
#: above it a wait per step costs < 1% of the product and the step read late (a whole product,
#: dropped) ~5% of a solve (figures in docs/benchmarks.md).
LAG_MAX_ROWS = 50_000


@dataclass
class LanczosCoefficients:
    """CG coefficients of the first run, per column (what :mod:`kernelkit.linalg.slq` reads).

    Attributes
    ----------
    alphas : ndarray of shape (n_steps, k), float64
        Step lengths r^T z / p^T A p (0 once a column has stopped).
    betas : ndarray of shape (n_steps, k), float64
        r_new^T z_new / r^T z after each step (0 where not computed).
    n_iter : ndarray of shape (k,), int
        Steps each column took in that run.
    true_residual : float
        The largest true relative residual (``exact_matvec``) of that run's own iterate: with
        inexact products, how far the recurrence these coefficients come from stayed with A.
    """

    alphas: np.ndarray
    betas: np.ndarray
    n_iter: np.ndarray
    true_residual: float = 0.0


@dataclass
class CGResult:
    """What :func:`conjugate_gradient` returns.

    Attributes
    ----------
    x : torch.Tensor, shape (n, k)
        The approximate solution.
    n_iter : int
        Iterations run (products with ``matvec``), over every refinement step.
    residuals : ndarray of shape (n_iter + 1,)
        The largest relative residual over the columns, ``||b - A x|| / ||b||``, before the first
        iteration and after each one: from the CG recurrence during a run, and the true residual
        (``exact_matvec``) at the end of each run, the last entry included.
    column_residuals : ndarray of shape (k,)
        Each column's true relative residual at exit (``exact_matvec``; 0 for a zero column).
    converged : bool
        Every column's true relative residual is at most ``tol``.
    breakdown : bool
        Stopped because ``p^T A p <= 0`` or ``r^T z <= 0`` for a column that had not converged
        in a run with the exact products: A or the preconditioner is not positive definite in
        floating point. (A run with inexact products that breaks down above ``tol`` hands on
        to the exact products, as a failed refinement step does: ``exact_from``.)
    lanczos : LanczosCoefficients or None
        With ``lanczos=True``: the first run's coefficients.
    exact_from : int or None
        The iteration after which the runs used ``exact_matvec`` as their products, because a
        refinement step with the inexact ones failed to halve the true residual; None if they
        never did.
    residual : torch.Tensor of shape (n, k) or None
        The true residual B - A x at exit (``exact_matvec``; float64), from which a caller can
        correct a quadratic form to second order: b^T A^{-1} b = b^T x + x^T r + r^T A^{-1} r.
    """

    x: torch.Tensor
    n_iter: int
    residuals: np.ndarray
    column_residuals: np.ndarray
    converged: bool
    breakdown: bool
    lanczos: LanczosCoefficients | None = None
    exact_from: int | None = None
    residual: torch.Tensor | None = None


def _col_dot(a, b):
    return (a * b).sum(dim=0)


def _flag_lag(device, callback, n):
    """Steps by which the host reads the device's flags late: 1 on CUDA for at most
    :data:`LAG_MAX_ROWS` rows (no step waits for the device), 0 on the CPU, for larger systems
    or with a ``callback`` (which reads every step's residual anyway)."""
    return 1 if device.type == "cuda" and callback is None and n <= LAG_MAX_ROWS else 0


def _pcg(matvec, B, precond, tol, max_iter, callback, scale, record=None, check=None):
    """One PCG run on A X = B from X = 0; ``tol`` per column (tensor of shape (k,)).

    ``check``: exact products; every :data:`CHECK_EVERY` steps, and once the recurrence residual
    is :data:`DRIFT_CHECK` times below the last true one, the largest true relative residual of
    the running columns is computed with it. When that is above :data:`DRIFT` times the
    recurrence's the run ends, with the iterate of the previous check (or 0) if that was better;
    when the energy 1/2 x^T A x - b^T x of a running column rose, it ends with that iterate.

    Returns ``(x, recurrence residuals relative to B's columns times scale, breakdown, Ax)``,
    Ax = A @ x from ``check`` when a check ended the run, else None;
    ``scale`` (k,) turns them into residuals relative to the caller's right-hand side.
    ``record``: a dict whose lists "alphas", "betas", "active" receive each step's
    coefficients and the columns that took it (float64 tensors / bool tensors of shape (k,)).

    For small systems (:data:`LAG_MAX_ROWS`) no step waits for the device (without a
    ``callback``): a column that converges or breaks down (``p^T A p <= 0`` or ``r^T z <= 0``)
    is switched off on the device, and the host learns whether any column is left one step late
    on CUDA (a pinned copy behind an event, :class:`kernelkit_gpu.flags.PendingFlag`),
    after the next step's work is queued. That step then changed nothing (every step length is
    0) and is dropped.
    """
    lag = _flag_lag(B.device, callback, B.shape[0])
    bnorm = torch.linalg.vector_norm(B, dim=0)
    safe_bnorm = torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    x = torch.zeros_like(B)
    r = B.clone()
    active = bnorm > 0
    broken = torch.zeros_like(active)
    rels, flags, drifts = [], [], []  # rels: each step's relative residual per column
    last_check, checked = 1.0, torch.zeros_like(B)  # x = 0
    checked_Ax, Ax_known = torch.zeros_like(B), None  # A @ checked; A @ x if a check ended it
    last_energy = torch.zeros_like(bnorm)
    lowest_target = float(tol.min()) if check is not None else 0.0
    z = r if precond is None else precond(r)
    rz = _col_dot(r, z)
    p = z.clone()
    if not bool(active.any()):
        return x, [], False, None
    # Each step queues few kernels (at n = 2e4 the bookkeeping on the (k,) vectors had been
    # ~40 of a step's ~60 launches): a column that is not active
    # has p = 0, and the divisions below may give inf / nan there, which torch.where drops.
    while len(rels) < max_iter:
        Ap = matvec(p)
        pAp = _col_dot(p, Ap)
        ok = pAp > 0
        broken |= active > ok  # active and not ok: A is not positive definite in floating point
        active = active & ok
        step = torch.where(active, rz / pAp, 0.0)
        if record is not None:
            record["alphas"].append(step)
            record["active"].append(active)
            record["betas"].append(torch.zeros_like(step))
        x.addcmul_(p, step)
        r.addcmul_(Ap, step, value=-1.0)
        rel = torch.linalg.vector_norm(r, dim=0) / safe_bnorm
        rels.append(rel)
        if callback is not None:
            callback(len(rels), float((rel * scale).max()))
        if check is not None:
            if DRIFT_CHECK * last_check > lowest_target:
                drifts.append(PendingFlag(torch.where(active, rel, 0.0).max()
                                          < DRIFT_CHECK * last_check))
            due = len(drifts) > lag and drifts[-1 - lag].value()
            if due or len(rels) % CHECK_EVERY == 0:
                drifts = []
                running = float(torch.where(active, rel, 0.0).max())
                Ax = check(x)
                true = torch.linalg.vector_norm(B - Ax, dim=0) / safe_bnorm
                worst = float(torch.where(active, true, 0.0).max())
                # CG lowers 1/2 x^T A x - b^T x at every step (its residual norm need not fall)
                energy = 0.5 * _col_dot(x, Ax) - _col_dot(x, B)
                rose = energy > last_energy + ENERGY_SLACK * last_energy.abs()
                if bool((active & rose).any()):  # diverging: back to the last checked iterate
                    x, Ax_known = checked, checked_Ax
                    break
                if worst > DRIFT * running:  # the recurrence has left the truth
                    x, Ax_known = (checked, checked_Ax) if worst >= last_check else (x, Ax)
                    break  # (the revert when x is no better than the last checked iterate)
                last_check, last_energy, checked, checked_Ax = worst, energy, x.clone(), Ax
        active = active & (rel > tol)
        z = r if precond is None else precond(r)
        rz_new = _col_dot(r, z)
        ok = rz_new > 0
        broken |= active > ok
        active = active & ok
        beta = torch.where(active, rz_new / rz, 0.0)
        if record is not None:
            record["betas"][-1] = beta
        p = torch.where(active, torch.addcmul(z, p, beta), 0.0)
        rz = rz_new
        flags.append(PendingFlag(active.any()))
        if len(flags) > lag and not flags[-1 - lag].value():
            if lag:  # the step queued after the last active one: a no-op, dropped
                del rels[-lag:]
                if record is not None:
                    for name in record:
                        del record[name][-lag:]
            break
    residuals = (torch.stack(rels) * scale).amax(1).tolist() if rels else []
    return x, residuals, bool(broken.any()), Ax_known


def conjugate_gradient(matvec, B, *, precond=None, tol, max_iter, exact_matvec=None,
                       callback=None, lanczos=False):
    r"""Solve A X = B for symmetric positive definite A, every column of B at once.

    Parameters
    ----------
    matvec : callable
        ``matvec(P)`` returns A @ P for P of shape (n, k), float64, possibly from inexact
        (float32) products.
    B : torch.Tensor, shape (n, k)
        Right-hand sides, float64.
    precond : callable, optional
        ``precond(R)`` applies the inverse of a symmetric positive definite preconditioner.
    tol : float
        Stop when every column's true relative residual ``||b - A x|| / ||b||`` (computed with
        ``exact_matvec``) is at most ``tol``. All-zero columns are solved by x = 0 at once.
    max_iter : int
        Most products with ``matvec``, over all refinement steps.
    exact_matvec : callable, optional
        ``exact_matvec(P)``: A @ P in float64 arithmetic; default ``matvec``. Called once per
        refinement step (once in all when the first run reaches ``tol``), and when given, also
        within runs (:data:`CHECK_EVERY`, :data:`DRIFT_CHECK`: a run ends where the true
        residual has left the recurrence's).
    callback : callable, optional
        ``callback(iteration, relative_residual)`` after each iteration, with the largest
        relative residual of the CG recurrence, and at the end of each run (refinement step)
        with the largest true relative residual, for the same iteration: the last call reports
        what ``residuals[-1]`` does. :class:`ConvergenceBar` is one.
    lanczos : bool, default False
        Record the first run's coefficients per column (:class:`LanczosCoefficients`).

    Returns
    -------
    CGResult

    Notes
    -----
    The standard recurrence (Hestenes and Stiefel), column by column:

    .. math::

        \alpha_j = \frac{r_j^T z_j}{p_j^T A p_j}, \quad x_j \mathrel{+}= \alpha_j p_j, \quad
        r_j \mathrel{-}= \alpha_j A p_j, \quad z_j = P^{-1} r_j, \quad
        p_j = z_j + \frac{r_j^T z_j}{r_{j,\mathrm{old}}^T z_{j,\mathrm{old}}} p_j.

    Converged columns keep their x and get zero search directions, so they add no work beyond
    their share of the shared product. Refinement: after a run, r = B - exact_matvec(X); the
    columns still above ``tol`` run CG again on A D = r (target ``tol ||b|| / ||r||``) and
    X += D (kept only where it does not raise the largest true residual). When a step fails to
    halve the largest true residual, the inexact products limit the attainable residual (about
    their relative error times the condition number of A): the later runs take their products
    from ``exact_matvec`` (``exact_from``). With exact products a failed step ends the solve,
    and ``converged`` is False.
    """
    if B.dtype != torch.float64 or B.ndim != 2:
        raise TypeError(f"B must be a 2-D float64 tensor (CG vectors are float64); got "
                        f"{B.dtype} of shape {tuple(B.shape)}")
    check = exact_matvec
    exact_matvec = matvec if exact_matvec is None else exact_matvec
    bnorm = torch.linalg.vector_norm(B, dim=0)
    safe_bnorm = torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    x = torch.zeros_like(B)
    R = B
    rel = torch.where(bnorm > 0, torch.ones_like(bnorm), torch.zeros_like(bnorm))
    # residuals[-1] is float(rel.max()) at the top of every pass: each pass reads the device
    # once, for the largest true residual of its iterate (each read leaves the GPU idle while
    # the host queues the next kernels)
    residuals = [float(rel.max())]
    breakdown = False
    record = {"alphas": [], "betas": [], "active": []} if lanczos else None
    exact_from, first_true = None, residuals[0]
    while residuals[-1] > tol and len(residuals) <= max_iter and not breakdown:
        open_cols = rel > tol
        rhs = torch.where(open_cols, R, 0.0)
        target = torch.where(open_cols, tol / torch.where(open_cols, rel, 1.0), 1.0)
        start = len(residuals) - 1
        dx, steps, breakdown, Adx = _pcg(matvec, rhs, precond, target, max_iter - start,
                                    None if callback is None else
                                    (lambda i, res: callback(start + i, res)), rel,
                                    record if start == 0 else None, check)
        R_new = B - exact_matvec(x + dx) if Adx is None else R - Adx  # a check's product, reused
        rel_new = torch.linalg.vector_norm(R_new, dim=0) / safe_bnorm
        previous = residuals[-1]
        residuals.extend(steps)
        if not steps:  # broke down before the first product: no iteration to record
            break
        new_max = float(rel_new.max())
        if start == 0:
            first_true = new_max
        kept = new_max <= previous  # else the run made x worse (or NaN): it is not kept
        if kept:
            x, R, rel = x + dx, R_new, rel_new
        residuals[-1] = new_max if kept else previous
        if callback is not None:
            callback(len(residuals) - 1, residuals[-1])
        failed = residuals[-1] > max(REFINE_GAIN * previous, tol)
        if failed or (breakdown and residuals[-1] > tol):
            if check is None or len(residuals) > max_iter:
                break
            # the inexact products cannot take it further (or made p^T A p or r^T z <= 0, which
            # they can for a small residual when cond(A) times their error exceeds 1: n = 1e6 GP,
            # float32 products, a refinement run ended so at 4.4e-3 > tol): on with the exact ones
            matvec, check, exact_from, breakdown = exact_matvec, None, len(residuals) - 1, False
    converged = residuals[-1] <= tol
    return CGResult(x, len(residuals) - 1, np.asarray(residuals), rel.cpu().numpy(), converged,
                    breakdown,
                    None if record is None else _coefficients(record, B.shape[1], first_true),
                    exact_from, R)


class ConvergenceBar:
    """A progress bar (tqdm, on stderr) of a CG solve's convergence: a context manager giving
    the ``callback`` of :func:`conjugate_gradient`.

    Its position is the number of digits the residual has gained, -log10 of the largest
    relative residual (1 before the first step), within [0, its total], and its total the
    digits ``tol`` asks for, -log10(tol): the bar is full exactly when the solve has converged,
    and a solve that stops short (``max_iter``, refinement without gain) ends short of it.
    The postfix shows the step and the residual. No time left is estimated: CG's steps per
    digit change along a solve, and ``max_iter``, the only fixed count, is an upper limit that
    a converging solve does not reach (a bar over it had shown 2% at the end of a converged
    solve, after an estimate of 25 minutes).

    Parameters
    ----------
    tol : float
        The solve's ``tol``, > 0.
    desc : str
        The bar's label.
    """

    def __init__(self, tol, desc):
        self.tol = float(tol)
        self.desc = desc
        self._bar = None

    def __enter__(self):
        from tqdm import tqdm

        self._bar = tqdm(total=max(-math.log10(self.tol), 0.0), desc=self.desc,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} "
                                    "digits [{elapsed}{postfix}]")
        return self

    def __call__(self, iteration, residual):
        """Show the largest relative residual ``residual`` after step ``iteration``."""
        if residual <= self.tol:
            digits = self._bar.total
        elif residual < 1.0:
            digits = -math.log10(residual)
        else:  # above the start, or NaN
            digits = 0.0
        self._bar.n = digits
        self._bar.set_postfix_str(f"step {iteration}, residual {residual:.2e}")

    def __exit__(self, *exc):
        self._bar.close()
        return False


def _coefficients(record, k, true_residual):
    if not record["alphas"]:
        empty = np.zeros((0, k))
        return LanczosCoefficients(empty, empty, np.zeros(k, dtype=np.int64), true_residual)
    steps = {name: torch.stack(record[name]).cpu().numpy() for name in record}
    return LanczosCoefficients(steps["alphas"], steps["betas"], steps["active"].sum(0),
                               true_residual)
