"""The kernel estimators' shared parameter and input checks (KernelRidge's first): numbers,
alpha, a kernel name that must be positive semi-definite, the kernel as a kernel tree, sparse
input. NumPy, SciPy and scikit-learn only (no torch)."""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse
from sklearn.gaussian_process.kernels import Kernel

from kernelkit.operators import kernel_tree
from kernelkit_math.registry import get_kernel, kernel_names

__all__ = ["ALIASES", "PSD_KERNELS", "check_alpha", "check_number", "psd_kernel_spec",
           "kernel_structure", "dense"]

#: scikit-learn's names for kernels the registry spells differently.
ALIASES = {"poly": "polynomial"}
#: The registry's positive semi-definite kernels, by name (the estimators' docstrings list them).
PSD_KERNELS = [name for name in kernel_names() if get_kernel(name).psd]


def psd_kernel_spec(kernel, reason):
    """The registry spec of the kernel named ``kernel`` (scikit-learn's aliases too).

    Raises
    ------
    ValueError
        For an unknown name, or a kernel that is not positive semi-definite: "kernel NAME is not
        positive semi-definite" + ``reason`` (what the estimator needs it for) + "; use a
        positive semi-definite kernel".
    """
    name = ALIASES.get(kernel, kernel)
    try:
        spec = get_kernel(name)
    except ValueError as exc:
        raise ValueError(f"kernel: {exc}") from None
    if not spec.psd:
        raise ValueError(f"kernel {name!r} is not positive semi-definite{reason}; use a positive "
                         "semi-definite kernel")
    return spec


def check_alpha(alpha):
    """``alpha`` as a float64 array of shape (1,) or (n_alphas,), every value finite and >= 0."""
    try:
        values = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    except (TypeError, ValueError):
        raise TypeError(f"alpha must be a real number >= 0 or an array of them (one per target); "
                        f"got {alpha!r}") from None
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"alpha must be a real number >= 0 or a 1-D array of them (one per "
                         f"target); got shape {values.shape}")
    if not (np.all(np.isfinite(values)) and np.all(values >= 0)):
        raise ValueError(f"alpha must be a real number >= 0 or an array of them; got {alpha!r}")
    return values


def check_number(value, name, *, low, integer=False):
    """``value`` as a float (or int) > ``low``; TypeError / ValueError naming ``name``."""
    kind = "an integer" if integer else "a real number"
    ok_type = isinstance(value, numbers.Integral if integer else numbers.Real)
    if isinstance(value, bool) or not ok_type:
        raise TypeError(f"{name} must be {kind} > {low:g}; got {value!r}")
    if not np.isfinite(value) or value <= low:
        raise ValueError(f"{name} must be {kind} > {low:g}; got {value!r}")
    return int(value) if integer else float(value)


def kernel_structure(kernel, n_features, *, gamma, degree, coef0, kernel_params):
    """KernelRidge's ``kernel`` parameter (with ``gamma``, ``degree``, ``coef0`` and
    ``kernel_params`` for a name) as a kernel tree (:mod:`kernelkit.operators.kernel_tree`: a
    registry name is the one-leaf tree, a kernel object is parsed as the GP parses it), or None
    for "precomputed".

    Raises
    ------
    TypeError
        For a kernel that is neither a string nor a kernel object (a callable), or a kernel
        object outside what the estimators take (the message lists what they take).
    ValueError
        For an unknown name, a named kernel that is not positive semi-definite,
        ``kernel_params`` with a kernel object, or a parameter out of range.
    """
    if isinstance(kernel, Kernel):
        if kernel_params:
            raise ValueError("kernel_params is for kernels given by name; set the parameters on "
                             f"the kernel object {kernel!r} instead")
        return kernel_tree.parse_kernel(kernel, n_features)
    if not isinstance(kernel, str):
        raise TypeError(
            "kernel must be a registry name such as 'rbf', 'precomputed', or a kernel object "
            "such as kernelkit.RBF() or sklearn's 2.0 * RBF() + Matern() (the products run on "
            f"the registry's formulas, so a Python function cannot be used); got {kernel!r}. "
            f"Kernel objects: {kernel_tree.SUPPORTED}")
    if kernel == "precomputed":
        return None
    spec = psd_kernel_spec(kernel, ", so K + alpha I may be indefinite and conjugate gradients "
                                   "can fail")
    given = {"gamma": gamma, "degree": degree, "coef0": coef0}
    params = {p: v for p, v in given.items() if p in spec.param_names}
    if kernel_params is not None:
        if not isinstance(kernel_params, dict):
            raise TypeError(f"kernel_params must be a dict or None; got {kernel_params!r}")
        params.update(kernel_params)
    params = spec.resolve(n_features, **params)
    return kernel_tree.registry_kernel(spec.name, params)


#: Share of the available host memory a sparse X may take once made dense.
DENSE_HOST_SHARE = 0.5


def dense(X):
    """A SciPy sparse ``X`` as a dense array (the kernel products need dense rows); anything
    else as it is. ValueError, naming the fix, where the dense float64 copy would take more
    than :data:`DENSE_HOST_SHARE` of the available host memory."""
    if not scipy.sparse.issparse(X):
        return X
    from kernelkit._util import host_memory

    need = 8 * X.shape[0] * X.shape[1]
    available = host_memory.available_bytes()
    if available is not None and need > DENSE_HOST_SHARE * available:
        raise ValueError(
            f"X is a sparse matrix of shape {X.shape}; the kernel products need dense rows, and "
            f"made dense it would take {need / 2**30:.3g} GiB of the {available / 2**30:.3g} GiB "
            "of host memory available. Reduce the features first (e.g. "
            "sklearn.decomposition.TruncatedSVD), or fit on fewer rows")
    return X.toarray()
