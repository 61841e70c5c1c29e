"""Epsilon-support vector regression: :class:`SVR`."""

from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import column_or_1d

from kernelkit.estimators.svm._base import _BaseSVM, _check_real, _fill

_SVR_DOC = """Epsilon-support vector regression, on libsvm's dual solved by batched SMO.

    Fits scikit-learn's :class:`sklearn.svm.SVR` (libsvm's epsilon-SVR): the dual over 2n
    variables (a, a*),

    .. math::

        \\min \\tfrac12 (a - a^*)^T K (a - a^*) + \\epsilon \\mathbf 1^T (a + a^*)
        - y^T (a - a^*), \\quad \\mathbf 1^T (a - a^*) = 0, \\quad 0 \\le a_t, a^*_t \\le C w_t,

    in libsvm's form (labels +1 for a, -1 for a*, p = epsilon - y and epsilon + y), solved by
    :func:`kernelkit.linalg.smo.solve`. The prediction is
    :math:`\\sum_t (a_t - a^*_t) k(x, x_t) - \\rho`. Where it differs from scikit-learn's: a
    Python function as ``kernel`` and kernels that are not positive semi-definite are refused;
    sparse X is made dense.

    Parameters
    ----------
    {kernel}
    {common}
    C : float, default=1.0
        Box bound, > 0 (times each sample's weight); inf: no bound.
    epsilon : float, default=0.1
        Width of the insensitive tube, >= 0.
    shrinking : bool, default=True
        Shrink as libsvm does: after every outer step of the solver, set aside the variables
        stuck at a bound (:mod:`kernelkit.linalg.smo`); the stopping rule is checked on the
        whole problem either way, so the answer meets the same ``tol``.
    verbose : bool, default=False
        Accepted for scikit-learn compatibility.

    Attributes
    ----------
    support_ : ndarray of shape (n_SV,)
    support_vectors_ : ndarray of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (1, n_SV)
        a_t - a*_t of the support vectors.
    intercept_ : ndarray of shape (1,)
    n_support_ : ndarray of shape (1,), dtype=int32
    n_iter_ : int
        SMO steps.
    fit_status_ : int
    shape_fit_ : tuple
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import SVR
    >>> X = np.linspace(0, 6, 80)[:, None]
    >>> y = np.sin(X[:, 0])
    >>> SVR(C=10.0, epsilon=0.05, device="cpu").fit(X, y).score(X, y) > 0.95
    True
    """


class SVR(RegressorMixin, _BaseSVM):
    __doc__ = _fill(_SVR_DOC)

    def __init__(self, *, kernel="rbf", degree=3, gamma="scale", coef0=0.0, tol=1e-3, C=1.0,
                 epsilon=0.1, shrinking=True, cache_size=200, verbose=False, max_iter=-1,
                 device="auto"):
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.tol = tol
        self.C = C
        self.epsilon = epsilon
        self.shrinking = shrinking
        self.cache_size = cache_size
        self.verbose = verbose
        self.max_iter = max_iter
        self.device = device

    def fit(self, X, y, sample_weight=None):
        """Fit the support vector regression.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, n_samples)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Per-sample multipliers of C; samples with weight <= 0 are left out, as libsvm does.

        Returns
        -------
        self : SVR
        """
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        X, y, weights, keep = self._checked(self._fit_inputs, X=X, y=y,
                                            sample_weight=sample_weight)
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        idx = np.flatnonzero(keep)
        n = len(idx)
        eps, target = float(self.epsilon), y[idx]
        bound = np.tile(float(self.C) * weights[idx], 2)
        result = self._solve(op, X, idx,
                             np.concatenate([eps - target, eps + target]),
                             np.concatenate([np.ones(n), -np.ones(n)]), bound, np.zeros(2 * n),
                             index=np.tile(np.arange(n), 2))
        a = result.alpha.cpu().numpy()
        coef = a[:n] - a[n:]
        nonzero = coef != 0
        self.dual_coef_ = coef[nonzero][None, :]
        self.intercept_ = np.array([-result.rho])
        self.n_support_ = np.array([nonzero.sum()], dtype=np.int32)
        self._finish(X, idx[nonzero], [result])
        return self

    def _fit_inputs(self, X, y, sample_weight):
        """The checked parameters and data of ``fit``: X, y (float64), the sample weights and
        the mask of samples trained on."""
        _check_real(self.C, "C", 0.0, infinite=True)
        _check_real(self.epsilon, "epsilon", 0.0, closed=True)
        self._check_common()
        X, y = self._validate_X(X, y)
        y = column_or_1d(y, warn=True).astype(np.float64)
        weights, keep = self._weights(sample_weight, X)
        return X, y, weights, keep

    def predict(self, X):
        """Predicted targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._decision(X)[:, 0]
