"""Support vector machines as scikit-learn estimators: :class:`SVC`, :class:`SVR` and
:class:`OneClassSVM`, on libsvm's dual problems solved by batched SMO
(:func:`kernelkit.linalg.smo.solve`) with kernel rows from the kernel operator
(:mod:`kernelkit.operators.kernel_operator`).

This module imports NumPy and scikit-learn only; torch, the operators and the solver load on the
first ``fit``.
"""

from __future__ import annotations

import functools
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, OutlierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import _ovr_decision_function, check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, column_or_1d

from kernelkit._util.device import check_device, resolve_device
from kernelkit.estimators import _platt, _ridge_checks
from kernelkit_math.registry import fill_doc, get_kernel, kernel_list_doc, kernel_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

__all__ = ["SVC", "SVR", "OneClassSVM"]

_PSD = [name for name in kernel_names() if get_kernel(name).psd]

_KERNEL_DOC = """\
kernel : str or kernel object, default="rbf"
        A registry name of a positive semi-definite kernel, {psd} ("poly" for "polynomial");
        "precomputed" (X is the n x n kernel matrix at ``fit``, K(test, train) after); or a
        kernel object (kernelkit's classes, scikit-learn's ``RBF``, ``Matern``... and their
        sums and products, at their own parameter values). The kernels the registry does not
        declare positive semi-definite ({refused}) are refused, and so is a Python function."""

_COMMON_DOC = """\
degree : int, default=3
        Degree of the "poly" kernel; ignored by the others.
    gamma : {{"scale", "auto"}} or float, default="scale"
        For rbf, laplacian and poly: "scale" is 1 / (n_features X.var()) (1 where X.var() is
        0), "auto" is 1 / n_features, as in scikit-learn. The value used is ``_gamma``.
    coef0 : float, default=0.0
        Constant of the "poly" kernel; ignored by the others.
    tol : float, default=1e-3
        Stop when the dual's maximal violation m(a) - M(a) (libsvm's KKT gap,
        :mod:`kernelkit.linalg.smo`) is at most ``tol``: libsvm's meaning of ``tol``.
    cache_size : float, default=200
        Megabytes of kernel rows the solver keeps.
    max_iter : int, default=-1
        Most SMO steps (per one-vs-one problem); -1: libsvm's own limit,
        max(10^7, 100 n). Where it runs out, a ConvergenceWarning and ``fit_status_ = 1``.
    device : {{"auto", "cpu", "cuda"}}, default="auto"
        Where the kernel rows and the solver run; "precomputed" runs on the CPU. Kernel values,
        the gradient and every reduction are float64 on both devices."""


def _check_real(value, name, low=None, *, closed=False, infinite=False):
    """``value`` as a float; TypeError / ValueError naming ``name`` (range: > low, or >= low
    when ``closed``; +inf allowed where ``infinite``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r}")
    finite = np.isfinite(value) or (infinite and value == np.inf)
    if not finite or (low is not None and (value < low if closed else value <= low)):
        kind = "real number (or inf)" if infinite else "finite real number"
        bound = f" {'>=' if closed else '>'} {low:g}" if low is not None else ""
        raise ValueError(f"{name} must be a {kind}{bound}; got {value!r}")
    return float(value)


class _BaseSVM(BaseEstimator):
    """What SVC, SVR and OneClassSVM share: parameters, the kernel, the solver call, and
    decision values."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # made dense (the products need dense rows)
        tags.input_tags.pairwise = self._precomputed
        return tags

    @property
    def _precomputed(self):
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    def _check_common(self):
        """Raise TypeError / ValueError naming the first shared parameter out of range."""
        if isinstance(self.kernel, str) and not self._precomputed:
            name = _ridge_checks.ALIASES.get(self.kernel, self.kernel)
            try:
                psd = get_kernel(name).psd
            except ValueError as exc:
                raise ValueError(f"kernel: {exc}") from None
            if not psd:
                raise ValueError(
                    f"kernel {name!r} is not positive semi-definite, so the SVM's dual is not "
                    "convex and the SMO solver may stop at a point that is not its minimum; use a "
                    "positive semi-definite kernel")
        elif not (self._precomputed or isinstance(self.kernel, Kernel)):
            raise TypeError(
                "kernel must be a registry name such as 'rbf', 'precomputed', or a kernel object "
                "such as kernelkit.RBF() (the kernel rows run on the registry's formulas, so a "
                f"Python function cannot be used); got {self.kernel!r}")
        if isinstance(self.degree, bool) or not isinstance(self.degree, numbers.Integral) \
                or self.degree < 0:
            raise ValueError(f"degree must be an integer >= 0; got {self.degree!r}")
        if isinstance(self.gamma, str):
            if self.gamma not in ("scale", "auto"):
                raise ValueError(f"gamma must be 'scale', 'auto' or a real number >= 0; got "
                                 f"{self.gamma!r}")
        else:
            _check_real(self.gamma, "gamma", 0.0, closed=True)
        _check_real(self.coef0, "coef0")
        _check_real(self.tol, "tol", 0.0)
        _check_real(self.cache_size, "cache_size", 0.0)
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, numbers.Integral) \
                or self.max_iter < -1:
            raise ValueError(f"max_iter must be an integer >= -1 (-1: no limit); got "
                             f"{self.max_iter!r}")
        check_device(self.device)

    def _validate_X(self, X, y=None, reset=True):
        """X (dense float64, C order) and y checked as scikit-learn's SVMs check them."""
        X = _ridge_checks.dense(X)
        if y is None:
            X = _validate_data(self, X, dtype=np.float64, order="C", reset=reset)
        else:
            X, y = _validate_data(self, X, y, dtype=np.float64, order="C", reset=reset)
        if self._precomputed and reset and X.shape[0] != X.shape[1]:
            raise ValueError(f"Precomputed matrix must be a square matrix; got shape {X.shape}")
        return X, y

    def _gamma_value(self, X):
        """scikit-learn's gamma: "scale", "auto" or the number."""
        if self._precomputed:
            return 0.0
        if self.gamma == "scale":
            var = X.var()
            return 1.0 / (X.shape[1] * var) if var != 0 else 1.0
        if self.gamma == "auto":
            return 1.0 / X.shape[1]
        return float(self.gamma)

    def _operator(self, X):
        """The kernel operator: of the kernel matrix X for "precomputed" (at ``fit``), else of
        the kernel at ``_gamma`` on ``device``."""
        from kernelkit.operators import kernel_operator

        if self._precomputed:
            return kernel_operator.PrecomputedOperator(X)
        structure = _ridge_checks.kernel_structure(
            self.kernel, self.n_features_in_, gamma=self._gamma, degree=int(self.degree),
            coef0=float(self.coef0), kernel_params=None)
        return kernel_operator.KernelOperator(structure, where=resolve_device(self.device))

    def _weights(self, sample_weight, X):
        """Sample weights (ones for None) and the mask of samples libsvm trains on (weight >
        0); ValueError where none is left."""
        weights = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                       allow_all_zero_weights=True)
        keep = weights > 0
        if not keep.any():
            raise ValueError("Invalid input - all samples have zero or negative weights.")
        return weights, keep

    def _solve(self, op, Xe, rows_of, p, y, C, alpha, index=None):
        """Run the SMO solver over the training points ``rows_of`` (their indices in ``Xe``);
        returns the result."""
        import torch

        from kernelkit.linalg import smo

        points = op.take(Xe, rows_of)

        def rows(indices):
            return op.block(op.take(points, indices.cpu().numpy()), points).to(torch.float64)

        def as_tensor(values):
            return torch.as_tensor(np.asarray(values, dtype=np.float64), device=op.device)

        index = None if index is None else torch.as_tensor(index, device=op.device)
        return smo.solve(rows, as_tensor(p), as_tensor(y), as_tensor(C), as_tensor(alpha),
                         index=index, tol=float(self.tol), max_iter=int(self.max_iter),
                         cache_bytes=int(self.cache_size * 2**20))

    def _finish(self, X, support, results, fold_results=()):
        """Store what every SVM stores; warn where a solver (of ``results``, or of
        ``fold_results``: SVC's cross-validation folds) ran out of ``max_iter``."""
        self.support_ = np.asarray(support, dtype=np.int32)
        self.support_vectors_ = (np.empty((0, 0)) if self._precomputed
                                 else X[self.support_].copy())
        self.shape_fit_ = X.shape
        self.fit_status_ = int(not all(r.converged for r in [*results, *fold_results]))
        self.n_iter_ = (np.array([r.n_iter for r in results], dtype=np.int32)
                        if isinstance(self, SVC) else results[0].n_iter)
        if self.fit_status_:
            warnings.warn(f"Solver terminated early (max_iter={self.max_iter}).  Consider "
                          "pre-processing your data with StandardScaler or MinMaxScaler.",
                          ConvergenceWarning)

    def _kernel_values(self, X):
        """K(X, support vectors) as a float64 NumPy array (X validated)."""
        if self._precomputed:
            return X[:, self.support_]
        op = self._operator(X)
        return op.block(op.exact_data(X), op.exact_data(self.support_vectors_)).cpu().numpy()

    def _pair_coefficients(self):
        """Coefficient rows over the support vectors, one per decision function: shape
        (n_functions, n_SV)."""
        return self.dual_coef_

    def _decision(self, X):
        """Decision values, shape (n_samples, n_functions), of validated X."""
        check_is_fitted(self)
        X, _ = self._validate_X(X, reset=False)
        return self._kernel_values(X) @ self._pair_coefficients().T + self.intercept_

    @property
    def coef_(self):
        """Weights in input space, ``dual_coef_ @ support_vectors_`` per decision function
        (read-only); only for ``kernel="linear"``."""
        if not (isinstance(self.kernel, str) and self.kernel == "linear"):
            raise AttributeError("coef_ is only available when using a linear kernel")
        coef = self._pair_coefficients() @ self.support_vectors_
        coef.flags.writeable = False  # computed: writing to it would change nothing
        return coef


_SVC_DOC = """C-support vector classification, on libsvm's dual solved by batched SMO.

    Fits scikit-learn's :class:`sklearn.svm.SVC` (libsvm's C-SVC): for each pair of classes
    (i, j), i < j (one-vs-one, as libsvm; one problem for two classes), the dual

    .. math::

        \\min_a \\tfrac12 a^T Q a - \\mathbf 1^T a, \\quad y^T a = 0, \\quad
        0 \\le a_t \\le C\\, w_t\\, c_{{y_t}}, \\qquad Q_{{st}} = y_s y_t k(x_s, x_t),

    over the samples of the two classes (y = +1 for class i, -1 for class j; w the sample
    weights, c the class weights), solved by :func:`kernelkit.linalg.smo.solve` (batched SMO
    with libsvm's working-set selection and stopping rule) on kernel rows of the kernel operator.
    With ``probability=True``, each pair's decision values are mapped to probabilities by
    Platt's sigmoid, fitted as libsvm fits it (5-fold internal cross-validation, libsvm's
    random numbers seeded from ``random_state`` as scikit-learn seeds them,
    :mod:`kernelkit.estimators._platt`), and combined over the pairs by Wu, Lin and Weng's
    pairwise coupling. Where it differs from scikit-learn's: a Python function as ``kernel`` is
    refused; kernels that are not positive semi-definite are refused (scikit-learn takes
    "sigmoid"); sparse X is made dense; ``probability`` is not deprecated (no FutureWarning)
    and ``probA_``, ``probB_`` are plain attributes.

    Parameters
    ----------
    C : float, default=1.0
        Box bound, > 0 (each sample's bound is C times its sample weight and class weight);
        inf: the hard margin.
    {kernel}
    {common}
    shrinking : bool, default=True
        Accepted for scikit-learn compatibility; the solver does not shrink.
    probability : bool, default=False
        Fit Platt's sigmoids (``probA_``, ``probB_``) and enable :meth:`predict_proba` and
        :meth:`predict_log_proba`; this fits 5 more machines per pair, on 4/5 of its samples.
    class_weight : dict or "balanced", default=None
        Multiplies C for the samples of each class; "balanced": n_samples / (n_classes
        np.bincount(y)).
    verbose : bool, default=False
        Accepted for scikit-learn compatibility.
    decision_function_shape : {{"ovo", "ovr"}}, default="ovr"
        "ovo": libsvm's one-vs-one decision values, shape (n_samples, n_classes (n_classes -
        1) / 2); "ovr": scikit-learn's one-vs-rest form of them (votes plus scaled confidences,
        :func:`sklearn.utils.multiclass._ovr_decision_function`), shape (n_samples, n_classes).
    break_ties : bool, default=False
        With "ovr" and more than two classes, predict the argmax of the decision function
        instead of libsvm's vote (whose ties go to the first class).
    random_state : int, RandomState instance or None, default=None
        Seeds the cross-validation folds of ``probability=True`` (one draw of it per fit, as
        scikit-learn's); ignored otherwise.

    Attributes
    ----------
    class_weight_ : ndarray of shape (n_classes,)
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (a nonzero coefficient in some pair's problem), grouped by
        class, in index order within a class.
    support_vectors_ : ndarray of shape (n_SV, n_features)
        Empty for "precomputed".
    n_support_ : ndarray of shape (n_classes,), dtype=int32
    dual_coef_ : ndarray of shape (n_classes - 1, n_SV)
        libsvm's layout: for the pair (i, j), the coefficients y_t a_t of class i's support
        vectors in row j - 1, those of class j's in row i. For two classes, the signs are
        scikit-learn's (positive decision values mean ``classes_[1]``).
    intercept_ : ndarray of shape (n_classes (n_classes - 1) / 2,)
        -rho of each pair's problem (its sign flipped for two classes).
    n_iter_ : ndarray of shape (n_classes (n_classes - 1) / 2,)
        SMO steps of each problem.
    fit_status_ : int
        0 when every problem (cross-validation folds included) met ``tol``, 1 when
        ``max_iter`` ran out.
    probA_, probB_ : ndarray of shape (n_classes (n_classes - 1) / 2,)
        Platt's A and B of each pair (i, j), i < j: P(class i | i or j) = 1 / (1 + exp(A f +
        B)) for the pair's decision value f in libsvm's sign (positive for class i; for two
        classes, the opposite of :meth:`decision_function`); empty for ``probability=False``.
    shape_fit_ : tuple
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import SVC
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 2))
    >>> y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> SVC(C=10.0, device="cpu").fit(X, y).score(X, y) > 0.9
    True
    """


def _fill(doc):
    kernel = _KERNEL_DOC.format(psd=kernel_list_doc(_PSD),
                                refused=kernel_list_doc(n for n in kernel_names() if n not in _PSD))
    return doc.format(kernel=kernel, common=_COMMON_DOC.format())


class SVC(ClassifierMixin, _BaseSVM):
    __doc__ = _fill(_SVC_DOC)

    def __init__(self, *, C=1.0, kernel="rbf", degree=3, gamma="scale", coef0=0.0,
                 shrinking=True, probability=False, tol=1e-3, cache_size=200, class_weight=None,
                 verbose=False, max_iter=-1, decision_function_shape="ovr", break_ties=False,
                 random_state=None, device="auto"):
        self.C = C
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.shrinking = shrinking
        self.probability = probability
        self.tol = tol
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.verbose = verbose
        self.max_iter = max_iter
        self.decision_function_shape = decision_function_shape
        self.break_ties = break_ties
        self.random_state = random_state
        self.device = device

    def _check_params(self):
        _check_real(self.C, "C", 0.0, infinite=True)
        self._check_common()
        if not isinstance(self.probability, (bool, np.bool_)):
            raise TypeError(f"probability must be True or False; got {self.probability!r}")
        if self.decision_function_shape not in ("ovo", "ovr"):
            raise ValueError(f"decision_function_shape must be 'ovo' or 'ovr'; got "
                             f"{self.decision_function_shape!r}")

    def fit(self, X, y, sample_weight=None):
        """Fit the one-vs-one support vector classifiers.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or (n_samples, n_samples)
            Training data, or the kernel matrix for ``kernel="precomputed"``.
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Per-sample multipliers of C; samples with weight <= 0 are left out, as libsvm does.

        Returns
        -------
        self : SVC
        """
        self._check_params()
        X, y = self._validate_X(X, y)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        classes, y_index = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"The number of classes has to be greater than one; got "
                             f"{len(classes)} class")
        self.classes_ = classes
        self.class_weight_ = compute_class_weight(self.class_weight, classes=classes, y=y)
        weights, keep = self._weights(sample_weight, X)
        if len(np.unique(y_index[keep])) < 2:
            raise ValueError("Invalid input - all samples with positive weights belong to the "
                             "same class.")
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        Xe = op.exact_data(X)
        bound = float(self.C) * weights * self.class_weight_[y_index]
        members = [np.flatnonzero(keep & (y_index == k)) for k in range(len(classes))]
        coef = np.zeros((len(classes), len(y)))  # coef[k, t]: t's coefficient against class k
        results, intercepts, fold_results, prob_a, prob_b = [], [], [], [], []
        if self.probability:  # scikit-learn's seed of libsvm's random numbers
            random = _platt.LibsvmRandom(
                check_random_state(self.random_state).randint(np.iinfo("i").max))
        for i in range(len(classes)):
            for j in range(i + 1, len(classes)):
                idx = np.concatenate([members[i], members[j]])
                sign = np.where(y_index[idx] == i, 1.0, -1.0)
                if self.probability:
                    held_out = functools.partial(self._held_out_decision, op, Xe, idx, sign,
                                                 bound[idx], fold_results)
                    A, B = _platt.cross_validated_sigmoid(sign > 0, held_out, random)
                    prob_a.append(A)
                    prob_b.append(B)
                result = self._solve(op, Xe, idx, -np.ones(len(idx)), sign, bound[idx],
                                     np.zeros(len(idx)))
                a = result.alpha.cpu().numpy()
                coef[j, members[i]] = a[:len(members[i])]
                coef[i, members[j]] = -a[len(members[i]):]
                results.append(result)
                intercepts.append(-result.rho)
        support = np.concatenate([m[np.any(coef[:, m] != 0, axis=0)] for m in members])
        self.n_support_ = np.array([np.isin(m, support).sum() for m in members], dtype=np.int32)
        # row of class k's support vectors for the pair (k, l): l - 1 for l > k, l for l < k
        rows = np.zeros((len(classes) - 1, len(support)))
        start = 0
        for k, count in enumerate(self.n_support_):
            block = support[start:start + count]
            others = [l for l in range(len(classes)) if l != k]
            for row, other in enumerate(others):
                rows[row, start:start + count] = coef[other, block]
            start += count
        self.dual_coef_ = rows
        self.intercept_ = np.array(intercepts)
        self.probA_, self.probB_ = np.array(prob_a), np.array(prob_b)
        if len(classes) == 2:  # scikit-learn's signs: positive means classes_[1]
            self.dual_coef_ = -self.dual_coef_
            self.intercept_ = -self.intercept_
        self._finish(X, support, results, fold_results)
        return self

    def _held_out_decision(self, op, Xe, rows, sign, bound, fold_results, train, test):
        """Decision values (positive for sign +1) of the pair's samples ``rows[test]`` from its
        machine fitted on ``rows[train]`` with the same bounds, libsvm's per-class C (its
        solver result appended to ``fold_results``)."""
        result = self._solve(op, Xe, rows[train], -np.ones(len(train)), sign[train],
                             bound[train], np.zeros(len(train)))
        fold_results.append(result)
        coef = sign[train] * result.alpha.cpu().numpy()
        support = coef != 0
        kernel = op.block(op.take(Xe, rows[test]), op.take(Xe, rows[train][support]))
        return kernel.cpu().numpy() @ coef[support] - result.rho

    def _pair_coefficients(self):
        """One row per pair (i, j), i < j, over all support vectors (zeros outside classes i
        and j); for two classes ``dual_coef_`` itself."""
        if len(self.classes_) == 2:
            return self.dual_coef_
        bounds = np.concatenate([[0], np.cumsum(self.n_support_)])
        out = []
        for i in range(len(self.classes_)):
            for j in range(i + 1, len(self.classes_)):
                row = np.zeros(bounds[-1])
                row[bounds[i]:bounds[i + 1]] = self.dual_coef_[j - 1, bounds[i]:bounds[i + 1]]
                row[bounds[j]:bounds[j + 1]] = self.dual_coef_[i, bounds[j]:bounds[j + 1]]
                out.append(row)
        return np.array(out)

    def decision_function(self, X):
        """Decision values.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,) for two classes, else (n_samples, n_classes) ("ovr") or
        (n_samples, n_classes (n_classes - 1) / 2) ("ovo")
        """
        dec = self._decision(X)
        if len(self.classes_) == 2:
            return dec[:, 0]
        if self.decision_function_shape == "ovr":
            return _ovr_decision_function(dec < 0, -dec, len(self.classes_))
        return dec

    def predict(self, X):
        """Class labels: libsvm's one-vs-one vote (ties to the first class), or the argmax of
        the "ovr" decision function with ``break_ties``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        if self.break_ties and self.decision_function_shape == "ovo":
            raise ValueError("break_ties must be False when decision_function_shape is 'ovo'")
        dec = self._decision(X)
        n_classes = len(self.classes_)
        if n_classes == 2:
            return self.classes_[(dec[:, 0] >= 0).astype(int)]
        if self.break_ties and self.decision_function_shape == "ovr":
            return self.classes_[np.argmax(_ovr_decision_function(dec < 0, -dec, n_classes),
                                           axis=1)]
        votes = np.zeros((dec.shape[0], n_classes), dtype=int)
        pair = 0
        for i in range(n_classes):
            for j in range(i + 1, n_classes):
                winner = np.where(dec[:, pair] > 0, i, j)
                np.add.at(votes, (np.arange(dec.shape[0]), winner), 1)
                pair += 1
        return self.classes_[np.argmax(votes, axis=1)]

    def _check_proba(self):
        if not self.probability:
            raise AttributeError("predict_proba is not available when probability=False")
        return True

    @available_if(_check_proba)
    def predict_proba(self, X):
        """Class probabilities: libsvm's pairwise coupling of each pair's Platt sigmoid (clipped
        to [1e-7, 1 - 1e-7]).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``. The sigmoids were fitted on cross-validated
            decision values, so the most probable class may differ from :meth:`predict`.
        """
        check_is_fitted(self)
        if self.probA_.size == 0:
            raise NotFittedError("predict_proba is not available when fitted with "
                                 "probability=False")
        dec = self._decision(X)
        if len(self.classes_) == 2:
            dec = -dec  # libsvm's sign: positive means classes_[0]
        pair = np.clip(_platt.sigmoid_predict(dec, self.probA_, self.probB_), _platt.MIN_PROB,
                       1 - _platt.MIN_PROB)
        k = len(self.classes_)
        i, j = np.triu_indices(k, 1)  # the pairs (i, j), i < j, in the order of the columns
        r = np.zeros((len(dec), k, k))
        r[:, i, j] = pair
        r[:, j, i] = 1 - pair
        return _platt.pairwise_coupling(r)

    @available_if(_check_proba)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_training_samples)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))


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
        Accepted for scikit-learn compatibility; the solver does not shrink.
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
        _check_real(self.C, "C", 0.0, infinite=True)
        _check_real(self.epsilon, "epsilon", 0.0, closed=True)
        self._check_common()
        X, y = self._validate_X(X, y)
        y = column_or_1d(y, warn=True).astype(np.float64)
        weights, keep = self._weights(sample_weight, X)
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        idx = np.flatnonzero(keep)
        n = len(idx)
        eps, target = float(self.epsilon), y[idx]
        bound = np.tile(float(self.C) * weights[idx], 2)
        result = self._solve(op, op.exact_data(X), idx,
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
        Accepted for scikit-learn compatibility; the solver does not shrink.
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
        nu = _check_real(self.nu, "nu", 0.0)
        if nu > 1:
            raise ValueError(f"nu must be in (0, 1]; got {self.nu!r}")
        self._check_common()
        X, _ = self._validate_X(X)
        weights, keep = self._weights(sample_weight, X)
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        idx = np.flatnonzero(keep)
        bound = weights[idx]
        # libsvm's start: a_t = min(w_t, what is left of nu sum(w)), in order
        left = nu * bound.sum() - np.concatenate([[0.0], np.cumsum(bound)[:-1]])
        alpha = np.clip(np.minimum(bound, left), 0.0, None)
        result = self._solve(op, op.exact_data(X), idx, np.zeros(len(idx)), np.ones(len(idx)),
                             bound, alpha)
        a = result.alpha.cpu().numpy()
        nonzero = a != 0
        self.dual_coef_ = a[nonzero][None, :]
        self.intercept_ = np.array([-result.rho])
        self.offset_ = result.rho
        self.n_support_ = np.array([nonzero.sum()], dtype=np.int32)
        self._finish(X, idx[nonzero], [result])
        return self

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
