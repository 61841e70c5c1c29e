"""Large-scale kernel ridge regression as a scikit-learn estimator (:class:`KernelRidge`).

This module imports NumPy and scikit-learn only; torch and the solvers
(:mod:`kernelkit.solvers._cg`, :mod:`kernelkit.solvers._nystrom`) load on the first ``fit``.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from kernelkit._device import check_device, resolve_device
from kernelkit.kernels import _RegistryKernel
from kernelkit_math.registry import get_kernel

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

__all__ = ["KernelRidge"]

SOLVERS = ("auto", "cg", "nystrom")
PRECONDITIONERS = ("nystrom", None)
#: scikit-learn's names for kernels the registry spells differently.
_ALIASES = {"poly": "polynomial"}
#: ``solver="auto"`` solves the exact system up to this many samples (one product with K costs
#: n^2 kernel values: 1e10 at n = 1e5, tens of milliseconds with kernel_matvec on a GPU; on the
#: CPU the float64 reference manages about 1e8 per second), and the Nyström system beyond.
AUTO_EXACT_MAX = {"cuda": 100_000, "cpu": 20_000}


def _check_number(value, name, *, low, integer=False):
    """``value`` as a float (or int) > ``low``; TypeError / ValueError naming ``name``."""
    kind = "an integer" if integer else "a real number"
    ok_type = isinstance(value, numbers.Integral if integer else numbers.Real)
    if isinstance(value, bool) or not ok_type:
        raise TypeError(f"{name} must be {kind} > {low:g}; got {value!r}")
    if not np.isfinite(value) or value <= low:
        raise ValueError(f"{name} must be {kind} > {low:g}; got {value!r}")
    return int(value) if integer else float(value)


class KernelRidge(MultiOutputMixin, RegressorMixin, BaseEstimator):
    r"""Kernel ridge regression for large n, solved by preconditioned conjugate gradients.

    Fits the same model as :class:`sklearn.kernel_ridge.KernelRidge`, the dual coefficients
    :math:`a` of

    .. math::

        (K + \alpha I)\, a = y, \qquad \hat f(x) = \sum_i a_i\, k(x, x_i),

    without ever forming the n x n matrix K: products with K run matrix-free
    (:func:`kernelkit_gpu.kernel_matvec` on the GPU, row blocks of the float64 registry
    reference on the CPU), so memory grows like n, not n^2.

    Parameters
    ----------
    alpha : float, default=1.0
        Ridge regularisation, > 0, scikit-learn's convention (added to the diagonal of K).
    kernel : str or kernelkit kernel object, default="rbf"
        A registry name ("rbf", "laplacian", "polynomial" or "poly", "linear", "matern",
        "rational_quadratic", "cosine", "exponential") or a kernelkit kernel object such as
        ``kernelkit.RBF(length_scale=2.0)`` (its parameters are converted to the registry's:
        gamma = 1 / (2 length_scale^2) for RBF). Positive semi-definite kernels only (CG needs
        a positive definite system): "sigmoid" is refused. scikit-learn's default is "linear";
        a linear kernel ridge is better solved in feature space (:class:`sklearn.linear_model.Ridge`).
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

            \|y - K_{nM}\beta\|^2 + \alpha\, \beta^T K_{MM} \beta,

        whose normal equations :math:`(K_{Mn} K_{nM} + \alpha K_{MM})\beta = K_{Mn} y` are solved by
        CG with Falkon's preconditioner (:mod:`kernelkit.solvers._nystrom`); each iteration costs
        n M kernel values. With M = n it is the exact solution. "auto": "cg" up to 100,000
        samples on the GPU (20,000 on the CPU), "nystrom" beyond.
    n_components : int, default=1000
        Number M of Nyström landmarks (at most n_samples). 1000 is at least sqrt(n) for every
        n up to 10^6 (Rudi, Camoriano and Rosasco, 2015: M of order sqrt(n) log n keeps the
        optimal statistical rate of the Nyström estimator), keeps the float64 M x M matrices
        at 8 MB each and the set-up (n M^2 operations) small next to one exact product.
        Raise it (10^4 at n = 10^6) for the best accuracy of the "nystrom" solver and faster
        convergence of "cg".
    preconditioner : {"nystrom", None}, default="nystrom"
        For ``solver="cg"``: the Nyström preconditioner
        :math:`P = K_{nM} K_{MM}^{-1} K_{Mn} + \alpha I`, applied by the Woodbury identity; None for
        plain CG.
    tol : float, default=1e-6
        Stop when every output's relative residual ``||y - (K + alpha I) a|| / ||y||`` ("cg") or
        that of the preconditioned M-dimensional system ("nystrom") is at most ``tol``.
    max_iter : int, default=1000
        Most CG iterations; a :class:`~sklearn.exceptions.ConvergenceWarning` is raised when
        they run out before ``tol`` is reached.
    device : {"auto", "cpu", "cuda"}, default="auto"
        "auto" is the GPU when one is present. On the GPU the kernel products are float32
        (:func:`kernelkit_gpu.kernel_matvec` and :func:`kernelkit_gpu.gram`, "accurate" mode);
        CG vectors, sums over blocks and every M x M matrix are float64. On the CPU everything
        is float64.
    random_state : int, RandomState instance or None, default=None
        Draws the landmarks.
    verbose : bool or int, default=False
        Show a progress bar (tqdm) with the relative residual.

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
        Landmarks used (0 for plain CG).
    landmark_indices_ : ndarray of shape (n_components_,)
        Their row indices in the training data.
    n_iter_ : int
        CG iterations run.
    residuals_ : ndarray of shape (n_iter_ + 1,)
        Largest relative residual over the outputs, before the first iteration and after each.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names (a pandas DataFrame).

    Raises
    ------
    ValueError, TypeError
        At ``fit``, for parameters out of range or of the wrong type, NaN or infinity in X or y,
        mismatched lengths, or a problem too large for the memory available (before anything
        large is allocated); at ``predict``, for data with the wrong number of features.

    See Also
    --------
    sklearn.kernel_ridge.KernelRidge : the dense O(n^3) solver this one reproduces.

    Notes
    -----
    Memory: the data, about ten float64 vectors of length n ("cg") or M ("nystrom") per output,
    four float64 M x M matrices, and kernel row blocks sized from the memory available (half
    the free GPU memory, at most 4 GiB; 256 MiB on the CPU). n x n is never formed.

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
                 kernel_params=None, solver="auto", n_components=1000, preconditioner="nystrom",
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
        tags.input_tags.sparse = False
        tags.target_tags.multi_output = True
        return tags

    # ------------------------------------------------------------------------------ checks
    def _check_params(self):
        alpha = _check_number(self.alpha, "alpha", low=0.0)
        if not isinstance(self.solver, str) or self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}; got {self.solver!r}")
        if self.preconditioner not in PRECONDITIONERS:
            raise ValueError(f"preconditioner must be 'nystrom' or None; got {self.preconditioner!r}")
        n_components = _check_number(self.n_components, "n_components", low=0, integer=True)
        tol = _check_number(self.tol, "tol", low=0.0)
        max_iter = _check_number(self.max_iter, "max_iter", low=0, integer=True)
        check_device(self.device)
        return alpha, n_components, tol, max_iter

    def _kernel(self, n_features):
        """``(registry name, resolved registry parameters)`` of the ``kernel`` parameter."""
        kernel = self.kernel
        if isinstance(kernel, _RegistryKernel):
            if self.kernel_params:
                raise ValueError(
                    "kernel_params is for kernels given by name; set the parameters on the "
                    f"kernel object {kernel!r} instead"
                )
            name, params = kernel._registry_name, kernel._registry_params(n_features)
        elif isinstance(kernel, str):
            if kernel == "precomputed":
                raise ValueError("kernel='precomputed' is not supported: pass the data X itself")
            name = _ALIASES.get(kernel, kernel)
            try:
                spec = get_kernel(name)
            except ValueError as exc:
                raise ValueError(f"kernel: {exc}") from None
            given = {"gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}
            params = {p: v for p, v in given.items() if p in spec.param_names}
            if self.kernel_params is not None:
                if not isinstance(self.kernel_params, dict):
                    raise TypeError(f"kernel_params must be a dict or None; got {self.kernel_params!r}")
                params.update(self.kernel_params)
            params = spec.resolve(n_features, **params)
        else:
            raise TypeError(
                "kernel must be a registry name such as 'rbf' or a kernelkit kernel object such as "
                f"kernelkit.RBF(); got {kernel!r}"
            )
        if not get_kernel(name).psd:
            raise ValueError(
                f"kernel {name!r} is not positive semi-definite, so K + alpha I may be indefinite "
                "and conjugate gradients can fail; use a positive semi-definite kernel"
            )
        return name, params

    def _pick_solver(self, n, where):
        if self.solver != "auto":
            return self.solver
        return "cg" if n <= AUTO_EXACT_MAX[where] else "nystrom"

    # --------------------------------------------------------------------------------- fit
    def fit(self, X, y):
        """Fit the kernel ridge model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (dense).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.

        Returns
        -------
        self : KernelRidge
            The fitted estimator.
        """
        alpha, n_components, tol, max_iter = self._check_params()
        X, y = _validate_data(self, X, y, dtype=[np.float64, np.float32], multi_output=True,
                              y_numeric=True)
        where = resolve_device(self.device)
        name, params = self._kernel(X.shape[1])
        Y = np.asarray(y, dtype=np.float64)
        Y = Y.reshape(-1, 1) if Y.ndim == 1 else Y
        n, d = X.shape
        k = Y.shape[1]
        solver = self._pick_solver(n, where)
        m = min(n_components, n) if (solver == "nystrom" or self.preconditioner) else 0
        rng = check_random_state(self.random_state)

        from kernelkit.solvers import _kernel_op, _memory, _nystrom

        op = _kernel_op.KernelOperator(name, params, where)
        op.block_bytes = _memory.plan_blocks(op, n=n, d=d, k=k, m=m, solver=solver)
        idx = _nystrom.landmarks(n, m, rng) if m else np.empty(0, dtype=np.intp)
        Xo = op.data(X)
        Z = op.take(Xo, idx) if m else None
        Yt = op.vectors(Y)
        with self._progress(solver, max_iter) as callback:
            if solver == "cg":
                result, coef = self._fit_exact(op, Xo, Z, Yt, alpha, tol, max_iter, callback)
                self.X_fit_ = X
            else:
                result, coef = self._fit_nystrom(op, Xo, Z, Yt, alpha, tol, max_iter, callback)
                self.X_fit_ = X[idx]
        if result.breakdown:
            warnings.warn(
                f"KernelRidge: conjugate gradients broke down after {result.n_iter} iterations "
                f"(relative residual {result.residuals[-1]:.3g}): the system is not positive "
                "definite in floating point. Increase alpha.", ConvergenceWarning, stacklevel=2)
        elif not result.converged:
            warnings.warn(
                f"KernelRidge: conjugate gradients stopped at max_iter={max_iter} with relative "
                f"residual {result.residuals[-1]:.3g} > tol={tol:g}. Increase max_iter or "
                "n_components, or increase alpha.", ConvergenceWarning, stacklevel=2)
        coef = coef.cpu().numpy()
        self.dual_coef_ = coef[:, 0] if y.ndim == 1 else coef
        self.solver_ = solver
        self.n_components_ = m
        self.landmark_indices_ = idx
        self.n_iter_ = result.n_iter
        self.residuals_ = result.residuals
        return self

    @staticmethod
    def _fit_exact(op, X, Z, Y, alpha, tol, max_iter, callback):
        from kernelkit.solvers._cg import conjugate_gradient
        from kernelkit.solvers._nystrom import NystromPreconditioner

        precond = None if Z is None else NystromPreconditioner(op, X, Z, alpha)

        def matvec(P):
            return op.product(X, X, P) + alpha * P

        result = conjugate_gradient(matvec, Y, precond=precond, tol=tol, max_iter=max_iter,
                                    callback=callback)
        return result, result.x

    @staticmethod
    def _fit_nystrom(op, X, Z, Y, alpha, tol, max_iter, callback):
        from kernelkit.solvers._cg import conjugate_gradient
        from kernelkit.solvers._nystrom import FalkonSystem

        system = FalkonSystem(op, X, Z, alpha)
        result = conjugate_gradient(system.matvec, system.rhs(Y), tol=tol, max_iter=max_iter,
                                    callback=callback)
        return result, system.to_beta(result.x)

    def _progress(self, solver, max_iter):
        """A context manager giving the CG callback: a tqdm bar when ``verbose``, else None."""
        if not self.verbose:
            return contextlib.nullcontext(None)
        from tqdm import tqdm

        @contextlib.contextmanager
        def bar():
            with tqdm(total=max_iter, desc=f"KernelRidge ({solver})", unit="it") as t:
                def callback(iteration, residual):
                    t.update(1)
                    t.set_postfix(rel_residual=f"{residual:.2e}", refresh=False)

                yield callback

        return bar()

    # ----------------------------------------------------------------------------- predict
    def predict(self, X):
        """Predict with the fitted model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_targets)
            float64 predictions.
        """
        check_is_fitted(self)
        X = _validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        where = resolve_device(self.device)
        name, params = self._kernel(X.shape[1])
        from kernelkit.solvers import _kernel_op

        op = _kernel_op.KernelOperator(name, params, where)
        coef = self.dual_coef_
        C = coef.reshape(-1, 1) if coef.ndim == 1 else coef
        out = op.product(op.data(X), op.data(self.X_fit_), op.vectors(C)).cpu().numpy()
        return out[:, 0] if coef.ndim == 1 else out
