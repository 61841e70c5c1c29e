"""Outlier detection by the one-class SVM: :class:`OneClassSVM`."""

from __future__ import annotations

import numpy as np
from sklearn.base import OutlierMixin

from kernelkit.estimators.svm._base import _BaseSVM, _check_real, _fill

_ONE_CLASS_DOC = """Unsupervised outlier detection by the one-class SVM, on libsvm's dual solved by
    batched SMO.

    Fits scikit-learn's :class:`sklearn.svm.OneClassSVM` (libsvm's one-class SVM, Schölkopf et
    al.): the dual

    .. math::

        \\min_a \\tfrac12 a^T K a, \\quad \\mathbf 1^T a = \\nu \\textstyle\\sum_t w_t, \\quad
        0 \\le a_t \\le w_t,

    from libsvm's start (the first samples at their bounds until the sum is reached), solved
    by :func:`kernelkit.linalg.smo.solve`. The decision function is
    :math:`\\sum_t a_t k(x, x_t) - \\rho`, positive for inliers. Where it differs from
    scikit-learn's: a Python function as ``kernel`` and kernels that are not positive
    semi-definite are refused; sparse X is made dense.

    Parameters
    ----------
    {kernel}
    {common}
    nu : float, default=0.5
        In (0, 1]: an upper bound on the fraction of training errors and a lower bound on the
        fraction of support vectors.
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
    intercept_ : ndarray of shape (1,)
        -rho.
    offset_ : float
        rho: ``decision_function = score_samples - offset_``.
    n_support_ : ndarray of shape (1,), dtype=int32
    n_iter_ : int
        SMO steps.
    fit_status_ : int
    shape_fit_ : tuple
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import OneClassSVM
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> model = OneClassSVM(nu=0.1, device="cpu").fit(X)
    >>> bool(abs((model.predict(X) == -1).mean() - 0.1) < 0.05)
    True
    """


class OneClassSVM(OutlierMixin, _BaseSVM):
    __doc__ = _fill(_ONE_CLASS_DOC)

    def __init__(self, *, kernel="rbf", degree=3, gamma="scale", coef0=0.0, tol=1e-3, nu=0.5,
                 shrinking=True, cache_size=200, verbose=False, max_iter=-1, device="auto"):
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.tol = tol
        self.nu = nu
        self.shrinking = shrinking
        self.cache_size = cache_size
        self.verbose = verbose
        self.max_iter = max_iter
        self.device = device

    def fit(self, X, y=None, sample_weight=None):
        """Learn the support of the data.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, n_samples)
        y : None
            Ignored.
        sample_weight : array-like of shape (n_samples,), default=None
            Per-sample bounds; samples with weight <= 0 are left out, as libsvm does.

        Returns
        -------
        self : OneClassSVM
        """
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        nu, X, weights, keep = self._checked(self._fit_inputs, X=X, y=y,
                                             sample_weight=sample_weight)
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        idx = np.flatnonzero(keep)
        bound = weights[idx]
        # libsvm's start: a_t = min(w_t, what is left of nu sum(w)), in order
        left = nu * bound.sum() - np.concatenate([[0.0], np.cumsum(bound)[:-1]])
        alpha = np.clip(np.minimum(bound, left), 0.0, None)
        result = self._solve(op, X, idx, np.zeros(len(idx)), np.ones(len(idx)),
                             bound, alpha)
        a = result.alpha.cpu().numpy()
        nonzero = a != 0
        self.dual_coef_ = a[nonzero][None, :]
        self.intercept_ = np.array([-result.rho])
        self.offset_ = result.rho
        self.n_support_ = np.array([nonzero.sum()], dtype=np.int32)
        self._finish(X, idx[nonzero], [result])
        return self

    def _fit_inputs(self, X, y, sample_weight):
        """The checked parameters and data of ``fit`` (``y`` ignored): nu, X, the sample
        weights and the mask of samples trained on."""
        nu = _check_real(self.nu, "nu", 0.0)
        if nu > 1:
            raise ValueError(f"nu must be in (0, 1]; got {self.nu!r}")
        self._check_common()
        X, _ = self._validate_X(X)
        weights, keep = self._weights(sample_weight, X)
        return nu, X, weights, keep

    def decision_function(self, X):
        """Signed distance to the boundary: positive for inliers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._decision(X)[:, 0]

    def score_samples(self, X):
        """``decision_function(X) + offset_`` (the unshifted kernel expansion).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self.decision_function(X) + self.offset_

    def predict(self, X):
        """+1 for inliers (decision value > 0), -1 for outliers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return np.where(self.decision_function(X) > 0, 1, -1)
