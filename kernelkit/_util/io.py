"""Reading data matrices from disk: :func:`load_matrix` reads a 2-D numeric matrix from ``.npy``
or ``.csv`` with errors that say which argument, which file and what was wrong.

It reads only regular files: a FIFO or a device is refused (reading one could block forever or
never end), and a ``.npy`` header that declares more data than the file holds is refused before
anything is allocated. Writing results: :mod:`kernelkit._util.atomic`.
"""

from __future__ import annotations

import csv
import math
import os
import stat

import numpy as np

__all__ = ["load_matrix"]


def _check_path_type(path, name):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike); got {path!r}")
    return os.fspath(path)


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _irregular_kind(path):
    """What ``path`` is (symbolic links followed) when it exists and is not a regular file,
    e.g. "a FIFO (named pipe)"; None for a regular file or a path that does not exist."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for is_kind, kind in _FILE_KINDS if is_kind(mode)), "not a file")


def load_matrix(path, name="X", header="auto"):
    """Read a 2-D numeric matrix from a ``.npy`` or ``.csv`` file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy`` file (any real numeric dtype; pickled object arrays are refused) or a
        comma-separated ``.csv`` file, one sample per line, with an optional first line of
        column names that is skipped (see ``header``). Blank lines are ignored.
    name : str, default="X"
        The argument name used in error messages.
    header : {"auto", True, False}, default="auto"
        Whether the first non-blank line of a ``.csv`` file is a header (column names, skipped)
        or data; not read for ``.npy``. ``"auto"``: a header when one of its fields is not a
        number (names; the empty first field pandas writes above its index) or when its fields
        are exactly 0, 1, ..., d - 1 for d >= 2 (pandas' default column names, as
        ``pd.DataFrame(X).to_csv(path)`` writes them); a single field ``0`` is refused as
        ambiguous. A header whose first field is empty marks the first column as row labels
        (the index ``DataFrame.to_csv`` writes by default), which is left out of the matrix.

    Returns
    -------
    ndarray of shape (n_samples, n_features)
        float32 for a float32 ``.npy`` file, float64 otherwise.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        For a path that is not a regular file (a directory, a FIFO, a device: reading a FIFO
        would wait for a writer forever), an unknown extension, a file that is not a valid
        ``.npy``, a ``.npy`` header that declares more data than the file holds (truncated or
        corrupt; checked before the array is allocated), a pickled object array, a non-numeric
        dtype, an array that is not 2-D, an empty file, a malformed CSV row (the wrong number
        of values), a non-numeric CSV value, a CSV whose first line is the single field ``0``
        with ``header="auto"`` (a header or data: pass True or False), or an unknown
        ``header``. The message names ``name``, the file and, for CSV, the line.
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
    if not (header is True or header is False or (isinstance(header, str) and header == "auto")):
        raise ValueError(f"header must be 'auto', True or False; got {header!r}")
    where = f"{name} file {path!r}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where} does not exist")
    kind = _irregular_kind(path)
    if kind is not None:
        raise ValueError(f"{where} is {kind}, not a regular .npy or .csv file")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        arr = _load_npy(path, where)
    elif suffix == ".csv":
        arr = _load_csv(path, where, header)
    else:
        raise ValueError(
            f"{where} has unsupported extension {suffix or '(none)'!r}; expected .npy or .csv"
        )
    return arr


def _check_npy_size(path, where):
    """Refuse a ``.npy`` file whose header declares more data bytes than the file holds, before
    ``np.load`` allocates the declared array (a header of shape (10**6, 10**6) on 64 bytes of
    data would otherwise ask for 8 TB). Files without the ``.npy`` magic are left to
    ``np.load``, which says what they are."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        if f.read(len(fmt.MAGIC_PREFIX)) != fmt.MAGIC_PREFIX:
            return
        f.seek(0)
        try:
            version = fmt.read_magic(f)
            read_header = (fmt.read_array_header_1_0 if version == (1, 0)
                           else fmt.read_array_header_2_0)
            shape, _fortran_order, dtype = read_header(f)
        except ValueError as exc:
            raise ValueError(f"{where} is not a valid .npy file: {exc}") from None
        held = os.fstat(f.fileno()).st_size - f.tell()
    if dtype.hasobject:
        return  # pickled objects: np.load refuses them
    declared = math.prod(shape) * dtype.itemsize
    if declared > held:
        raise ValueError(
            f"{where} declares an array of shape {shape} and dtype {dtype} ({declared} bytes) "
            f"but holds only {held} bytes of data; the file is truncated or corrupt"
        )


def _load_npy(path, where):
    _check_npy_size(path, where)
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


def _is_header(fields, header, where, lineno):
    """Whether the first non-blank CSV line ``fields`` is a header (see :func:`load_matrix`)."""
    if header != "auto":
        return header
    if fields == ["0"]:
        raise ValueError(
            f"{where}: the first line (line {lineno}) is the single value 0: pandas' column name "
            "of a one-column DataFrame, or a data row; say which: header=True or header=False "
            "(kernelkit gram: --header or --no-header)"
        )
    pandas_names = [str(i) for i in range(len(fields))]
    return not all(_is_number(v) for v in fields) or fields == pandas_names


def _load_csv(path, where, header):
    rows = []
    n_cols = None
    labels = False  # the first column holds row labels (a header with an empty first field)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            for lineno, fields in enumerate(csv.reader(f), start=1):
                fields = [v.strip() for v in fields]
                if not fields or all(v == "" for v in fields):
                    continue  # blank line
                if n_cols is None and _is_header(fields, header, where, lineno):
                    n_cols = len(fields)  # header line of column names
                    labels = n_cols > 1 and fields[0] == ""
                    continue
                if n_cols is None:
                    n_cols = len(fields)
                elif len(fields) != n_cols:
                    raise ValueError(
                        f"{where}: malformed CSV row at line {lineno}: expected {n_cols} "
                        f"comma-separated values, got {len(fields)}"
                    )
                row = []
                for col, v in enumerate(fields[labels:], start=1 + labels):
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
