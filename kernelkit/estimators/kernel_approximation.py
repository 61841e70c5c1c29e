"""Kernel approximation transformers, scikit-learn's API on the CPU and the GPU:
:class:`Nystroem` (features from landmark rows, their kernel products through
:class:`~kernelkit.operators.kernel_operator.KernelOperator`) and :class:`RBFSampler` (random
Fourier features, computed with torch on the device).

Both take NumPy arrays (and anything scikit-learn takes) or torch tensors: NumPy in, NumPy out;
a tensor in, a tensor out on the tensor's device. Fitted attributes are NumPy arrays. This
module imports NumPy and scikit-learn only; torch loads on the first ``fit``.
"""

from __future__ import annotations

import numbers
import sys
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils import check_random_state
from sklearn.utils.validation import (
    _check_feature_names,
    _check_n_features,
    check_array,
    check_is_fitted,
)

from kernelkit._util.device import check_device, resolve_device
from kernelkit.estimators import _ridge_checks
from kernelkit_math.registry import fill_doc, kernel_list_doc, kernel_names

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)

__all__ = ["Nystroem", "RBFSampler"]

LANDMARKS = ("uniform", "kmeans++", "leverage")
#: Smallest singular value of K_mm kept by ``normalization_`` (scikit-learn's clip).
SINGULAR_FLOOR = 1e-12
#: Output values (float64 before the cast to the output's dtype) of one row chunk of
#: ``Nystroem.transform``: 1 GiB, so 10^6 rows of 10^4 features never need more at once.
TRANSFORM_BLOCK_ELEMENTS = 2**27

_PSD = _ridge_checks.PSD_KERNELS


# ----------------------------------------------------------------------------- inputs/outputs
def _is_tensor(X):
    """``X`` is a torch tensor (checked without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def _check_X(estimator, X, *, reset):
    """``X`` checked as scikit-learn checks it: a 2-D float64 or float32 NumPy array (sparse
    matrices made dense, other dtypes as float64), or a torch tensor of the same kinds left on
    its device; finite, at least one row, ``n_features_in_`` columns when not ``reset``."""
    if not _is_tensor(X):
        return _validate_data(estimator, _ridge_checks.dense(X), dtype=[np.float64, np.float32],
                              reset=reset)
    import torch

    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D tensor X of shape (n_samples, n_features); got shape "
                         f"{tuple(X.shape)}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must have at least one sample and one feature; got shape "
                         f"{tuple(X.shape)}")
    if X.dtype not in (torch.float32, torch.float64):
        X = X.to(torch.float64)
    if not bool(torch.isfinite(X).all()):
        raise ValueError("Input X contains NaN or infinity.")
    _check_n_features(estimator, X, reset=reset)
    _check_feature_names(estimator, X, reset=reset)
    return X


def _as_numpy(X):
    """A NumPy copy of tensor ``X`` (NumPy arrays as they are)."""
    return X.detach().cpu().numpy() if _is_tensor(X) else X


def _to_tensor(X, device, dtype=None):
    """NumPy array or tensor ``X`` as a tensor on ``device`` (in ``dtype``), ``X`` only read."""
    import torch

    if not _is_tensor(X):
        with warnings.catch_warnings():  # read-only arrays: the tensor is never written
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            X = torch.from_numpy(np.asarray(X))
    return X.to(device=device, dtype=dtype)


def _output(Y, like, dtype):
    """Result tensor ``Y`` in the form of input ``like``: a tensor on its device, else NumPy;
    in NumPy ``dtype``."""
    import torch

    if _is_tensor(like):
        return Y.to(device=like.device, dtype=getattr(torch, np.dtype(dtype).name))
    return Y.cpu().numpy().astype(dtype, copy=False)


def _operand(op, X, *, exact=False):
    """Input ``X`` (NumPy or tensor) as an operand of ``op``: :meth:`~KernelOperator.data` or,
    ``exact``, :meth:`~KernelOperator.exact_data`."""
    if _is_tensor(X) and op.triton:
        import torch

        A = X.detach().to(device=op.device, dtype=torch.float64 if exact else torch.float32)
        if not bool(torch.isfinite(A).all()):
            raise ValueError("X holds values beyond the float32 range (|x| > 3.4e38) that the "
                             "GPU kernels compute in; rescale the data")
        return A.contiguous()
    return (op.exact_data if exact else op.data)(_as_numpy(X))


def _check_n_components(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"n_components must be an integer >= 1; got {value!r}")
    if value < 1:
        raise ValueError(f"n_components must be an integer >= 1; got {value!r}")
    return int(value)


# --------------------------------------------------------------------------------- RBFSampler
class RBFSampler(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    r"""Random Fourier features of the RBF kernel, as :class:`sklearn.kernel_approximation.RBFSampler`.

    .. math::

        z(x) = \sqrt{2 / D}\, \cos(x W + b), \qquad W_{ij} \sim N(0, 2\gamma),\;
        b_j \sim U[0, 2\pi),

    so that :math:`z(x) \cdot z(y) \approx \exp(-\gamma \|x - y\|^2)` (Rahimi and Recht, 2007).
    ``W`` and ``b`` are drawn exactly as scikit-learn draws them (``random_state.normal`` then
    ``random_state.uniform``): with the same ``random_state`` they are identical, and the
    float64 features equal scikit-learn's to rounding. ``transform`` runs with torch on
    ``device``.

    Parameters
    ----------
    gamma : "scale" or float, default=1.0
        RBF parameter, >= 0. "scale": 1 / (n_features X.var()) of the training data (1 where
        that variance is 0), as scikit-learn.
    n_components : int, default=100
        Number D of random features (>= 1).
    random_state : int, RandomState instance or None, default=None
        Draws ``random_weights_`` and ``random_offset_``.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where ``transform`` computes: "auto" is the GPU when one is present. The features are
        computed in the promoted dtype of X and the weights (float32 only where both are).

    Attributes
    ----------
    random_weights_ : ndarray of shape (n_features, n_components)
        W, float32 where X was float32 at ``fit`` (as scikit-learn), else float64.
    random_offset_ : ndarray of shape (n_components,)
        b, in the dtype of ``random_weights_``.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names (a pandas DataFrame).

    See Also
    --------
    sklearn.kernel_approximation.RBFSampler : the NumPy transformer this one reproduces.
    Nystroem : features from landmark rows, for any positive semi-definite kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import RBFSampler
    >>> X = np.random.default_rng(0).normal(size=(50, 3))
    >>> Z = RBFSampler(gamma=0.5, n_components=2000, random_state=0, device="cpu").fit_transform(X)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.abs(Z @ Z.T - K).max() < 0.2)
    True
    """

    def __init__(self, *, gamma=1.0, n_components=100, random_state=None, device="auto"):
        self.gamma = gamma
        self.n_components = n_components
        self.random_state = random_state
        self.device = device

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # made dense
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _check_params(self):
        gamma = self.gamma
        if not (isinstance(gamma, str) and gamma == "scale"):
            if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
                raise TypeError(f"gamma must be 'scale' or a real number >= 0; got {gamma!r}")
            if not np.isfinite(gamma) or gamma < 0:
                raise ValueError(f"gamma must be 'scale' or a real number >= 0; got {gamma!r}")
        check_device(self.device)
        return _check_n_components(self.n_components)

    def fit(self, X, y=None):
        """Draw the random weights and offsets for the features of X.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Training data (only its number of features, its dtype and, for ``gamma="scale"``,
            its variance are used).
        y : None
            Ignored.

        Returns
        -------
        self : RBFSampler
        """
        n_components = self._check_params()
        X = _check_X(self, X, reset=True)
        rng = check_random_state(self.random_state)
        n_features = X.shape[1]
        if self.gamma == "scale":
            variance = float(X.var(unbiased=False) if _is_tensor(X) else X.var())
            self._gamma = 1.0 / (n_features * variance) if variance != 0 else 1.0
        else:
            self._gamma = float(self.gamma)
        weights = (2.0 * self._gamma) ** 0.5 * rng.normal(size=(n_features, n_components))
        offset = rng.uniform(0, 2 * np.pi, size=n_components)
        dtype = np.float32 if str(X.dtype).endswith("float32") else np.float64
        self.random_weights_ = weights.astype(dtype, copy=False)
        self.random_offset_ = offset.astype(dtype, copy=False)
        self._n_features_out = n_components
        return self

    def transform(self, X):
        """The random Fourier features of X.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or torch.Tensor of shape (n_samples, n_components)
            A tensor on X's device for a tensor X, else a NumPy array; float32 where X and
            ``random_weights_`` are float32, else float64.
        """
        check_is_fitted(self)
        X = _check_X(self, X, reset=False)
        where = resolve_device(self.device)
        dtype = np.result_type(str(X.dtype).replace("torch.", ""), self.random_weights_.dtype)
        import torch

        tdtype = getattr(torch, dtype.name)
        P = _to_tensor(X, where, tdtype) @ _to_tensor(self.random_weights_, where, tdtype)
        P += _to_tensor(self.random_offset_, where, tdtype)
        torch.cos(P, out=P)
        P *= (2.0 / self.random_weights_.shape[1]) ** 0.5
        return _output(P, X, dtype)


# ----------------------------------------------------------------------------------- Nystroem
@fill_doc(psd=kernel_list_doc(_PSD),
          refused=kernel_list_doc(n for n in kernel_names() if n not in _PSD))
class Nystroem(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    r"""Nyström features of a kernel, as :class:`sklearn.kernel_approximation.Nystroem`.

    With m landmarks Z (``components_``),

    .. math::

        \phi(x) = K(x, Z)\, K_{ZZ}^{-1/2}, \qquad \phi(x) \cdot \phi(y) =
        K(x, Z) K_{ZZ}^{+} K(Z, y) \approx k(x, y),

    where :math:`K_{ZZ}^{-1/2}` (``normalization_``) is formed as scikit-learn forms it, from
    the SVD :math:`K_{ZZ} = U S V^T` with singular values clipped at :data:`SINGULAR_FLOOR`:
    :math:`U S^{-1/2} V^T`. With the default uniform landmarks and the same ``random_state``,
    the landmarks are scikit-learn's (the same ``permutation`` draw) and, on the CPU, the
    features equal scikit-learn's to float64 rounding. The kernel products K(X, Z) run through
    :class:`~kernelkit.operators.kernel_operator.KernelOperator` in row blocks of at most its
    ``block_bytes``: float64 on the CPU, the Triton kernels (float32 products) on the GPU.

    Parameters
    ----------
    kernel : str or kernel object, default="rbf"
        A registry name of a positive semi-definite kernel, {psd} (``"poly"`` for
        ``"polynomial"``); ``"precomputed"`` (X is the n x n kernel matrix at ``fit`` and
        K(test, train) at ``transform``; CPU, float64); or a kernel object, as
        :class:`kernelkit.KernelRidge` takes them (kernelkit's and scikit-learn's kernel
        classes, their sums, products and powers, at their own parameter values).
        ``K_ZZ^{-1/2}`` needs a positive semi-definite kernel, so the others ({refused}) are
        refused, and so are the kernels outside the registry (scikit-learn's "chi2",
        "additive_chi2") and Python callables (the products run on the registry's formulas).
    gamma : float or None, default=None
        For the kernels that have one; None is the kernel's default (1 / n_features for rbf,
        laplacian and polynomial). Not allowed with a kernel object or "precomputed".
    coef0 : float or None, default=None
        Polynomial constant; None is the registry default (1). As ``gamma`` otherwise.
    degree : int or None, default=None
        Polynomial degree (an integer); None is the registry default (3). As ``gamma``
        otherwise.
    kernel_params : dict or None, default=None
        Further registry parameters of a named kernel (``{"nu": 2.5}`` for "matern"); they
        override gamma, degree and coef0.
    n_components : int, default=100
        Number m of landmarks, at most n_samples: where it is more, all n rows are used with
        scikit-learn's warning. Ignored where ``landmarks`` is an array.
    random_state : int, RandomState instance or None, default=None
        Draws the landmarks.
    n_jobs : int or None, default=None
        Accepted for scikit-learn compatibility; unused (the products are one operator's).
    landmarks : {"uniform", "kmeans++", "leverage"}, array-like or None, default=None
        How the landmarks are chosen. None or "uniform": ``n_components`` training rows drawn
        uniformly without replacement, scikit-learn's ``random_state.permutation(n)``.
        "kmeans++": k-means++ seeding on X (:func:`sklearn.cluster.kmeans_plusplus`, float64
        squared distances, from ``random_state``). "leverage": sampled without replacement with
        probabilities proportional to approximate ridge leverage scores from a uniform pilot S
        of ``n_components`` rows, :math:`k(x_i, x_i) - K_{iS}(K_{SS} + \lambda I)^{-1} K_{Si}`
        with :math:`\lambda` the mean of :math:`k(x_i, x_i)` (Alaoui and Mahoney, 2015; on the
        whole data that is the ridge tr(K) / m, at which the effective dimension is at most m).
        An array of shape
        (n_landmarks, n_features): those rows (then ``n_components`` is their count and
        ``component_indices_`` is not set). "kmeans++" and arrays are not for "precomputed".
    device : {"auto", "cpu", "cuda"}, default="auto"
        "auto" is the GPU when one is present. On the GPU, K(X, Z) is computed from float32
        kernel products (:func:`kernelkit_gpu.kernel_matvec` or :func:`kernelkit_gpu.gram`) and
        K_ZZ in float64; on the CPU everything is float64.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The landmarks Z (for "precomputed": K's rows of the landmarks), in X's dtype.
    component_indices_ : ndarray of shape (n_components,)
        Row indices of the landmarks in the training data (not set for an array of
        ``landmarks``).
    normalization_ : ndarray of shape (n_components, n_components)
        :math:`K_{ZZ}^{-1/2}` as above, float64 (computed and kept in float64 whatever X's
        dtype; scikit-learn keeps it in X's dtype).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names (a pandas DataFrame).

    Raises
    ------
    ValueError, TypeError
        At ``fit``, for parameters out of range or of the wrong type, a kernel that is not
        positive semi-definite, a callable kernel, NaN or infinity in X, landmarks of the wrong
        shape; at ``transform``, for data with the wrong number of features.

    See Also
    --------
    sklearn.kernel_approximation.Nystroem : the NumPy transformer this one reproduces.
    RBFSampler : random Fourier features of the RBF kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit import Nystroem
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> features = Nystroem(gamma=0.5, n_components=200, random_state=0, device="cpu")
    >>> Z = features.fit_transform(X)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.abs(Z @ Z.T - K).max() < 1e-6)
    True
    """

    def __init__(self, kernel="rbf", *, gamma=None, coef0=None, degree=None, kernel_params=None,
                 n_components=100, random_state=None, n_jobs=None, landmarks=None,
                 device="auto"):
        self.kernel = kernel
        self.gamma = gamma
        self.coef0 = coef0
        self.degree = degree
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.landmarks = landmarks
        self.device = device

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # made dense
        tags.input_tags.pairwise = self._precomputed()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    # ---------------------------------------------------------------------------- checks
    def _precomputed(self):
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    def _check_params(self):
        n_components = _check_n_components(self.n_components)
        if self.n_jobs is not None and (isinstance(self.n_jobs, bool)
                                        or not isinstance(self.n_jobs, numbers.Integral)):
            raise TypeError(f"n_jobs must be an integer or None; got {self.n_jobs!r}")
        landmarks = self.landmarks
        if isinstance(landmarks, str) and landmarks not in LANDMARKS:
            raise ValueError(f"landmarks must be one of {', '.join(map(repr, LANDMARKS))}, None "
                             f"or an array of rows; got {landmarks!r}")
        if self._precomputed() and not (landmarks is None
                                        or isinstance(landmarks, str) and landmarks != "kmeans++"):
            raise ValueError("kernel='precomputed' takes landmarks=None, 'uniform' or "
                             f"'leverage' (it has no features to place others); got {landmarks!r}")
        check_device(self.device)
        return n_components

    def _kernel(self, n_features):
        """The ``kernel`` parameter as a kernel tree (:mod:`kernelkit.operators.kernel_tree`),
        or None for "precomputed"; a kernel that is not positive semi-definite is refused."""
        kernel = self.kernel
        given = {"gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}
        if isinstance(kernel, Kernel) or self._precomputed():
            if any(value is not None for value in given.values()):
                raise ValueError("Don't pass gamma, coef0 or degree to Nystroem with a kernel "
                                 "object or a precomputed kernel (set them on the kernel object)")
        elif isinstance(kernel, str):
            spec = _ridge_checks.psd_kernel_spec(
                kernel, ", so its landmark matrix K_mm can have negative eigenvalues and "
                "Nystroem's normalization_ K_mm^(-1/2) does not exist")
            defaults = {p.name: p.default for p in spec.params}
            given = {k: defaults.get(k) if v is None else v for k, v in given.items()}
        return _ridge_checks.kernel_structure(kernel, n_features, kernel_params=self.kernel_params,
                                              **given)

    @staticmethod
    def _operator(structure, K, where):
        """The kernel operator of ``structure`` on ``where``; for "precomputed" (None) the
        operator of the kernel matrix ``K`` (NumPy or tensor)."""
        from kernelkit.operators import kernel_operator

        if structure is None:
            return kernel_operator.PrecomputedOperator(
                np.ascontiguousarray(_as_numpy(K), dtype=np.float64))
        return kernel_operator.KernelOperator(structure, where=where)

    # ------------------------------------------------------------------------------- fit
    def fit(self, X, y=None):
        """Choose the landmarks and compute ``normalization_``.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Training data (a sparse matrix is made dense), or the n x n kernel matrix for
            ``kernel="precomputed"``.
        y : None
            Ignored.

        Returns
        -------
        self : Nystroem
        """
        n_components = self._check_params()
        X = _check_X(self, X, reset=True)
        n, n_features = X.shape
        structure = self._kernel(n_features)
        if structure is None and n != n_features:
            raise ValueError(f"kernel='precomputed' takes X as the square kernel matrix of the "
                             f"training samples; got X of shape {tuple(X.shape)}")
        op = self._operator(structure, X, "cpu" if structure is None else
                            resolve_device(self.device))
        rng = check_random_state(self.random_state)
        if isinstance(self.landmarks, str) or self.landmarks is None:
            if n_components > n:
                warnings.warn("n_components > n_samples. This is not possible.\nn_components was "
                              "set to n_samples, which results in inefficient evaluation of the "
                              "full kernel.", stacklevel=2)
            idx = self._choose(op, X, min(n_components, n), rng)
            self.components_ = _as_numpy(X[_index(idx, X)])
            self.component_indices_ = idx
            Z = op.take(_operand(op, X, exact=True), idx)
        else:
            if hasattr(self, "component_indices_"):
                del self.component_indices_
            self.components_ = self._user_landmarks(n_features)
            Z = op.exact_data(self.components_)
        self.normalization_ = _inverse_sqrt(op.block(Z))
        self._n_features_out = len(self.normalization_)
        return self

    def _choose(self, op, X, m, rng):
        """Row indices of ``m`` landmarks of X drawn from ``rng`` as ``landmarks`` says."""
        n = X.shape[0]
        if self.landmarks in (None, "uniform"):
            return rng.permutation(n)[:m]
        if self.landmarks == "kmeans++":
            from sklearn.cluster import kmeans_plusplus

            data = np.asarray(_as_numpy(X), dtype=np.float64)
            return kmeans_plusplus(data, m, random_state=rng)[1]
        return _leverage_landmarks(op, _operand(op, X), _operand(op, X, exact=True), m, rng)

    def _user_landmarks(self, n_features):
        """The ``landmarks`` array checked: 2-D, finite, ``n_features`` columns."""
        landmarks = _as_numpy(self.landmarks)
        try:
            Z = check_array(landmarks, dtype=[np.float64, np.float32], input_name="landmarks")
        except ValueError as exc:
            raise ValueError(f"landmarks: {exc}") from None
        if Z.shape[1] != n_features:
            raise ValueError(f"landmarks must have the n_features={n_features} columns of X; got "
                             f"shape {Z.shape}")
        return Z.copy()

    # ------------------------------------------------------------------------- transform
    def transform(self, X):
        """The Nyström features K(X, Z) ``normalization_.T``.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Or K(X, X_train), shape (n_samples, n_training_samples), for
            ``kernel="precomputed"``.

        Returns
        -------
        ndarray or torch.Tensor of shape (n_samples, n_components)
            A tensor on X's device for a tensor X, else a NumPy array; float32 where X and
            ``components_`` are float32, else float64.
        """
        check_is_fitted(self)
        X = _check_X(self, X, reset=False)
        structure = self._kernel(self.n_features_in_)
        op = self._operator(structure, X, "cpu" if structure is None else
                            resolve_device(self.device))
        V = op.vectors(self.normalization_.T)
        landmarks = None if structure is None else op.data(self.components_)
        dtype = np.result_type(str(X.dtype).replace("torch.", ""), self.components_.dtype)
        out = None
        step = max(1, TRANSFORM_BLOCK_ELEMENTS // V.shape[1])
        for lo in range(0, X.shape[0], step):
            if structure is None:  # X = K(test, train): its columns of the landmarks
                part = op.matmul(op.data(X[lo:lo + step]), self.component_indices_, V)
            else:
                part = op.matmul(_operand(op, X[lo:lo + step]), landmarks, V)
            part = _output(part, X, dtype)
            if out is None:
                out = (part.new_empty((X.shape[0], part.shape[1])) if _is_tensor(part)
                       else np.empty((X.shape[0], part.shape[1]), dtype=part.dtype))
            out[lo:lo + step] = part
        return out


def _inverse_sqrt(K_mm):
    """scikit-learn's ``normalization_`` U S^-1/2 V^T of the SVD of the float64 kernel block
    ``K_mm`` (singular values clipped at :data:`SINGULAR_FLOOR`), as a NumPy array: NumPy's SVD
    on the CPU, to scikit-learn's rounding; on the GPU the same matrix from a float64 ``eigh``
    on the device (a symmetric K_mm = Q diag(w) Q^T has U = Q, S = |w|, V^T = sign(w) Q^T),
    seconds where the host SVD of M = 10^4 takes minutes."""
    import torch

    if not K_mm.is_cuda:
        U, S, Vt = np.linalg.svd(K_mm.cpu().numpy())
        return U / np.sqrt(np.clip(S, SINGULAR_FLOOR, None)) @ Vt
    w, Q = torch.linalg.eigh(K_mm)
    scale = torch.where(w < 0, -1.0, 1.0) / torch.sqrt(w.abs().clamp(min=SINGULAR_FLOOR))
    return ((Q * scale) @ Q.T).cpu().numpy()


def _index(idx, X):
    """NumPy row indices ``idx`` in the form that indexes ``X`` (a tensor's on its device)."""
    if _is_tensor(X):
        import torch

        return torch.as_tensor(idx, device=X.device)
    return idx


def _leverage_landmarks(op, data, exact, m, rng):
    """``m`` row indices drawn without replacement with probabilities proportional to
    :func:`_leverage_scores` from a uniform pilot of ``m`` rows (``data`` / ``exact``: the rows
    as ``op``'s operands)."""
    n = len(data)
    scores = _leverage_scores(op, data, exact, rng.permutation(n)[:m])
    # rounding (float32 products on the GPU) can leave a score at or below 0: every row keeps a
    # chance, so m distinct rows can always be drawn
    scores = np.clip(scores, np.finfo(np.float64).eps * scores.max(), None)
    return rng.choice(n, size=m, replace=False, p=scores / scores.sum())


def _leverage_scores(op, data, exact, pilot):
    """Approximate ridge leverage scores, up to one factor, from the rows ``pilot``:
    k(x_i, x_i) - K_iS (K_SS + lambda I)^-1 K_Si with lambda the mean of k(x_i, x_i), a NumPy
    float64 array of shape (n,). On the whole data that is lambda = tr(K) / m for m pilot rows
    (scaled by n / m), where the effective dimension tr K (K + lambda I)^-1 is at most m."""
    import torch

    scores = op.diag(exact).clone()
    ridge = float(scores.mean())
    K_ss = op.block(op.take(exact, pilot))
    eye = torch.eye(len(pilot), dtype=K_ss.dtype, device=K_ss.device)
    L = torch.linalg.cholesky(K_ss + ridge * eye)
    for lo, hi, block in op.row_blocks(data, op.take(data, pilot)):
        W = torch.linalg.solve_triangular(L, block.to(torch.float64).T, upper=False)
        scores[lo:hi] -= (W * W).sum(dim=0)
    return scores.cpu().numpy()
