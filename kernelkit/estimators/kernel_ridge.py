"""Large-scale kernel ridge regression as a scikit-learn estimator (:class:`KernelRidge`).

This module imports NumPy and scikit-learn only; torch and the solvers
(:mod:`kernelkit.linalg.cg`, :mod:`kernelkit.linalg.falkon`) load on the first ``fit``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from kernelkit import distributed
from kernelkit._util.device import check_device, resolve_device
from kernelkit.estimators import _ridge_checks
from kernelkit.estimators._verbosity import RECORD_ATTRIBUTE, check_verbose, displays
from kernelkit_math.registry import fill_doc, kernel_list_doc, kernel_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

__all__ = ["KernelRidge"]

logger = logging.getLogger(__name__)

SOLVERS = ("auto", "cg", "nystrom")
PRECONDITIONERS = ("nystrom", None)
#: ``solver="auto"`` solves the exact system up to this many samples (one product with K costs
#: n^2 kernel values: 1e10 at n = 1e5, tens of milliseconds with kernel_matvec on a GPU; on the
#: CPU the float64 reference manages about 1e8 per second), and the Nyström system beyond.
AUTO_EXACT_MAX = {"cuda": 100_000, "cpu": 20_000}
#: Largest system (n for "cg", M for "nystrom") solved by a dense float64 factorisation when
#: conjugate gradients cannot reach ``tol``: 3.2 GB per float64 copy, a minute on a few CPU cores.
DENSE_MAX = 20_000
#: Float64 n x n arrays the dense fallback holds at once: the matrix, its factor, and the float64
#: reference's temporaries while K is computed on the CPU (the least-squares copy on the CPU).
DENSE_COPIES = 4


_PSD = _ridge_checks.PSD_KERNELS


@fill_doc(psd=kernel_list_doc(_PSD),
          refused=kernel_list_doc(n for n in kernel_names() if n not in _PSD))
class KernelRidge(MultiOutputMixin, RegressorMixin, BaseEstimator):
    r"""Kernel ridge regression for large n, solved by preconditioned conjugate gradients.

    Fits the same model as :class:`sklearn.kernel_ridge.KernelRidge` (``solver="cg"``), the dual
    coefficients :math:`a` of

    .. math::

        (K + \alpha W^{-1})\, a = y, \qquad \hat f(x) = \sum_i a_i\, k(x, x_i),

    with W = diag(sample_weight) (the identity without weights; solved as scikit-learn does, in
    the form (S K S + alpha I) c = S y, a = S c with S = W^{1/2}, so zero weights are allowed),
    without ever forming the n x n matrix K: products with K run matrix-free
    (:func:`kernelkit_gpu.kernel_matvec` on the GPU, row blocks of the float64 registry
    reference on the CPU), so memory grows like n, not n^2. Where scikit-learn's differs: a
    callable ``kernel`` is refused (the products run on the registry's formulas), so are the
    kernels that are not positive semi-definite; sparse X is made dense; negative sample
    weights are an error (scikit-learn takes their square roots: NaN); singular systems get the
    least-squares solution with a cut-off of n eps (scikit-learn's: eps, see
    ``dense_fallback_``).

    Parameters
    ----------
    alpha : float or array-like of shape (n_targets,), default=1.0
        Ridge regularisation, >= 0, scikit-learn's convention (added to the diagonal of K). An
        array gives each target its own alpha (each distinct value adds an M x M factor to
        the preconditioner). With alpha = 0 the system K a = y is singular wherever K is; where
        conjugate gradients cannot solve it, the dense fallback gives the least-squares solution
        with scikit-learn's "Singular matrix" warning, as scikit-learn does.
    kernel : str or kernel object, default="rbf"
        A registry name of a positive semi-definite kernel, {psd} (``"poly"`` for
        ``"polynomial"``); ``"precomputed"``; or a kernel object, the kernels the Gaussian
        process takes (:mod:`kernelkit.operators.kernel_tree`): kernelkit's classes such as
        ``kernelkit.RBF(length_scale=2.0)`` (gamma = 1 / (2 length_scale^2)), scikit-learn's
        classes of the same kernels (``RBF``, ``Matern``, ``RationalQuadratic``, ``DotProduct``,
        ``ConstantKernel``, ``WhiteKernel``...) and their sums, products and powers
        (``2.0 * RBF() + Matern()``), evaluated at their own parameter values. A WhiteKernel
        adds nothing, as in scikit-learn's KernelRidge (its K is ``kernel(X, X)`` with the
        second argument given). CG needs a positive definite system, so the kernels the
        registry does not declare positive semi-definite ({refused}) are refused.
        ``"precomputed"``: X is the n x n kernel matrix of the training samples at ``fit`` and
        the m x n matrix K(test, train) at ``predict``, as in scikit-learn; then everything
        runs on the CPU in float64. scikit-learn's default is "linear"; a linear kernel ridge is
        better solved in feature space (:class:`sklearn.linear_model.Ridge`).
    gamma : float or None, default=None
        For the kernels that have one (rbf, laplacian, polynomial); None means 1 / n_features.
        Ignored by the other kernels and for kernel objects.
    degree : int, default=3
        Polynomial degree; ignored by other kernels.
    coef0 : float, default=1
        Polynomial constant; ignored by other kernels.
    kernel_params : dict or None, default=None
        Further registry parameters of a named kernel (``{"nu": 2.5, "length_scale": 0.5}`` for
        "matern"); they override gamma, degree and coef0. Not allowed with a kernel object.
    solver : {"auto", "cg", "nystrom"}, default="auto"
        "cg": the exact system above by conjugate gradients (CG), preconditioned by the Nyström
        approximation on ``n_components`` landmarks (``preconditioner``). Each iteration costs one
        product with K (n^2 kernel values) plus 2 n M for the preconditioner.
        "nystrom": Nyström kernel ridge on M landmarks Z (uniform sample of the training points),
        Falkon-style (Rudi, Carratino and Rosasco, 2017): the predictor
        :math:`\hat f(x) = \sum_j \beta_j k(x, z_j)` minimises

        .. math::

            \sum_i w_i (y_i - (K_{nM}\beta)_i)^2 + \alpha\, \beta^T (K_{MM} + s I) \beta,

        whose normal equations :math:`(K_{Mn} W K_{nM} + \alpha (K_{MM} + s I))\beta = K_{Mn} W y`
        are solved by CG with Falkon's preconditioner (:mod:`kernelkit.linalg.falkon`); each
        iteration costs n M kernel values. The jitter s is the machine epsilon of the kernel
        products times the mean of diag(K_MM) on the GPU (float32), and M times the float64
        one on the CPU (K_MM's own float64 rounding, below which the system can be indefinite
        where K_MM is singular); the preconditioner factors K_MM + M eps mean(diag K_MM) I, eps
        that of the products. On the CPU the landmarks whose features lie in the numerical span
        of the others' are dropped (a pivoted Cholesky factorisation of K_MM): for a
        finite-rank kernel such as "linear" or "polynomial" with more landmarks than its rank,
        as many as the rank are kept (``n_components_``). With M = n, or for a finite-rank
        kernel whose landmarks span its feature space, it is the exact solution up to the
        jitter (the predictions move by at most about s / alpha times |y|). "auto":
        "cg" up to 100,000 samples on the GPU (20,000 on
        the CPU), "nystrom" beyond.
    n_components : "auto" or int, default="auto"
        Number M of Nyström landmarks (at most n_samples). "auto": for ``solver="nystrom"``, as
        many as the fit can use: ceil(5 d_eff), at least 100, where d_eff = tr(K (K +
        alpha I)^-1) is the effective dimension at the smallest alpha, estimated from the
        eigenvalues of the kernel matrix of 2,000 training rows drawn with ``random_state``
        (Rudi, Camoriano and Rosasco, 2015: M of order d_eff, up to a log factor, keeps the
        optimal statistical rate; more landmarks add time, not accuracy; the factor and the
        figures behind it: :mod:`kernelkit.estimators._ridge_auto`). For the "cg" preconditioner, which
        changes the speed, not the answer: ceil(sqrt(n) ln n). Either way at most 10,000 on the
        GPU and 4,000 on the CPU, and less when the landmark arrays (M x M float64 matrices;
        for "cg" also the n x M preconditioner factor) would take more than a quarter of the
        free memory (:func:`kernelkit.estimators._ridge_memory.auto_components`).
        ``n_components_`` holds the value used.
    preconditioner : {"nystrom", None}, default="nystrom"
        For ``solver="cg"``: the Nyström preconditioner
        :math:`P = K_{nM} K_{MM}^{-1} K_{Mn} + \alpha I`, built as Frangella, Tropp and Udell
        build it and applied in its Cholesky (Woodbury) form where alpha is a single value not
        far below the factor's scale, else in their stable eigen form
        (:mod:`kernelkit.linalg.precond`); None for plain CG.
    tol : float, default=1e-6
        Stop when every output's true relative residual is at most ``tol``: that of
        (S K S + alpha I) c = S y, ``||S y - (S K S + alpha I) c|| / ||S y||`` ("cg"), or that
        of the preconditioned M-dimensional system ("nystrom"). It is recomputed at the end
        with float64 kernel values on every device (one more product, in float64 arithmetic
        on the GPU) and is what ``residuals_[-1]`` reports. When float32 products (GPU) leave
        it above ``tol`` (their floor is about 1e-7 times the condition number), CG restarts
        from that residual (iterative refinement) until ``tol`` is met, ``max_iter`` runs out,
        or a restart fails to halve it.
    max_iter : int, default=1000
        Most CG iterations, over all refinement restarts. When CG ends above ``tol`` (or breaks
        down) and the system has at most :data:`DENSE_MAX` unknowns (n for "cg", M for
        "nystrom") and fits in memory, it is solved by a dense float64 factorisation instead
        (``dense_fallback_``), without a warning. Otherwise a
        :class:`~sklearn.exceptions.ConvergenceWarning` quoting the true residual is raised,
        or a ``ValueError`` when CG broke down (no useful model).
    device : {"auto", "cpu", "cuda"}, default="auto"
        "auto" is the GPU when one is present. On the GPU the kernel products of the CG
        iterations and of ``predict`` are float32 (:func:`kernelkit_gpu.kernel_matvec` and
        :func:`kernelkit_gpu.gram`, "accurate" mode); K_MM, the residual at exit and the dense
        fallback use float64 kernel values; CG vectors, sums over blocks and every M x M matrix
        are float64. On the CPU everything is float64.
    random_state : int, RandomState instance or None, default=None
        Draws the landmarks.
    verbose : int or bool, default=False
        0 or False: silent. 1 or more (True): a progress bar (tqdm, on stderr; rank 0 of a
        process group only) of CG's convergence: the digits the relative residual has gained,
        -log10(residual), out of the digits ``tol`` asks for, -log10(tol), with the step and
        the residual (:class:`~kernelkit.linalg.cg.ConvergenceBar`). Whatever ``verbose``,
        ``fit`` logs an INFO record (:mod:`logging`) at its start (solver, n, d, M, targets,
        device) and at its end (CG steps, true residual, dense fallback, seconds), with these
        numbers in ``record.kernelkit``, a dict (:mod:`kernelkit.estimators._verbosity`).

    Attributes
    ----------
    dual_coef_ : ndarray of shape (n_centres,) or (n_centres, n_targets)
        Coefficients of the kernel expansion over ``X_fit_``.
    X_fit_ : ndarray of shape (n_centres, n_features)
        The points the predictor expands over: the training data ("cg"), the landmarks
        ("nystrom").
    solver_ : str
        The solver used ("cg" or "nystrom").
    n_components_ : int
        Landmarks used (0 for plain CG): for "nystrom" on the CPU, fewer than
        ``n_components`` where some were in the numerical span of the others.
    landmark_indices_ : ndarray of shape (n_components_,)
        Their row indices in the training data.
    n_iter_ : int
        CG iterations run.
    residuals_ : ndarray of shape (n_iter_ + 1,)
        Largest relative residual over the outputs (``tol``), before the first iteration and
        after each: the CG recurrence's estimate during a run, the true residual (float64
        kernel values) at the end of each run, the last entry included.
    dense_fallback_ : bool
        CG did not reach ``tol`` and the coefficients come from a dense float64 solve (the
        n x n system for "cg", the M x M normal equations for "nystrom"): Cholesky, or, when
        that fails, the minimum-norm least-squares solution (LAPACK gelsd, singular values under
        n eps times the largest cut) with scikit-learn's "Singular matrix" warning.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names (a pandas DataFrame).

    Raises
    ------
    ValueError, TypeError
        At ``fit``, for parameters out of range or of the wrong type, NaN or infinity in X or y,
        negative sample weights, mismatched lengths, a problem too large for the memory
        available (before anything large is allocated), or a breakdown of CG on a system too
        large for the dense fallback; at ``predict``, for data with the wrong number of
        features.

    See Also
    --------
    sklearn.kernel_ridge.KernelRidge : the dense O(n^3) solver this one reproduces.

    Notes
    -----
    Memory: the data (on the GPU in float32 and float64), about ten float64 vectors of length n
    ("cg") or M ("nystrom") per output, four float64 M x M matrices (one more per further
    distinct alpha), and kernel row blocks sized from the memory available (half the free GPU
    memory, at most 4 GiB; 256 MiB on the CPU). n x n is formed only by the dense fallback,
    which checks first that four float64 n x n arrays fit.

    Under an initialised ``torch.distributed`` process group of several ranks every rank calls
    ``fit(X, y)`` with the whole data and gets the same fitted attributes (rank 0's landmarks
    and coefficients); ``solver="nystrom"`` shards the rows of K_nM over the ranks
    (:mod:`kernelkit.linalg.falkon_sharded`), ``solver="cg"`` its GPU products. docs/distributed.md.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import KernelRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(300, 2))
    >>> y = np.sin(X[:, 0]) * np.cos(X[:, 1])
    >>> model = KernelRidge(alpha=1e-3, kernel="rbf", gamma=0.5, device="cpu", random_state=0)
    >>> model.fit(X, y).score(X, y) > 0.99
    True
    """

    def __init__(self, alpha=1.0, *, kernel="rbf", gamma=None, degree=3, coef0=1,
                 kernel_params=None, solver="auto", n_components="auto", preconditioner="nystrom",
                 tol=1e-6, max_iter=1000, device="auto", random_state=None, verbose=False):
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.solver = solver
        self.n_components = n_components
        self.preconditioner = preconditioner
        self.tol = tol
        self.max_iter = max_iter
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # made dense (the products need dense rows)
        tags.input_tags.pairwise = isinstance(self.kernel, str) and self.kernel == "precomputed"
        tags.target_tags.multi_output = True
        return tags

    # ------------------------------------------------------------------------------ checks
    def _check_params(self):
        alpha = _ridge_checks.check_alpha(self.alpha)
        if not isinstance(self.solver, str) or self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}; got {self.solver!r}")
        if self.preconditioner not in PRECONDITIONERS:
            raise ValueError(f"preconditioner must be 'nystrom' or None; got {self.preconditioner!r}")
        n_components = self.n_components
        if isinstance(n_components, str):
            if n_components != "auto":
                raise ValueError(f"n_components must be 'auto' or an integer > 0; got "
                                 f"{n_components!r}")
        else:
            n_components = _ridge_checks.check_number(n_components, "n_components", low=0,
                                                      integer=True)
        tol = _ridge_checks.check_number(self.tol, "tol", low=0.0)
        max_iter = _ridge_checks.check_number(self.max_iter, "max_iter", low=0, integer=True)
        check_device(self.device)
        check_verbose(self.verbose)
        return alpha, n_components, tol, max_iter

    def _kernel(self, n_features):
        """The ``kernel`` parameter as a tree (:mod:`kernelkit.operators.kernel_tree`: a
        registry name is the one-leaf tree), or None for "precomputed"
        (:func:`~kernelkit.estimators._ridge_checks.kernel_structure`)."""
        return _ridge_checks.kernel_structure(self.kernel, n_features, gamma=self.gamma,
                                              degree=self.degree, coef0=self.coef0,
                                              kernel_params=self.kernel_params)

    def _operator(self, structure, X, where):
        """The kernel operator of ``structure`` (:meth:`_kernel`) on ``where``; for
        "precomputed" (None) the operator of the kernel matrix ``X``."""
        from kernelkit.operators import kernel_operator

        if structure is None:
            return kernel_operator.PrecomputedOperator(X)
        return kernel_operator.KernelOperator(structure, where=where)

    def _pick_solver(self, n, where):
        if self.solver != "auto":
            return self.solver
        return "cg" if n <= AUTO_EXACT_MAX[where] else "nystrom"

    # --------------------------------------------------------------------------------- fit
    def fit(self, X, y, sample_weight=None):
        """Fit the kernel ridge model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, n_samples)
            Training data (a sparse matrix is made dense), or the kernel matrix for
            ``kernel="precomputed"``.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative weight of each sample (a float: the same weight for all), as in
            scikit-learn: the fit minimises sum_i w_i (y_i - f(x_i))^2 + alpha ||f||^2, and the
            dual coefficients of zero-weight samples are 0.

        Returns
        -------
        self : KernelRidge
            The fitted estimator.

        Raises
        ------
        ValueError
            Besides bad parameters and data: when conjugate gradients break down (the system is
            not positive definite in floating point) on a system too large for the dense
            fallback (more than :data:`DENSE_MAX` unknowns or more than the memory available).
        """
        begin = time.perf_counter()
        X = _ridge_checks.dense(X)
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        alpha, n_components, tol, max_iter, X, y, Y, weights, where, structure = (
            distributed.checked("KernelRidge.fit", self, self._fit_inputs, X=X, y=y,
                                sample_weight=sample_weight))
        n = X.shape[0]
        d = 1 if structure is None else X.shape[1]  # precomputed: index operands, K is the user's
        k = Y.shape[1]
        solver = self._pick_solver(n, where)
        rng = check_random_state(self.random_state)

        from kernelkit.estimators import _ridge_memory
        from kernelkit.linalg import falkon

        op = self._operator(structure, X, where)

        def plan():  # from the free memory and rng: rank 0's under a process group
            m = 0
            if solver == "nystrom" or self.preconditioner:
                m = min(n_components, n) if n_components != "auto" else _ridge_memory.auto_components(
                    self._auto_wanted(solver, op, X, alpha, weights, rng), n=n, d=d, k=k,
                    solver=solver, where=where, triton=op.triton, n_alphas=np.unique(alpha).size)
            return m, _ridge_memory.plan_blocks(op, n=n, d=d, k=k, m=m, solver=solver,
                                          n_alphas=np.unique(alpha).size)

        m, op.block_bytes = distributed.rank0_decision(plan)
        idx = falkon.landmarks(n, m, rng) if m else np.empty(0, dtype=np.intp)
        Xo, Xe = op.data(X), op.exact_data(X)
        if solver == "nystrom":
            idx = falkon.spanning_landmarks(op, Xe, idx)
        sharded = distributed.active()  # a process group (kernelkit.distributed)
        if sharded:
            from kernelkit.linalg import falkon_sharded

            idx = falkon_sharded.same_on_all_ranks(idx)
        m = len(idx)
        data, exact = (Xo, op.take(Xo, idx)), (Xe, op.take(Xe, idx))
        Yt = op.vectors(Y)
        alphas = op.vectors(np.broadcast_to(alpha, (k,)))
        wt = None if weights is None else op.vectors(weights)
        fit = self._fit_exact if solver == "cg" else self._fit_nystrom
        features = None if structure is None else d  # precomputed: X is K
        _log("fit_start", f"{solver}: n={n}, d={features}, M={m}, {k} targets on {where}, tol "
             f"{tol:g}", solver=solver, n=n, d=features, n_components=m, n_targets=k,
             device=where, tol=tol)
        if sharded and solver == "nystrom":
            fit = functools.partial(falkon_sharded.fit_nystrom, self._warn_lstsq)
        with self._progress(solver, tol) as callback:
            result, coef, dense = fit(op, data, exact, idx, Yt, alphas, wt, tol, max_iter,
                                      callback)
        size = n if solver == "cg" else m
        fallback = not result.converged and distributed.rank0_decision(self._dense_fits, size,
                                                                       where)
        if fallback:
            coef = dense()
        elif result.breakdown:
            raise ValueError(
                f"KernelRidge: conjugate gradients broke down after {result.n_iter} iterations "
                f"(true relative residual {result.residuals[-1]:.3g}): the system is not positive "
                f"definite in floating point, and its {size} unknowns are too many for the dense "
                f"float64 fallback. Increase alpha.")
        elif not result.converged:
            reason = (f"at max_iter={max_iter}" if result.n_iter >= max_iter else
                      "when iterative refinement stopped gaining (float32 products)")
            warnings.warn(
                f"KernelRidge: conjugate gradients stopped {reason} with true relative residual "
                f"{result.residuals[-1]:.3g} > tol={tol:g}, and the {size} unknowns are too many "
                "for the dense float64 fallback. Increase max_iter or n_components, or increase "
                "alpha.", ConvergenceWarning, stacklevel=2)
        coef = coef.cpu().numpy()
        if sharded:  # rank 0's coefficients on every rank, bit for bit
            coef = falkon_sharded.same_on_all_ranks(coef)
        self.dual_coef_ = coef[:, 0] if y.ndim == 1 else coef
        self.X_fit_ = X if solver == "cg" else X[idx]  # precomputed: K's rows of the centres
        self.solver_ = solver
        self.dense_fallback_ = fallback
        self.n_components_ = m
        self.landmark_indices_ = idx
        self.n_iter_ = result.n_iter
        self.residuals_ = result.residuals
        seconds = time.perf_counter() - begin
        _log("fit_end", f"{solver} ended after {result.n_iter} CG steps, {seconds:.3g} s: true "
             f"relative residual {result.residuals[-1]:.3g}"
             + (", dense fallback" if fallback else ""), solver=solver, n=n, n_components=m,
             cg_steps=result.n_iter, residual=float(result.residuals[-1]),
             dense_fallback=bool(fallback), seconds=seconds)
        return self

    @staticmethod
    def _auto_wanted(solver, op, X, alpha, weights, rng):
        """Landmarks ``n_components="auto"`` asks for before the caps
        (:mod:`kernelkit.estimators._ridge_auto`): from the effective dimension at the smallest
        alpha for "nystrom" (the subsample drawn from ``rng``), sqrt(n) ln n for the "cg"
        preconditioner."""
        from kernelkit.estimators import _ridge_auto

        n = len(X)
        if solver == "cg":
            return _ridge_auto.preconditioner_components(n)
        d_eff = _ridge_auto.effective_dimension(op, X, float(np.min(alpha)), rng, weights)
        return _ridge_auto.nystrom_components(d_eff, n)

    def _fit_inputs(self, X, y, sample_weight):
        """The checked parameters and data of :meth:`fit`: ``(alpha, n_components, tol,
        max_iter, X, y, Y (float64, 2-D), weights, device, kernel tree or None for
        "precomputed")``."""
        alpha, n_components, tol, max_iter = self._check_params()
        X, y = _validate_data(self, X, y, dtype=[np.float64, np.float32], multi_output=True,
                              y_numeric=True)
        weights = None
        if sample_weight is not None:
            weights = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                           ensure_non_negative=True)
        structure = self._kernel(X.shape[1])
        if structure is None and X.shape[0] != X.shape[1]:
            raise ValueError(f"kernel='precomputed' takes X as the square kernel matrix of the "
                             f"training samples; got X of shape {X.shape}")
        where = "cpu" if structure is None else resolve_device(self.device)
        Y = np.asarray(y, dtype=np.float64)
        Y = Y.reshape(-1, 1) if Y.ndim == 1 else Y
        if alpha.size not in (1, Y.shape[1]):
            raise ValueError(f"alpha has {alpha.size} values but y has {Y.shape[1]} targets: "
                             "give one alpha, or one per target")
        return alpha, n_components, tol, max_iter, X, y, Y, weights, where, structure

    @staticmethod
    def _dense_fits(size, where):
        """A dense float64 system of ``size`` unknowns is small enough for the fallback."""
        from kernelkit.estimators import _ridge_memory

        if size > DENSE_MAX:
            return False
        avail = _ridge_memory.available_bytes(where)
        return avail is None or DENSE_COPIES * 8 * size * size <= _ridge_memory.USABLE_SHARE * avail

    @staticmethod
    def _warn_lstsq(used_lstsq):
        if used_lstsq:  # scikit-learn's words
            warnings.warn("Singular matrix in solving dual problem. Using least-squares solution "
                          "instead.", stacklevel=4)

    @classmethod
    def _fit_exact(cls, op, data, exact, idx, Y, alphas, weights, tol, max_iter, callback):
        """CG on (S K S + alpha_j I) c = S y, a = S c; ``(result, a, dense solve)``."""
        from kernelkit.linalg.cg import conjugate_gradient
        from kernelkit.linalg.dense import shifted_solve
        from kernelkit.linalg.falkon import nystrom_preconditioner

        sw = None if weights is None else weights.sqrt()[:, None]
        scale = (lambda V: V) if sw is None else (lambda V: sw * V)
        precond = None if not len(idx) else nystrom_preconditioner(op, exact, alphas, sw)

        def product(X):
            return lambda P: scale(op.matmul(X, X, scale(P))) + alphas * P

        result = conjugate_gradient(product(data[0]), scale(Y), precond=precond, tol=tol,
                                    max_iter=max_iter, exact_matvec=product(exact[0]),
                                    callback=callback)

        def dense():
            K = op.block(exact[0])
            if sw is not None:
                K *= sw
                K *= sw.T
            c, used_lstsq = shifted_solve(K, scale(Y), alphas)
            cls._warn_lstsq(used_lstsq)
            return scale(c)

        return result, scale(result.x), dense

    @classmethod
    def _fit_nystrom(cls, op, data, exact, idx, Y, alphas, weights, tol, max_iter, callback):
        """CG on the Falkon system; ``(result, beta, dense solve)``."""
        from kernelkit.linalg.cg import conjugate_gradient
        from kernelkit.linalg.falkon import FalkonSystem

        system = FalkonSystem(op, data, exact, alphas, weights, idx)
        result = conjugate_gradient(system.matvec, system.rhs(Y), tol=tol, max_iter=max_iter,
                                    exact_matvec=system.exact_matvec, callback=callback)

        def dense():
            beta, used_lstsq = system.dense_solve(Y)
            cls._warn_lstsq(used_lstsq)
            return beta

        return result, system.to_beta(result.x), dense

    def _progress(self, solver, tol):
        """A context manager giving the CG callback: a
        :class:`~kernelkit.linalg.cg.ConvergenceBar` where ``verbose`` displays
        (:func:`~kernelkit.estimators._verbosity.displays`), else None."""
        if not displays(self.verbose):
            return contextlib.nullcontext(None)
        from kernelkit.linalg.cg import ConvergenceBar

        return ConvergenceBar(tol, f"KernelRidge ({solver})")

    # ----------------------------------------------------------------------------- predict
    def predict(self, X):
        """Predict with the fitted model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Or K(X, X_train), shape (n_samples, n_training_samples), for
            ``kernel="precomputed"``.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_targets)
            float64 predictions; on the GPU from float32 kernel products (error about the float32
            epsilon times sum_i |k(x, x_i) a_i|, measured 1.3-1.4 times that).
        """
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        X, where, structure = distributed.checked("KernelRidge.predict", self,
                                                  self._predict_inputs, X=_ridge_checks.dense(X))
        op = self._operator(structure, X, where)
        coef = self.dual_coef_
        C = coef.reshape(-1, 1) if coef.ndim == 1 else coef
        if structure is None:  # X = K(test, train): its columns of the centres
            centres = np.arange(len(C)) if self.solver_ == "cg" else self.landmark_indices_
        else:
            centres = op.data(self.X_fit_)
        out = op.matmul(op.data(X), centres, op.vectors(C)).cpu().numpy()
        return out[:, 0] if coef.ndim == 1 else out

    def _predict_inputs(self, X):
        """The checked arguments of :meth:`predict`: ``(X, device, kernel tree or None for
        "precomputed")``."""
        check_is_fitted(self)
        X = _validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        structure = self._kernel(X.shape[1])
        return X, ("cpu" if structure is None else resolve_device(self.device)), structure


def _log(event, message, **fields):
    """An INFO record of :meth:`KernelRidge.fit`, its numbers in ``record.kernelkit``."""
    logger.info("KernelRidge %s", message, extra={RECORD_ATTRIBUTE: {
        "estimator": "KernelRidge", "event": event, **fields}})
