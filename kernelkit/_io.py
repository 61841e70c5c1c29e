"""Reading data matrices from disk and writing results atomically.

- :func:`load_matrix` reads a 2-D numeric matrix from ``.npy`` or ``.csv`` with errors that say
  which argument, which file and what was wrong.
- :func:`save_npy_atomic` and :func:`open_npy_memmap_atomic` write a ``.npy`` file into a
  temporary file in the same directory and ``os.replace`` it onto the final name only when the
  write succeeded, so no partial or corrupt file is ever left under the final name.
"""

from __future__ import annotations

import contextlib
import csv
import os
import secrets

import numpy as np

__all__ = ["load_matrix", "save_npy_atomic", "open_npy_memmap_atomic", "check_npy_path"]

def _check_path_type(path, name):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike); got {path!r}")
    return os.fspath(path)


def load_matrix(path, name="X"):
    """Read a 2-D numeric matrix from a ``.npy`` or ``.csv`` file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy`` file (any real numeric dtype; pickled object arrays are refused) or a
        comma-separated ``.csv`` file, one sample per line, with an optional first line of
        non-numeric column names that is skipped. Blank lines are ignored.
    name : str, default="X"
        The argument name used in error messages.

    Returns
    -------
    ndarray of shape (n_samples, n_features)
        float32 for a float32 ``.npy`` file, float64 otherwise.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        For an unknown extension, a file that is not a valid ``.npy``, a pickled object array,
        a non-numeric dtype, an array that is not 2-D, an empty file, a malformed CSV row (the
        wrong number of values) or a non-numeric CSV value. The message names ``name``, the file
        and, for CSV, the line.
    TypeError
        If ``path`` is not a path.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "X.csv")
    >>> with open(p, "w") as f:
    ...     _ = f.write("a,b\\n1,2\\n3,4\\n")
    >>> load_matrix(p)
    array([[1., 2.],
           [3., 4.]])
    """
    path = _check_path_type(path, name)
    where = f"{name} file {path!r}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{where} is a directory, not a .npy or .csv file")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        arr = _load_npy(path, where)
    elif suffix == ".csv":
        arr = _load_csv(path, where)
    else:
        raise ValueError(
            f"{where} has unsupported extension {suffix or '(none)'!r}; expected .npy or .csv"
        )
    return arr


def _load_npy(path, where):
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise ValueError(
                f"{where} holds a pickled object array (or is not a .npy file); kernelkit "
                "refuses to unpickle data: save a numeric array with np.save"
            ) from None
        raise ValueError(f"{where} is not a valid .npy file: {exc}") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"{where} is not a valid .npy file: {exc}") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive renamed to .npy
        if hasattr(arr, "close"):
            arr.close()
        raise ValueError(f"{where} is not a .npy file (it looks like an .npz archive)")
    if arr.dtype.kind not in "iuf":
        raise ValueError(
            f"{where} has dtype {arr.dtype}; expected real numbers (integer or float)"
        )
    if arr.ndim != 2:
        hint = " (save it with X.reshape(-1, 1) for a single feature)" if arr.ndim == 1 else ""
        raise ValueError(
            f"{where} holds a {arr.ndim}-D array of shape {arr.shape}; expected a 2-D array "
            f"of shape (n_samples, n_features){hint}"
        )
    if 0 in arr.shape:
        raise ValueError(f"{where} holds an empty array of shape {arr.shape}")
    if arr.dtype == np.float32:
        return np.ascontiguousarray(arr)
    return np.ascontiguousarray(arr, dtype=np.float64)


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def _load_csv(path, where):
    rows = []
    n_cols = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            for lineno, fields in enumerate(csv.reader(f), start=1):
                fields = [v.strip() for v in fields]
                if not fields or all(v == "" for v in fields):
                    continue  # blank line
                if n_cols is None and not rows and not any(_is_number(v) for v in fields):
                    n_cols = len(fields)  # header line of column names
                    continue
                if n_cols is None:
                    n_cols = len(fields)
                elif len(fields) != n_cols:
                    raise ValueError(
                        f"{where}: malformed CSV row at line {lineno}: expected {n_cols} "
                        f"comma-separated values, got {len(fields)}"
                    )
                row = []
                for col, v in enumerate(fields, start=1):
                    try:
                        row.append(float(v))
                    except ValueError:
                        raise ValueError(
                            f"{where}: non-numeric value {v!r} at line {lineno}, column {col}"
                        ) from None
                rows.append(row)
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not a text CSV file (it is not valid UTF-8)") from None
    except csv.Error as exc:
        raise ValueError(f"{where} is not a valid CSV file: {exc}") from None
    if not rows:
        raise ValueError(f"{where} has no data rows")
    return np.asarray(rows, dtype=np.float64)


# ----------------------------------------------------------------------------- atomic writes
def check_npy_path(path, name="out"):
    """Validate an output path for a ``.npy`` file and return it as a ``str``.

    Raises
    ------
    TypeError
        If ``path`` is not a ``str`` or ``os.PathLike``.
    ValueError
        If it does not end in ``.npy`` or names an existing directory.
    FileNotFoundError
        If its directory does not exist.
    """
    path = _check_path_type(path, name)
    if os.path.isdir(path):
        raise ValueError(f"{name} {path!r} is a directory; give a file name ending in .npy")
    if not path.lower().endswith(".npy"):
        raise ValueError(f"{name} must be a path ending in .npy; got {path!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{name}: directory {parent!r} does not exist (for {path!r})")
    return path


def _temp_name(path):
    """Create an empty, unique temporary file beside ``path`` and return its name.

    Created with ``O_EXCL`` and mode 0o666 so the user's umask applies, as for a plain
    ``open(path, "w")``: the final file gets the usual permissions, not ``mkstemp``'s 0o600.
    """
    directory, base = os.path.split(os.path.abspath(path))
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"could not create a temporary file beside {path!r}")


def _remove_quietly(path):
    with contextlib.suppress(OSError):
        os.remove(path)


@contextlib.contextmanager
def atomic_path(path):
    """Context manager: yields a temporary file name beside ``path`` to write; on success the
    file is ``os.replace``-d onto ``path``, on any error it is removed and ``path`` is untouched."""
    tmp = _temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def write_text_atomic(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically, flushed to disk first."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    return path


def save_npy_atomic(path, array):
    """Save ``array`` to the ``.npy`` file ``path`` atomically.

    The data are written to a temporary file in the same directory, flushed to disk and
    ``os.replace``-d onto ``path``; on any error the temporary file is removed and ``path`` is
    left as it was (absent, or the previous complete file).

    Parameters
    ----------
    path : str or os.PathLike
        Destination; must end in ``.npy`` and its directory must exist.
    array : array_like
        Saved with ``allow_pickle=False``.

    Returns
    -------
    str
        ``path``.
    """
    path = check_npy_path(path, "path")
    array = np.asanyarray(array)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
    return path


@contextlib.contextmanager
def open_npy_memmap_atomic(path, shape, dtype=np.float64):
    """Context manager: a writable ``.npy`` memmap that appears at ``path`` only on success.

    Yields a :func:`numpy.lib.format.open_memmap` array backed by a temporary file in the same
    directory as ``path``. When the ``with`` block ends normally the map is flushed and the file
    is ``os.replace``-d onto ``path``; when it raises, the temporary file is removed and
    ``path`` is untouched. No partial file is ever visible under ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; must end in ``.npy`` and its directory must exist.
    shape : tuple of int
        Shape of the array.
    dtype : data-type, default=np.float64

    Yields
    ------
    numpy.memmap
        Uninitialised: the caller writes every element.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "K.npy")
    >>> with open_npy_memmap_atomic(p, (2, 2)) as K:
    ...     K[:] = 1.0
    >>> float(np.load(p).sum())
    4.0
    """
    path = check_npy_path(path, "path")
    tmp = _temp_name(path)
    try:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=tuple(shape))
        yield mm
        mm.flush()
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
