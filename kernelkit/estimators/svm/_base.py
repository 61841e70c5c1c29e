"""The shared part of kernelkit's support vector machines (:mod:`kernelkit.estimators.svm`):
parameters and their checks, the kernel operator, one call of the batched SMO solver
(:func:`kernelkit.linalg.smo.solve`), the fitted attributes and the decision values; and the
docstring parts the three estimators share.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, is_classifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from kernelkit import distributed
from kernelkit._util.device import check_device, resolve_device
from kernelkit.estimators import _ridge_checks
from kernelkit_math.registry import kernel_list_doc, kernel_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

_PSD = _ridge_checks.PSD_KERNELS

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
        the gradient and every reduction are float64 on both devices. Under a
        ``torch.distributed`` process group every rank calls ``fit`` with the same arguments and
        gets the single process's fit; the solver's kernel points are sharded over the ranks
        (:mod:`kernelkit.linalg.smo_sharded`, docs/distributed.md)."""


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
            _ridge_checks.psd_kernel_spec(
                self.kernel, ", so the SVM's dual is not convex and the SMO solver may stop at a "
                "point that is not its minimum")
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
        if not isinstance(self.shrinking, (bool, np.bool_)):
            raise TypeError(f"shrinking must be True or False; got {self.shrinking!r}")
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

    def _checked(self, validate, X, **arguments):
        """``validate(X=X, **arguments)``, the checks of ``fit``'s arguments; under a process
        group run on every rank (an error on one is raised on every rank) and followed by the
        comparison of the arguments and parameters across ranks
        (:func:`kernelkit.distributed.checked`). A sparse X is made dense first, as KernelRidge
        does: the comparison reads its values."""
        return distributed.checked(f"{type(self).__name__}.fit", self, validate,
                                   X=_ridge_checks.dense(X), **arguments)

    def _solve(self, op, X, points, p, y, C, alpha, index=None):
        """Run the SMO solver over the training points X[points]; returns the result. Their
        kernel rows come from
        :meth:`~kernelkit.operators.kernel_operator.KernelOperator.rows_of` (the points prepared
        once, kept on the device beside the solver's memory or streamed there). Under a process
        group the kernel points are sharded over the ranks
        (:mod:`kernelkit.linalg.smo_sharded`), each rank's columns of the rows computed by
        ``op.block`` per request."""
        import torch

        from kernelkit.linalg import smo

        working_set = smo.WORKING_SET
        cache_bytes = int(self.cache_size * 2**20)
        if distributed.active():  # a process group (kernelkit.distributed)
            from kernelkit.linalg import smo_sharded

            solve = smo_sharded.solve
            Pe = op.take(op.exact_data(X), points)

            def rows(indices, lo=0, hi=None):
                """K[indices, lo:hi] over the training points (every column by default)."""
                return op.block(op.take(Pe, indices.cpu().numpy()), Pe[lo:hi]).to(
                    torch.float64)
        else:
            solve = smo.solve
            held = smo.held_bytes(len(points), len(p), cache_bytes, working_set)
            rows = op.rows_of(X, points, reserve_bytes=held)

        def as_tensor(values):
            return torch.as_tensor(np.asarray(values, dtype=np.float64), device=op.device)

        index = None if index is None else torch.as_tensor(index, device=op.device)
        return solve(rows, as_tensor(p), as_tensor(y), as_tensor(C), as_tensor(alpha),
                     index=index, tol=float(self.tol), max_iter=int(self.max_iter),
                     working_set=working_set, cache_bytes=cache_bytes,
                     shrinking=bool(self.shrinking))

    def _finish(self, X, support, results, fold_results=()):
        """Store what every SVM stores; warn where a solver (of ``results``, or of
        ``fold_results``: SVC's cross-validation folds) ran out of ``max_iter``."""
        self.support_ = np.asarray(support, dtype=np.int32)
        self.support_vectors_ = (np.empty((0, 0)) if self._precomputed
                                 else X[self.support_].copy())
        self.shape_fit_ = X.shape
        self.fit_status_ = int(not all(r.converged for r in [*results, *fold_results]))
        self.n_iter_ = (np.array([r.n_iter for r in results], dtype=np.int32)
                        if is_classifier(self) else results[0].n_iter)
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


def _fill(doc):
    kernel = _KERNEL_DOC.format(psd=kernel_list_doc(_PSD),
                                refused=kernel_list_doc(n for n in kernel_names() if n not in _PSD))
    return doc.format(kernel=kernel, common=_COMMON_DOC.format())
