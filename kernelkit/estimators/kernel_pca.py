"""Kernel principal component analysis as a scikit-learn transformer (:class:`KernelPCA`).

This module imports NumPy, SciPy and scikit-learn only; torch, the kernel operators and the
eigensolver (:mod:`kernelkit.linalg.eigen`) load on the first ``fit``.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.preprocessing import KernelCenterer
from sklearn.utils import check_random_state
from sklearn.utils._arpack import _init_arpack_v0
from sklearn.utils.extmath import _randomized_eigsh, svd_flip
from sklearn.utils.validation import _check_psd_eigenvalues, check_is_fitted

from kernelkit._util.device import check_device, resolve_device
from kernelkit.estimators import _ridge_checks
from kernelkit_math.registry import fill_doc, kernel_list_doc, kernel_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

__all__ = ["KernelPCA"]

SOLVERS = ("auto", "dense", "arpack", "randomized", "krylov")
#: ``eigen_solver="auto"`` follows scikit-learn's rule up to this many samples, and takes
#: "krylov" beyond when ``n_components`` is under a tenth of them (a dense eigendecomposition
#: costs n^3 operations and 8 n^2 bytes: 2 GB at n = 16,000).
AUTO_DENSE_MAX = 5000
#: Most samples for ``fit_inverse_transform`` (a dense n x n float64 solve, as scikit-learn's).
INVERSE_MAX = 20_000
#: Products with the kernel matrix "krylov" runs at most for ``max_iter=None``.
KRYLOV_MAX_ITER = 1000


_PSD = _ridge_checks.PSD_KERNELS


@fill_doc(psd=kernel_list_doc(_PSD),
          refused=kernel_list_doc(n for n in kernel_names() if n not in _PSD))
class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    r"""Kernel principal component analysis, on the CPU or the GPU, up to large n.

    Computes what :class:`sklearn.decomposition.KernelPCA` computes: the largest eigenpairs
    (lambda_i, v_i) of the centred kernel matrix

    .. math::

        \tilde K = H K H, \qquad H = I - \mathbf{1}\mathbf{1}^T / n,

    and projects a point x on component i as
    :math:`\tilde k(x)^T v_i / \sqrt{\lambda_i}`, :math:`\tilde k(x)` the row K(x, X) centred
    with the training kernel's means. Solvers "dense", "arpack" and "randomized" are
    scikit-learn's own on the explicit float64 K̃ (the same eigenpairs, bit for bit for a
    precomputed kernel; kernelkit's kernel values may differ from scikit-learn's in the last
    bits).
    "krylov" never forms K or K̃: it runs a randomized block Krylov eigensolver
    (:func:`kernelkit.linalg.eigen.block_krylov_eigsh`) on the products

    .. math::

        \tilde K V = K V - \mathbf{1} (r^T V) - r (\mathbf{1}^T V) + \bar r\, \mathbf{1}
        (\mathbf{1}^T V), \qquad r = K \mathbf{1} / n, \quad \bar r = \mathbf{1}^T r / n,

    K V matrix-free by the kernel operator (:mod:`kernelkit.operators.kernel_operator`), r
    read from the first product (its start block spans the ones vector); memory grows like n
    (times the basis width: 2 x 7 blocks of float64 columns), not n^2. Where scikit-learn's
    differs: a callable ``kernel`` is refused (the products run on the registry's formulas),
    so are kernels that are not positive semi-definite; sparse X is made dense; arpack with
    ``n_components >= n_samples`` is an error (scikit-learn's SciPy call fails); X may be a
    torch tensor, and the outputs are then tensors on its device.

    Parameters
    ----------
    n_components : int or None, default=None
        Components kept (at most n_samples: more are cut to n_samples, as in scikit-learn).
        None: all, and those with a zero eigenvalue are removed.
    kernel : str or kernel object, default="linear"
        A registry name of a positive semi-definite kernel, {psd} (``"poly"`` for
        ``"polynomial"``); "precomputed" (X is the n x n kernel matrix at ``fit``, K(test, train) at
        ``transform``; everything then runs on the CPU in float64), or a kernel object as
        :class:`kernelkit.KernelRidge` takes (kernelkit's classes, scikit-learn's
        ``RBF``, ``Matern``... and their sums, products and powers). Kernel PCA is PCA in the
        kernel's feature space, which exists for positive semi-definite kernels only: the
        others ({refused}) are refused.
    gamma : float or None, default=None
        For the kernels that have one (rbf, laplacian, polynomial); None means 1 / n_features.
    degree : int, default=3
        Polynomial degree; ignored by other kernels.
    coef0 : float, default=1
        Polynomial constant; ignored by other kernels.
    kernel_params : dict or None, default=None
        Further registry parameters of a named kernel (``{"nu": 2.5}`` for "matern").
    alpha : float, default=1.0
        Ridge of the inverse transform's kernel ridge regression (``fit_inverse_transform``).
    fit_inverse_transform : bool, default=False
        Learn the pre-image map as scikit-learn does: kernel ridge regression of X on its
        projections (same kernel and parameters), solved densely in float64; at most
        :data:`INVERSE_MAX` samples.
    eigen_solver : {"auto", "dense", "arpack", "randomized", "krylov"}, default="auto"
        "dense" (LAPACK on the explicit K̃), "arpack" (Lanczos, SciPy's ``eigsh``) and
        "randomized" (Halko et al.) are scikit-learn's. "krylov": matrix-free randomized block
        Krylov with thick restarts (above); each step is one product of the n x n kernel matrix
        with a block of ``n_components + max(10, n_components / 2)`` columns, on the GPU
        rounded up to a multiple of 64 (the Triton product's chunk of columns; float32 kernel
        values there, everything else float64). "auto": for n_samples <= 5000,
        scikit-learn's rule ("arpack" when n_samples > 200 and n_components < 10, else
        "dense"); beyond, "krylov" when n_components < n_samples / 10, else "dense".
    tol : float, default=0
        "arpack": SciPy's tolerance (0: machine precision). "krylov": stop when every wanted
        eigenpair's residual ``||K̃ v - lambda v||`` is at most ``tol * lambda_1``; 0 means
        sqrt(eps) of the products' precision (1.5e-8 on the CPU, 3.5e-4 for the GPU's float32
        products). The residual r bounds the error: an eigenvalue of K̃ lies within
        min(r, r^2 / gap) of lambda, and v is within the angle r / gap of its eigenvector, gap
        the distance from lambda to the rest of the spectrum. Ignored by the other solvers.
    max_iter : int or None, default=None
        "arpack": SciPy's ``maxiter`` (None: 10 n). "krylov": most block products (None:
        1000); a run that stops there warns (:class:`~sklearn.exceptions.ConvergenceWarning`)
        with its residuals.
    iterated_power : int >= 0 or "auto", default="auto"
        Power iterations of "randomized" (scikit-learn's).
    remove_zero_eig : bool, default=False
        Drop the components with a zero eigenvalue (always done for ``n_components=None``).
    random_state : int, RandomState instance or None, default=None
        Start vectors of "arpack", "randomized" and "krylov".
    copy_X : bool, default=True
        Store a copy of X in ``X_fit_``; False stores X itself (it is never modified).
    n_jobs : int or None, default=None
        Accepted for scikit-learn compatibility; unused (the kernel products use the device's
        own parallelism).
    device : {"auto", "cpu", "cuda"}, default="auto"
        "auto" is the GPU when one is present. On the GPU the "krylov" products and those of
        ``transform`` are float32 (:func:`kernelkit_gpu.kernel_matvec` through the operator),
        with "krylov"'s final Rayleigh quotients and residuals from float64 kernel values; the
        other solvers' K̃ and centring means are float64. On the CPU everything is float64.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components_,)
        Eigenvalues of K̃, decreasing.
    eigenvectors_ : ndarray of shape (n_samples, n_components_)
        The unit eigenvectors, signs as scikit-learn's (largest entry positive).
    residual_bounds_ : ndarray of shape (n_components_,)
        ``||K̃ v_i - lambda_i v_i||`` of each returned pair (float64 kernel values; with
        "krylov" on the GPU centred by the float32 products' row means), plus
        |lambda_i - theta_i| where the PSD clean-up set a tiny eigenvalue theta_i to 0: a
        bound on the residual of the reported pair, for every solver.
    eigen_solver_ : str
        The solver used.
    n_iter_ : int
        Block products of "krylov" (0 for the other solvers).
    X_fit_ : ndarray of shape (n_samples, n_features)
        The training data (the kernel matrix for "precomputed").
    gamma_ : float
        The gamma used (1 / n_features for ``gamma=None``).
    dual_coef_ : ndarray of shape (n_samples, n_features)
        Inverse transform coefficients (``fit_inverse_transform``).
    X_transformed_fit_ : ndarray of shape (n_samples, n_components_)
        Projections of the training data (``fit_inverse_transform``).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names.

    Raises
    ------
    ValueError, TypeError
        For parameters out of range or of the wrong type, NaN or infinity in X, a
        non-square precomputed kernel, a kernel that is not positive semi-definite, or
        eigenvalues of K̃ significantly negative (scikit-learn's message).

    See Also
    --------
    sklearn.decomposition.KernelPCA : the dense solver this one reproduces.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import KernelPCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3))
    >>> kpca = KernelPCA(n_components=2, kernel="rbf", gamma=0.5, eigen_solver="krylov",
    ...                  device="cpu", random_state=0)
    >>> kpca.fit_transform(X).shape
    (300, 2)
    >>> bool(np.all(kpca.residual_bounds_ <= 1.5e-8 * kpca.eigenvalues_[0]))
    True
    """

    def __init__(self, n_components=None, *, kernel="linear", gamma=None, degree=3, coef0=1,
                 kernel_params=None, alpha=1.0, fit_inverse_transform=False, eigen_solver="auto",
                 tol=0, max_iter=None, iterated_power="auto", remove_zero_eig=False,
                 random_state=None, copy_X=True, n_jobs=None, device="auto"):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.iterated_power = iterated_power
        self.remove_zero_eig = remove_zero_eig
        self.random_state = random_state
        self.copy_X = copy_X
        self.n_jobs = n_jobs
        self.device = device

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # made dense (the products need dense rows)
        tags.input_tags.pairwise = self._precomputed
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    @property
    def _precomputed(self):
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    @property
    def _n_features_out(self):
        """Number of transformed output features."""
        return self.eigenvalues_.shape[0]

    # ------------------------------------------------------------------------------ checks
    def _check_params(self):
        """Raise TypeError / ValueError naming the first parameter out of range."""
        if self.n_components is not None:
            _ridge_checks.check_number(self.n_components, "n_components", low=0, integer=True)
        _check_real(self.alpha, "alpha")
        _check_real(self.tol, "tol")
        for name in ("fit_inverse_transform", "remove_zero_eig", "copy_X"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False; got {getattr(self, name)!r}")
        if not isinstance(self.eigen_solver, str) or self.eigen_solver not in SOLVERS:
            raise ValueError(f"eigen_solver must be one of {', '.join(map(repr, SOLVERS))}; got "
                             f"{self.eigen_solver!r}")
        if self.max_iter is not None:
            _ridge_checks.check_number(self.max_iter, "max_iter", low=0, integer=True)
        if not (isinstance(self.iterated_power, str) and self.iterated_power == "auto"):
            if (isinstance(self.iterated_power, bool)
                    or not isinstance(self.iterated_power, numbers.Integral)
                    or self.iterated_power < 0):
                raise ValueError(f"iterated_power must be 'auto' or an integer >= 0; got "
                                 f"{self.iterated_power!r}")
        if self.n_jobs is not None and (isinstance(self.n_jobs, bool)
                                        or not isinstance(self.n_jobs, numbers.Integral)):
            raise TypeError(f"n_jobs must be an integer or None; got {self.n_jobs!r}")
        check_device(self.device)
        if self.fit_inverse_transform and self._precomputed:
            raise ValueError("Cannot fit_inverse_transform with a precomputed kernel.")
        if isinstance(self.kernel, str) and not self._precomputed:
            _ridge_checks.psd_kernel_spec(
                self.kernel, ": kernel PCA is PCA in the kernel's feature space, which only a "
                "positive semi-definite kernel has")

    def _kernel(self, n_features):
        """The ``kernel`` parameter as a kernel tree for data of ``n_features`` features
        (:func:`~kernelkit.estimators._ridge_checks.kernel_structure`), None for
        "precomputed"."""
        return _ridge_checks.kernel_structure(self.kernel, n_features, gamma=self.gamma,
                                              degree=self.degree, coef0=self.coef0,
                                              kernel_params=self.kernel_params)

    def _pick_solver(self, n, n_components):
        if self.eigen_solver != "auto":
            return self.eigen_solver
        if n > AUTO_DENSE_MAX:
            return "krylov" if n_components < n / 10 else "dense"
        return "arpack" if n > 200 and n_components < 10 else "dense"

    def _inputs(self, X, reset):
        """``(X checked as a NumPy array, torch device of X or None, kernel tree or None for
        "precomputed", device the products run on)``."""
        X, tensor_device = _from_torch(X)
        X = _validate_data(self, _ridge_checks.dense(X), dtype=[np.float64, np.float32],
                           reset=reset, copy=reset and self.copy_X)
        structure = None if self._precomputed else self._kernel(self.n_features_in_)
        where = "cpu" if structure is None else resolve_device(self.device)
        return X, tensor_device, structure, where

    @staticmethod
    def _operator(structure, X, where):
        from kernelkit.operators import kernel_operator

        if structure is None:
            return kernel_operator.PrecomputedOperator(np.asarray(X, dtype=np.float64))
        return kernel_operator.KernelOperator(structure, where=where)

    # --------------------------------------------------------------------------------- fit
    def fit(self, X, y=None):
        """Fit the model from data in X.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Training data (the n_samples x n_samples kernel matrix for "precomputed").
        y : Ignored

        Returns
        -------
        self : KernelPCA
        """
        self._fit(X)
        return self

    def fit_transform(self, X, y=None, **params):
        """Fit the model from data in X and return its projection.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : Ignored
        **params : dict
            Unused (scikit-learn's signature).

        Returns
        -------
        X_new : ndarray or torch.Tensor of shape (n_samples, n_components_)
            ``eigenvectors_ * sqrt(eigenvalues_)`` in X's dtype (a tensor on X's device for a
            tensor X).
        """
        X, tensor_device = self._fit(X)
        return _to_torch(self._embedding().astype(X.dtype, copy=False), tensor_device)

    def _embedding(self):
        return self.eigenvectors_ * np.sqrt(self.eigenvalues_)

    def _fit(self, X):
        self._check_params()
        X, tensor_device, structure, where = self._inputs(X, reset=True)
        n = X.shape[0]
        if structure is None and X.shape[1] != n:
            raise ValueError(f"kernel='precomputed' takes X as the square kernel matrix of the "
                             f"training samples; got X of shape {X.shape}")
        if self.fit_inverse_transform and n > INVERSE_MAX:
            raise ValueError(f"fit_inverse_transform solves a dense {n} x {n} system; at most "
                             f"{INVERSE_MAX} samples are supported; fit the inverse transform "
                             "on a subsample")
        k = n if self.n_components is None else min(n, self.n_components)
        solver = self._pick_solver(n, k)
        if solver == "arpack" and k >= n:
            raise ValueError(f"eigen_solver='arpack' finds at most n_samples - 1 = {n - 1} "
                             f"components; got n_components={self.n_components} (None: all) "
                             f"for {n} samples; use eigen_solver='dense'")
        self.gamma_ = 1 / X.shape[1] if self.gamma is None else self.gamma
        op = self._operator(structure, X, where)
        if solver == "krylov":
            theta, V, residuals, n_iter = self._krylov(op, X, k)
        else:
            theta, V, residuals = self._explicit(op, X, k, solver)
            n_iter = 0
        values = _check_psd_eigenvalues(theta, enable_warnings=False)
        V, _ = svd_flip(u=V, v=None)
        order = values.argsort()[::-1]
        bounds = (residuals + np.abs(theta - values))[order]
        values, V = values[order], V[:, order]
        if self.remove_zero_eig or self.n_components is None:
            V, bounds = V[:, values > 0], bounds[values > 0]
            values = values[values > 0]
        self.eigenvalues_, self.eigenvectors_, self.residual_bounds_ = values, V, bounds
        self.eigen_solver_, self.n_iter_ = solver, n_iter
        if self.fit_inverse_transform:
            self._fit_inverse(X, where)
        self.X_fit_ = X
        return X, tensor_device

    def _explicit(self, op, X, k, solver):
        """scikit-learn's eigensolvers on the explicit float64 K̃: ``(theta, V, residuals)``;
        the centring means kept for :meth:`transform`."""
        K = op.block(op.exact_data(X)).cpu().numpy()
        centerer = KernelCenterer().set_output(transform="default").fit(K)
        K = centerer.transform(K, copy=False)
        self._row_means, self._all_mean = centerer.K_fit_rows_, float(centerer.K_fit_all_)
        n = K.shape[0]
        if solver == "dense":
            theta, V = eigh(K, subset_by_index=(n - k, n - 1))
        elif solver == "arpack":
            v0 = _init_arpack_v0(n, self.random_state)
            theta, V = eigsh(K, k, which="LA", tol=self.tol, maxiter=self.max_iter, v0=v0)
        else:
            theta, V = _randomized_eigsh(K, n_components=k, n_iter=self.iterated_power,
                                         random_state=self.random_state, selection="module")
        residuals = np.linalg.norm(K @ V - V * theta, axis=0)
        return theta, V, residuals

    def _krylov(self, op, X, k):
        """The matrix-free block Krylov eigensolver on K̃ V (class docstring):
        ``(theta, V, residuals, block products)``."""
        import torch

        from kernelkit.linalg.eigen import block_krylov_eigsh, default_tol

        n = X.shape[0]
        if self._precomputed:
            asym = np.max(np.abs(X - X.T))
            if asym > 100 * np.finfo(np.float64).eps * max(np.max(np.abs(X)), 1e-300):
                raise ValueError(f"eigen_solver='krylov' needs a symmetric precomputed kernel "
                                 f"matrix; max |K - K^T| is {asym:.3g}; use eigen_solver="
                                 "'dense'")
        Xo, Xe = op.data(X), op.exact_data(X)
        means = {}  # K's row means r and their mean, from the first product

        def centred(Xa):
            def product(V):
                KV = op.matmul(Xa, Xa, V)
                s = V.sum(dim=0, keepdim=True)
                if not means:  # V is the start block, which spans the ones vector 1, so
                    r = KV @ s[0] / n  # K 1 = K V V^T 1: no product of its own (12 s at 10^6)
                    means.update(r=r, r_bar=r.mean())
                r, r_bar = means["r"], means["r_bar"]
                return KV - (r @ V)[None, :] - r[:, None] * s + r_bar * s
            return product

        tol = self.tol if self.tol > 0 else default_tol(op.eps)
        max_iter = KRYLOV_MAX_ITER if self.max_iter is None else self.max_iter
        result = block_krylov_eigsh(centred(Xo), n, k, tol=tol, max_iter=max_iter,
                                    rng=check_random_state(self.random_state), device=op.device,
                                    multiple=_product_columns(op),
                                    start=op.vectors(np.ones((n, 1))))
        self._row_means, self._all_mean = means["r"].cpu().numpy(), float(means["r_bar"])
        theta, V = result.eigenvalues, result.eigenvectors
        residuals = result.residuals
        if op.eps > np.finfo(np.float64).eps:  # float32 products: one float64 product gives
            W = centred(Xe)(V)  # the Rayleigh quotients (what the r^2 / gap bound needs) and
            # the true residuals
            theta = (V * W).sum(dim=0)
            residuals = torch.linalg.vector_norm(W - V * theta, dim=0)
        if not result.converged:
            warnings.warn(
                f"KernelPCA: the block Krylov eigensolver stopped at max_iter={max_iter} block "
                f"products with largest relative residual "
                f"{float(residuals.max() / theta.abs().max()):.3g} > tol={tol:g}. Increase "
                "max_iter or tol.", ConvergenceWarning, stacklevel=3)
        return (theta.cpu().numpy(), V.cpu().numpy(), residuals.cpu().numpy(),
                result.n_products)

    def _fit_inverse(self, X, where):
        """scikit-learn's pre-image map: kernel ridge regression of X on the projections."""
        import torch

        from kernelkit.linalg.dense import shifted_solve

        Z = self._embedding()
        op = self._operator(self._inverse_kernel(), Z, where)
        K = op.block(op.exact_data(Z))
        coef, used_lstsq = shifted_solve(K, op.vectors(X), torch.full(
            (X.shape[1],), float(self.alpha), dtype=torch.float64, device=op.device))
        if used_lstsq:
            warnings.warn("KernelPCA: the inverse transform's kernel matrix plus alpha I is "
                          "singular; using the least-squares solution. Increase alpha.",
                          stacklevel=3)
        self.dual_coef_ = coef.cpu().numpy()
        self.X_transformed_fit_ = Z

    def _inverse_kernel(self):
        """The kernel of the inverse transform, on the projections: a named kernel with the
        parameters of the fit (gamma=None is 1 / n_features of X, as scikit-learn's
        ``gamma_``), a kernel object as given."""
        if isinstance(self.kernel, str):  # gamma=None would mean 1 / n_components here
            return _ridge_checks.kernel_structure(
                self.kernel, self.n_features_in_, gamma=self.gamma_, degree=self.degree,
                coef0=self.coef0, kernel_params=self.kernel_params)
        return self._kernel(None)

    # --------------------------------------------------------------------------- transform
    def transform(self, X):
        """Project X on the principal components.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Or K(X, X_fit_), shape (n_samples, n_training_samples), for "precomputed".

        Returns
        -------
        X_new : ndarray or torch.Tensor of shape (n_samples, n_components_)
            In X's dtype (a tensor on X's device for a tensor X); computed from float64 kernel
            rows on the CPU, float32 ones on the GPU.
        """
        check_is_fitted(self)
        X, tensor_device, structure, where = self._inputs(X, reset=False)
        op = self._operator(structure, X, where)
        nonzero = self.eigenvalues_ > 0
        A = np.zeros_like(self.eigenvectors_)
        A[:, nonzero] = self.eigenvectors_[:, nonzero] / np.sqrt(self.eigenvalues_[nonzero])
        n, c = A.shape
        columns = np.hstack([A, np.full((n, 1), 1.0 / n)])
        KA = op.matmul(op.data(X), op.data(self.X_fit_), op.vectors(columns)).cpu().numpy()
        s = A.sum(axis=0)
        out = (KA[:, :c] - self._row_means @ A - KA[:, c:] * s + self._all_mean * s)
        return _to_torch(out.astype(X.dtype, copy=False), tensor_device)

    def inverse_transform(self, X):
        """Map projections back to the input space by the learned pre-image map.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_components_)

        Returns
        -------
        X_original : ndarray or torch.Tensor of shape (n_samples, n_features_in_)
        """
        if not self.fit_inverse_transform:
            raise NotFittedError("The fit_inverse_transform parameter was not set to True when "
                                 "instantiating and hence the inverse transform is not "
                                 "available.")
        check_is_fitted(self)
        X, tensor_device = _from_torch(X)
        from sklearn.utils import check_array

        Z = check_array(X, dtype=[np.float64, np.float32], input_name="X")
        if Z.shape[1] != self.X_transformed_fit_.shape[1]:
            raise ValueError(f"X has {Z.shape[1]} columns but the model has "
                             f"{self.X_transformed_fit_.shape[1]} components")
        where = resolve_device(self.device)
        op = self._operator(self._inverse_kernel(), Z, where)
        out = op.matmul(op.data(Z), op.data(self.X_transformed_fit_),
                        op.vectors(self.dual_coef_)).cpu().numpy()
        return _to_torch(out.astype(Z.dtype, copy=False), tensor_device)


def _product_columns(op):
    """Columns that one product of ``op`` computes at the cost of one: the Triton K @ V's chunk
    of V (each chunk evaluates the kernel once; a block of k = 64 components and 96 columns cost
    two chunks, as 128 columns do, which took 9 products where 96 took 13, before the
    eigensolver checked convergence after every product), 1 elsewhere."""
    if not op.triton:
        return 1
    from kernelkit_gpu.pairwise.matvec_fused import MAX_BLOCK_R

    return MAX_BLOCK_R


def _check_real(value, name):
    """Raise unless ``value`` is a finite real number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number >= 0; got {value!r}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a real number >= 0; got {value!r}")


def _from_torch(X):
    """``(X as NumPy, its torch device)`` for a torch tensor, ``(X, None)`` otherwise."""
    if type(X).__module__.split(".")[0] == "torch" and hasattr(X, "detach"):
        return X.detach().cpu().numpy(), X.device
    return X, None


def _to_torch(out, device):
    """``out`` as a tensor on ``device``, or as it is for None."""
    if device is None:
        return out
    import torch

    return torch.from_numpy(np.ascontiguousarray(out)).to(device)
