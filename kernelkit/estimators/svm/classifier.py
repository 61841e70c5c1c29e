"""C-support vector classification: :class:`SVC` (one-vs-one multiclass, Platt scaling)."""

from __future__ import annotations

import functools

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import _ovr_decision_function, check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from kernelkit import distributed
from kernelkit.estimators import _platt
from kernelkit.estimators.svm._base import _BaseSVM, _check_real, _fill

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
        Shrink as libsvm does: after every outer step of the solver, set aside the variables
        stuck at a bound (:mod:`kernelkit.linalg.smo`); the stopping rule is checked on the
        whole problem either way, so the answer meets the same ``tol``.
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
        scikit-learn's; under a process group rank 0's draw); ignored otherwise.

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
        # under a process group: checked on every rank, errors shared (kernelkit.distributed)
        X, y, y_index, weights, keep = self._checked(self._fit_inputs, X=X, y=y,
                                                     sample_weight=sample_weight)
        classes = self.classes_
        self._gamma = self._gamma_value(X)
        op = self._operator(X)
        Xe = op.exact_data(X) if self.probability else None  # the held-out decision values
        bound = float(self.C) * weights * self.class_weight_[y_index]
        members = [np.flatnonzero(keep & (y_index == k)) for k in range(len(classes))]
        coef = np.zeros((len(classes), len(y)))  # coef[k, t]: t's coefficient against class k
        results, intercepts, fold_results, prob_a, prob_b = [], [], [], [], []
        if self.probability:  # scikit-learn's seed of libsvm's random numbers
            seed = check_random_state(self.random_state).randint(np.iinfo("i").max)
            # under a process group rank 0's (random_state=None draws another on each rank)
            random = _platt.LibsvmRandom(distributed.rank0_decision(int, seed))
        for i in range(len(classes)):
            for j in range(i + 1, len(classes)):
                idx = np.concatenate([members[i], members[j]])
                sign = np.where(y_index[idx] == i, 1.0, -1.0)
                if self.probability:
                    held_out = functools.partial(self._held_out_decision, op, X, Xe, idx, sign,
                                                 bound[idx], fold_results)
                    A, B = _platt.cross_validated_sigmoid(sign > 0, held_out, random)
                    prob_a.append(A)
                    prob_b.append(B)
                result = self._solve(op, X, idx, -np.ones(len(idx)), sign, bound[idx],
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

    def _fit_inputs(self, X, y, sample_weight):
        """The checked parameters and data of ``fit``: X, y, the class of each sample, the
        sample weights and the mask of samples trained on; sets ``classes_`` and
        ``class_weight_``."""
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
        return X, y, y_index, weights, keep

    def _held_out_decision(self, op, X, Xe, rows, sign, bound, fold_results, train, test):
        """Decision values (positive for sign +1) of the pair's samples ``rows[test]`` from its
        machine fitted on ``rows[train]`` with the same bounds, libsvm's per-class C (its
        solver result appended to ``fold_results``; ``Xe``: X as the operator's float64
        operand)."""
        result = self._solve(op, X, rows[train], -np.ones(len(train)), sign[train],
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
