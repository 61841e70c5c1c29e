"""Reading data matrices from disk and writing results atomically.

- :func:`load_matrix` reads a 2-D numeric matrix from ``.npy`` or ``.csv`` with errors that say
  which argument, which file and what was wrong.
- :func:`save_npy_atomic` and :func:`open_npy_memmap_atomic` write a ``.npy`` file into a
  temporary file in the same directory and ``os.replace`` it onto the final name only when the
  write succeeded, so no partial or corrupt file is ever left under the final name.

Rules of every atomic write (:func:`atomic_path`):

- a symbolic link is followed: the file it points to is replaced and the link stays a link;
- a replaced file keeps its permission bits;
- :func:`check_npy_path` refuses an output that is one of the inputs (same path after symbolic
  links, or the same file through a hard link);
- the temporary file is removed on any error, on Ctrl-C (``KeyboardInterrupt``) and on SIGTERM
  (see :func:`atomic_path`);
- :func:`open_npy_memmap_atomic` checks the free disk space first and allocates the file's
  blocks before writing, so a full disk is a clear ``OSError`` (ENOSPC), never a SIGBUS.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import secrets
import shutil
import signal
import stat
import threading

import numpy as np

__all__ = ["load_matrix", "save_npy_atomic", "open_npy_memmap_atomic", "check_npy_path",
           "atomic_path", "free_bytes"]

#: Free disk space :func:`open_npy_memmap_atomic` keeps beyond the file itself: 1 % of the file,
#: at least this many bytes (file-system metadata, other writers).
FREE_SPACE_MARGIN = 2**20

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
def _same_file(a, b):
    """True when paths ``a`` and ``b`` name one file: equal after resolving symbolic links, or
    the same inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_npy_path(path, name="out", inputs=()):
    """Validate an output path for a ``.npy`` file and return it as a ``str``.

    Parameters
    ----------
    path : str or os.PathLike
        The output path. A symbolic link is allowed: the file it points to will be replaced.
    name : str, default="out"
        The argument name used in error messages.
    inputs : sequence of (str, path), default=()
        ``(label, path)`` of the files the result is computed from. ``path`` must name none of
        them, neither directly, through a symbolic link nor through a hard link: writing the
        result there would destroy the input.

    Raises
    ------
    TypeError
        If ``path`` is not a ``str`` or ``os.PathLike``.
    ValueError
        If it does not end in ``.npy``, names an existing directory or is one of the inputs.
    FileNotFoundError
        If its directory does not exist.
    """
    path = _check_path_type(path, name)
    if os.path.isdir(path):
        raise ValueError(f"{name} {path!r} is a directory; give a file name ending in .npy")
    if not path.lower().endswith(".npy"):
        raise ValueError(f"{name} must be a path ending in .npy; got {path!r}")
    for label, source in inputs:
        if _same_file(path, os.fspath(source)):
            raise ValueError(
                f"{name} {path!r} is the input {label} ({os.fspath(source)!r}); writing the "
                "result there would destroy the input: choose another output file"
            )
    parent = os.path.dirname(os.path.realpath(path))
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
def _sigterm_raises_system_exit():
    """While active, SIGTERM raises ``SystemExit(143)`` (128 + SIGTERM, the status a shell
    reports for it) so ``except``/``finally`` clean-ups run; the default action is restored
    afterwards.

    Only where SIGTERM has its default action (which would kill the process without any
    clean-up) and only in the main thread (the only one that may set handlers): a handler the
    program installed itself, or SIG_IGN, is left alone.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_path(path):
    """Context manager: yields a temporary file name beside ``path`` to write; on success the
    file is ``os.replace``-d onto ``path``, on any error it is removed and ``path`` is untouched.

    A symbolic link ``path`` is followed: the file it points to is replaced (beside which the
    temporary file is made) and the link itself is kept. A replaced file keeps its permission
    bits. The temporary file is also removed on ``KeyboardInterrupt`` and, in the main thread
    of a program that has not set its own SIGTERM handler, on SIGTERM, which then ends the
    program with exit status 143 (``SystemExit``).
    """
    target = os.path.realpath(path)
    with _sigterm_raises_system_exit():
        tmp = _temp_name(target)
        try:
            yield tmp
            with contextlib.suppress(FileNotFoundError):
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(tmp, target)
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
    left as it was (absent, or the previous complete file). The rules of :func:`atomic_path`
    apply (symbolic links followed, permissions kept).

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


def free_bytes(directory):
    """Free disk space in ``directory`` for an unprivileged user, in bytes."""
    return shutil.disk_usage(directory).free


def _no_space(path, nbytes, needed, available, directory):
    return OSError(
        errno.ENOSPC,
        f"not enough free disk space for {path!r}: the file needs {nbytes} bytes "
        f"({nbytes / 2**30:.2f} GiB; {needed} bytes with the margin kept free), but {available} "
        f"bytes ({available / 2**30:.2f} GiB) are available in {directory!r}; free some space "
        "or write to another disk",
    )


def _check_free_space(path, nbytes):
    """Raise ``OSError(ENOSPC)`` unless the directory of ``path`` has room for ``nbytes``."""
    directory = os.path.dirname(os.path.realpath(path))
    needed = nbytes + max(nbytes // 100, FREE_SPACE_MARGIN)
    available = free_bytes(directory)
    if available < needed:
        raise _no_space(path, nbytes, needed, available, directory)


def _allocate(tmp, path):
    """Allocate every block of the file ``tmp`` now, so writing through a memory map later
    cannot hit a full disk (which would be a SIGBUS). A file system without ``fallocate``
    keeps the file sparse: the free-space check is then the only guard."""
    if not hasattr(os, "posix_fallocate"):
        return
    with open(tmp, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            os.posix_fallocate(f.fileno(), 0, size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                directory = os.path.dirname(tmp)
                raise _no_space(path, size, size, free_bytes(directory), directory) from None
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise


@contextlib.contextmanager
def open_npy_memmap_atomic(path, shape, dtype=np.float64):
    """Context manager: a writable ``.npy`` memmap that appears at ``path`` only on success.

    Yields a :func:`numpy.lib.format.open_memmap` array backed by a temporary file in the same
    directory as ``path``. When the ``with`` block ends normally the map is flushed and the file
    is ``os.replace``-d onto ``path``; when it raises, the temporary file is removed and
    ``path`` is untouched. No partial file is ever visible under ``path``. The rules of
    :func:`atomic_path` apply (symbolic links followed, permissions kept, clean-up on SIGTERM).

    Before anything is written the free space of the directory is checked (the array's bytes
    plus 1 %, at least :data:`FREE_SPACE_MARGIN`) and the file's blocks are allocated
    (``posix_fallocate``), so a full disk raises ``OSError`` (errno ENOSPC) up front instead of
    killing the process with SIGBUS half-way.

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

    Raises
    ------
    OSError
        errno ENOSPC when the disk has too little free space; the message names ``path``, the
        bytes needed and the bytes available.

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
    shape = tuple(int(n) for n in shape)
    _check_free_space(path, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    with atomic_path(path) as tmp:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        _allocate(tmp, path)
        yield mm
        mm.flush()
