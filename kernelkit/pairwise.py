"""Pairwise kernel functions with scikit-learn's signatures, computed without losing digits.

Each function mirrors its namesake in :mod:`sklearn.metrics.pairwise` (same positional
arguments, names and defaults) and adds one keyword-only argument, ``device="auto"``, so a
scikit-learn user can switch imports::

    from sklearn.metrics.pairwise import rbf_kernel   # before
    from kernelkit.pairwise import rbf_kernel         # after

What differs from scikit-learn:

- On the CPU every value is computed by the float64 reference of the kernel registry
  (:mod:`kernelkit_math.registry`), with direct differences for distances. Float32 input is
  upcast for the computation and the result rounded once to float32, so each float32 entry is
  the correctly rounded value of the float64 result on the same data, even for data far from
  the origin (offset 1000) or nearly duplicate points. On a GPU, :func:`kernelkit_gpu.gram`
  computes float64 data in float64 and float32 data in float32 with split-precision tensor-core
  products (relative error about 1e-7); each function's Notes give the details.
- Input is validated up front with messages that name the argument; sparse matrices are
  refused (kernelkit kernels are dense), as are NaN and infinity.
- Parameters are validated by the registry: ``gamma`` must be > 0 (scikit-learn allows 0),
  ``degree`` an integer >= 0 (scikit-learn allows any real >= 1).
- The result is float32 when every input is float32, else float64. scikit-learn does the same
  except for :func:`laplacian_kernel`, which it always returns in float64.

Examples
--------
>>> import numpy as np
>>> from kernelkit.pairwise import rbf_kernel
>>> X = np.array([[0.0, 0.0], [1.0, 0.0]])
>>> rbf_kernel(X, gamma=0.5)
array([[1.        , 0.60653066],
       [0.60653066, 1.        ]])
"""

from __future__ import annotations

import numbers

import numpy as np

from kernelkit._compute import kernel_matrix
from kernelkit._util.device import check_device
from kernelkit_math.registry import REGISTRY, fill_doc, get_kernel, kernel_list_doc, param_list_doc

__all__ = [
    "linear_kernel",
    "polynomial_kernel",
    "rbf_kernel",
    "laplacian_kernel",
    "sigmoid_kernel",
    "cosine_similarity",
    "pairwise_kernels",
]

#: scikit-learn's other spellings of registry kernels.
METRIC_ALIASES = {"poly": "polynomial"}

#: Metrics scikit-learn implements and kernelkit passes to it unchanged.
SKLEARN_ONLY_METRICS = ("additive_chi2", "chi2", "precomputed")

#: Metrics that, as in scikit-learn, also take ``dense_output`` through ``pairwise_kernels``.
_DENSE_OUTPUT_METRICS = ("linear", "cosine")

#: The ``device`` parameter of every function here.
_DEVICE_DOC = (
    'Where to compute: "auto" is the GPU when one is present, else the CPU; "cuda" without a '
    "GPU raises ValueError. torch tensors in give tensors out on their own device. Notes say "
    "how each device computes."
)

#: The Notes of every function here: how each device and dtype computes K.
_PRECISION_DOC = (
    'On the CPU (``device="cpu"``, ``"auto"`` without a GPU, CPU tensors) K is the float64 '
    "registry reference: distances from direct differences, never ``||x||² + ||y||² - 2 x·y``, "
    "so data far from the origin and near-duplicate points keep every digit; a float32 result "
    'is the float64 value rounded once. On a GPU (``device="cuda"``, ``"auto"`` with a GPU, '
    "CUDA tensors) K is computed by :func:`kernelkit_gpu.gram`: float64 data, and float32 data "
    "mixed with float64 data, in float64 arithmetic; float32 data in its accurate float32 "
    "mode, on centred data with split-precision (3xTF32) tensor-core products and direct "
    "differences where the expansion would cancel (relative Frobenius error against float64 "
    "of a few 1e-7 for rbf at D = 64 to 512 with data offset by 1000, docs/benchmarks.md; the "
    "tests assert 1e-6 for every kernel); float16 and "
    "bfloat16 CUDA tensors with 16-bit tensor-core products accumulated in float32 (inputs "
    "upcast to float32 first for per-feature parameters and cosine). The diagonal of a float64 "
    "K(X, X) is the reference's on either device."
)

_fill_doc = fill_doc(device=_DEVICE_DOC, precision=_PRECISION_DOC)


def _valid_metric_names():
    return sorted(set(REGISTRY) | set(METRIC_ALIASES) | set(SKLEARN_ONLY_METRICS))


def _check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def _kernel(name, X, Y, device, **params):
    """Validate everything, then evaluate registry kernel ``name`` where ``device`` says.

    NumPy: float32 when every input is float32, else float64. torch tensors: a tensor on their
    device (see :mod:`kernelkit._compute`).
    """
    spec = get_kernel(name)
    return kernel_matrix(spec, X, Y, lambda d: spec.resolve(d, **params), device)


# ------------------------------------------------------------------------------------------
@_fill_doc
def linear_kernel(X, Y=None, dense_output=True, *, device="auto"):
    r"""Linear kernel: the dot product of every row of X with every row of Y.

    .. math::

        K(x, y) = x^\top y

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (the result is then exactly symmetric).
    dense_output : bool, default=True
        Accepted for compatibility with scikit-learn, where it matters only for sparse input.
        kernelkit takes dense input only, so the result is always a dense ndarray.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64.

    Raises
    ------
    ValueError
        If X or Y is not 2-D, is empty or holds NaN or infinity; if their feature counts differ;
        for an unknown ``device``.
    TypeError
        For sparse, complex, string or other non-numeric input, or a non-boolean ``dense_output``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import linear_kernel
    >>> linear_kernel([[1.0, 2.0], [3.0, 4.0]], [[1.0, 0.0]])
    array([[1.],
           [3.]])
    """
    _check_bool(dense_output, "dense_output")
    return _kernel("linear", X, Y, device)


@_fill_doc
def polynomial_kernel(X, Y=None, degree=3, gamma=None, coef0=1, *, device="auto"):
    r"""Polynomial kernel.

    .. math::

        K(x, y) = (\gamma\, x^\top y + c_0)^{d}

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (the result is then exactly symmetric).
    degree : int, default=3
        The exponent d: an integer >= 0 (a float with an integer value such as 2.0 is accepted).
    gamma : float, default=None
        Scale of the dot product, > 0. ``None`` means ``1 / n_features``.
    coef0 : float, default=1
        The constant c0, any finite real (the kernel is positive semi-definite for c0 >= 0).
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64.

    Raises
    ------
    ValueError
        For bad data as in :func:`linear_kernel`; ``gamma <= 0``; ``degree < 0``; a non-finite
        ``coef0``; an unknown ``device``.
    TypeError
        For non-numeric data; a non-integer ``degree`` (2.5); non-numeric ``gamma`` or ``coef0``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import polynomial_kernel
    >>> polynomial_kernel([[1.0, 1.0]], [[1.0, 0.0]], degree=2, gamma=1.0, coef0=1.0)
    array([[4.]])
    """
    return _kernel("polynomial", X, Y, device, degree=degree, gamma=gamma, coef0=coef0)


@_fill_doc
def rbf_kernel(X, Y=None, gamma=None, *, device="auto"):
    r"""Radial basis function (Gaussian) kernel.

    .. math::

        K(x, y) = \exp\left(-\gamma \lVert x - y \rVert^2\right)

    ``gamma = 1 / (2 length_scale²)`` relates it to :class:`sklearn.gaussian_process.kernels.RBF`.

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (exactly symmetric, diagonal exactly 1).
    gamma : float or array-like of shape (n_features,), default=None
        Inverse width, > 0. ``None`` means ``1 / n_features``. An array gives each feature its
        own weight: ``exp(-sum_k gamma_k (x_k - y_k)²)``.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64.

    Raises
    ------
    ValueError
        For bad data as in :func:`linear_kernel`; ``gamma <= 0`` or non-finite; a per-feature
        ``gamma`` of the wrong length; an unknown ``device``.
    TypeError
        For non-numeric data or ``gamma``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import rbf_kernel
    >>> rbf_kernel([[0.0], [1.0]], gamma=1.0)
    array([[1.        , 0.36787944],
           [0.36787944, 1.        ]])
    """
    return _kernel("rbf", X, Y, device, gamma=gamma)


@_fill_doc
def laplacian_kernel(X, Y=None, gamma=None, *, device="auto"):
    r"""Laplacian kernel (exponential of the L1 distance).

    .. math::

        K(x, y) = \exp\left(-\gamma \lVert x - y \rVert_1\right)

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (exactly symmetric, diagonal exactly 1).
    gamma : float or array-like of shape (n_features,), default=None
        Inverse width, > 0. ``None`` means ``1 / n_features``. An array gives each feature its
        own weight: ``exp(-sum_k gamma_k |x_k - y_k|)``.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64 (scikit-learn always returns
        float64 here).

    Raises
    ------
    ValueError
        For bad data as in :func:`linear_kernel`; ``gamma <= 0`` or non-finite; a per-feature
        ``gamma`` of the wrong length; an unknown ``device``.
    TypeError
        For non-numeric data or ``gamma``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import laplacian_kernel
    >>> laplacian_kernel([[0.0, 0.0]], [[1.0, -1.0]], gamma=0.5)
    array([[0.36787944]])
    """
    return _kernel("laplacian", X, Y, device, gamma=gamma)


@_fill_doc
def sigmoid_kernel(X, Y=None, gamma=None, coef0=1, *, device="auto"):
    r"""Sigmoid (hyperbolic tangent) kernel; not positive semi-definite in general.

    .. math::

        K(x, y) = \tanh(\gamma\, x^\top y + c_0)

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (the result is then exactly symmetric).
    gamma : float, default=None
        Scale of the dot product, > 0. ``None`` means ``1 / n_features``.
    coef0 : float, default=1
        The constant c0, any finite real.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64.

    Raises
    ------
    ValueError
        For bad data as in :func:`linear_kernel`; ``gamma <= 0``; a non-finite ``coef0``; an
        unknown ``device``.
    TypeError
        For non-numeric data, ``gamma`` or ``coef0``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import sigmoid_kernel
    >>> sigmoid_kernel([[1.0, 0.0]], [[0.0, 1.0]], gamma=1.0, coef0=0.5)
    array([[0.46211716]])
    """
    return _kernel("sigmoid", X, Y, device, gamma=gamma, coef0=coef0)


@_fill_doc
def cosine_similarity(X, Y=None, dense_output=True, *, device="auto"):
    r"""Cosine similarity: the dot product of L2-normalised rows.

    .. math::

        K(x, y) = \frac{x^\top y}{\lVert x \rVert\, \lVert y \rVert}

    A row of zeros has similarity 0 with everything (itself included), as in scikit-learn.

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data. Float32 stays float32 in the result; other real dtypes give float64.
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X`` (exactly symmetric; the diagonal is exactly 1
        for non-zero rows).
    dense_output : bool, default=True
        Accepted for compatibility with scikit-learn, where it matters only for sparse input.
        kernelkit takes dense input only, so the result is always a dense ndarray.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        float32 if X (and Y, if given) are float32, else float64.

    Raises
    ------
    ValueError
        For bad data as in :func:`linear_kernel`; an unknown ``device``.
    TypeError
        For non-numeric data or a non-boolean ``dense_output``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import cosine_similarity
    >>> cosine_similarity([[1.0, 0.0], [1.0, 1.0]], [[3.0, 0.0]])
    array([[1.        ],
           [0.70710678]])
    """
    _check_bool(dense_output, "dense_output")
    return _kernel("cosine", X, Y, device)


# ------------------------------------------------------------------------------------------
@fill_doc(
    device=_DEVICE_DOC, precision=_PRECISION_DOC, kernels=kernel_list_doc(),
    aliases=", ".join(f'``"{alias}"`` for ``"{name}"``' for alias, name in METRIC_ALIASES.items()),
    sklearn_only=kernel_list_doc(SKLEARN_ONLY_METRICS), kernel_params=param_list_doc(),
    dense_output=kernel_list_doc(_DENSE_OUTPUT_METRICS),
)
def pairwise_kernels(
    X, Y=None, metric="linear", *, filter_params=False, n_jobs=None, device="auto", **kwds
):
    r"""Kernel matrix between X and optional Y for a kernel named by ``metric``.

    .. math::

        K_{ij} = k(x_i, y_j), \qquad k = \text{metric}(\cdot, \cdot; \text{kwds})

    ``metric`` may be any kernel of the kernelkit registry, {kernels}, or scikit-learn's
    spelling of one ({aliases}): its parameters are then validated by the registry and it is
    computed as the functions above (see Notes). The metrics kernelkit does not implement,
    {sklearn_only}, a callable or a :class:`sklearn.gaussian_process.kernels.Kernel` object, are
    passed unchanged to :func:`sklearn.metrics.pairwise.pairwise_kernels` (on the CPU), so
    nothing is lost by switching imports.

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Real, finite data (a kernel matrix of shape (n_samples_X, n_samples_X) when
        ``metric="precomputed"``; anything scikit-learn accepts for a delegated metric).
    Y : array-like of shape (n_samples_Y, n_features), default=None
        Second data set; ``None`` means ``Y = X``.
    metric : str or callable, default="linear"
        A registry kernel name or its scikit-learn spelling, a metric delegated to scikit-learn
        (see above), a callable ``metric(x, y, **kwds) -> float`` or a scikit-learn GP kernel
        object.
    filter_params : bool, default=False
        If True, drop the entries of ``kwds`` the kernel does not accept instead of raising.
    n_jobs : int, default=None
        Passed to scikit-learn for delegated metrics, where it sets how many threads compute
        chunks of the result. For registry kernels it is accepted for compatibility and
        otherwise ignored: the matrix is one vectorised computation (BLAS and SciPy's ``cdist``
        on the CPU, which use their own threads, or the GPU), and no processes are spawned.
    device : {"auto", "cpu", "cuda"}, default="auto"
        {device}
        Delegated metrics run in scikit-learn on the CPU and accept only "auto" or "cpu".
    **kwds : optional keyword parameters
        Kernel parameters as the registry names them, {kernel_params}; each kernel takes its
        own (``kernelkit_math.get_kernel(name).param_names``). ``dense_output`` is also accepted
        for {dense_output}, as scikit-learn passes it on to those functions.

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Y)
        For registry kernels: float32 if X (and Y, if given) are float32, else float64. For
        delegated metrics: whatever scikit-learn returns.

    Raises
    ------
    ValueError
        For an unknown ``metric`` (the message lists the valid names); bad data or parameter
        values as in the functions above; a ``device`` other than "auto"/"cpu" for a
        delegated metric.
    TypeError
        For a parameter the kernel does not accept (the message names the kernel and its
        parameters) unless ``filter_params=True``; non-numeric data or parameters; a
        non-boolean ``filter_params`` or non-integer ``n_jobs``.

    Notes
    -----
    {precision}

    Examples
    --------
    >>> from kernelkit.pairwise import pairwise_kernels
    >>> X = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    >>> Y = [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    >>> pairwise_kernels(X, Y, metric="linear")
    array([[0., 0.],
           [1., 2.]])
    >>> pairwise_kernels(X, metric="matern", nu=0.5, length_scale=2.0).round(6)
    array([[1.     , 0.42062],
           [0.42062, 1.     ]])
    >>> pairwise_kernels(X, Y, metric="chi2", gamma=1.0)  # computed by scikit-learn
    array([[0.36787944, 0.13533528],
           [0.13533528, 0.36787944]])
    """
    filter_params = _check_bool(filter_params, "filter_params")
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral)):
        raise TypeError(f"n_jobs must be an integer or None; got {n_jobs!r}")

    name = None
    if isinstance(metric, str):
        name = METRIC_ALIASES.get(metric, metric)
        if name not in REGISTRY and metric not in SKLEARN_ONLY_METRICS:
            raise ValueError(
                f"unknown metric {metric!r}; valid names: {', '.join(_valid_metric_names())}, "
                "or a callable"
            )
        if name not in REGISTRY:
            name = None
    elif not callable(metric):  # GP kernel objects are callable too
        raise ValueError(
            f"metric must be a string or a callable; got {metric!r}. "
            f"Valid names: {', '.join(_valid_metric_names())}"
        )

    if name is None:
        return _delegate(X, Y, metric, filter_params, n_jobs, device, kwds)

    spec = get_kernel(name)
    if filter_params:
        # As in scikit-learn, filtering also drops dense_output (not a kernel parameter).
        kwds = {k: v for k, v in kwds.items() if k in spec.param_names}
    if name in _DENSE_OUTPUT_METRICS and "dense_output" in kwds:
        _check_bool(kwds.pop("dense_output"), "dense_output")
    return _kernel(name, X, Y, device, **kwds)


def _delegate(X, Y, metric, filter_params, n_jobs, device, kwds):
    """Hand a metric kernelkit does not implement to scikit-learn, unchanged."""
    if not (isinstance(device, str) and device in ("auto", "cpu")):
        check_device(device)  # an unknown name gets the standard message
        raise ValueError(
            f"metric {metric!r} is computed by scikit-learn on the CPU; device must be 'auto' "
            f"or 'cpu', got {device!r}"
        )
    from sklearn.metrics.pairwise import pairwise_kernels as sk_pairwise_kernels

    return sk_pairwise_kernels(
        X, Y, metric=metric, filter_params=filter_params, n_jobs=n_jobs, **kwds
    )
