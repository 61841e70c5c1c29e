"""User-facing input validation: clear errors that name the argument and say what was expected."""

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

FLOAT_DTYPES = (np.float64, np.float32)


def check_data(X, name="X"):
    """Validate one data array and return it as float64 or float32, shape (n_samples, n_features).

    Accepts array-likes (lists, pandas DataFrames, NumPy arrays of any real dtype). Float32
    stays float32; other real dtypes become float64. The input is never modified.

    Raises
    ------
    TypeError
        For sparse matrices and complex, string or other non-numeric data.
    ValueError
        For arrays that are not 2-D, are empty, or contain NaN or infinity.
    """
    if sp.issparse(X):
        raise TypeError(
            f"{name} is a sparse matrix; kernelkit kernels need dense arrays (use {name}.toarray())"
        )
    if hasattr(X, "__torch_function__"):
        raise TypeError(
            f"{name} is a torch tensor; this function takes NumPy arrays (use {name}.cpu().numpy())"
        )
    # NumPy arrays and DataFrames (which have .dtypes) go to check_array as they are.
    if hasattr(X, "dtypes") and not isinstance(X, np.ndarray):
        bad = _non_numeric_columns(X)
        if bad:
            raise TypeError(
                f"{name} has non-numeric column(s) {bad}; expected real numbers in every column "
                "(encode text or categories first, e.g. with sklearn.preprocessing.OneHotEncoder)"
            )
    arr = X if isinstance(X, np.ndarray) or hasattr(X, "dtypes") else np.asarray(X)
    dtype = getattr(arr, "dtype", None)
    if isinstance(dtype, np.dtype):
        if dtype.kind == "c":
            raise TypeError(f"{name} has complex dtype {dtype}; expected real numbers")
        if dtype.kind in "USVMm":
            raise TypeError(f"{name} has non-numeric dtype {dtype}; expected real numbers")
        if dtype.kind == "O":
            try:
                arr = np.asarray(arr, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"{name} holds non-numeric objects; expected real numbers") from None
    ndim = np.ndim(arr)
    if ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_samples, n_features); got a {ndim}-D array "
            f"of shape {np.shape(arr)}"
            + (f" (use {name}.reshape(-1, 1) for a single feature)" if ndim == 1 else "")
        )
    if 0 in np.shape(arr):
        raise ValueError(
            f"{name} is empty (shape {np.shape(arr)}); need at least one sample and one feature"
        )
    return check_array(arr, dtype=list(FLOAT_DTYPES), ensure_all_finite=True, input_name=name)


def _non_numeric_columns(frame):
    """Names of the columns of a data frame (pandas, polars...) that do not hold real numbers.

    Numeric and boolean columns pass by dtype; object, string and category columns pass only
    if every value converts to a float.
    """
    names = list(getattr(frame, "columns", range(len(frame.dtypes))))
    bad = []
    for col, dtype in zip(names, list(frame.dtypes)):
        kind = getattr(dtype, "kind", "O")
        if kind in "biuf":
            continue
        if kind == "O":
            try:
                np.asarray(frame[col], dtype=np.float64)
                continue
            except (TypeError, ValueError):
                pass
        bad.append(col)
    return bad


def check_pair(X, Y=None):
    """Validate X and optional Y; they must have the same number of features.

    Returns ``(X, Y)`` with ``Y`` None when it was None.

    Raises
    ------
    ValueError
        If X and Y have different numbers of features, and as :func:`check_data`.
    TypeError
        As :func:`check_data`.
    """
    X = check_data(X, "X")
    if Y is None:
        return X, None
    Y = check_data(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"X has {X.shape[1]} features but Y has {Y.shape[1]}; they must match"
        )
    return X, Y


def result_dtype(X, Y=None):
    """float32 when every input is float32 (as scikit-learn's pairwise functions), else float64."""
    if X.dtype == np.float32 and (Y is None or Y.dtype == np.float32):
        return np.float32
    return np.float64
