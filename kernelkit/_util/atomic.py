"""Writing results atomically: :func:`save_npy_atomic` and :func:`open_npy_memmap_atomic` write
a ``.npy`` file into a temporary file in the same directory and ``os.replace`` it onto the
final name only when the write succeeded, so no partial or corrupt file is ever left under the
final name.

Rules of every atomic write (:func:`atomic_path`):

- a symbolic link is followed: the file it points to is replaced and the link stays a link;
- only a regular file is replaced: an existing target that is a FIFO, a device, a socket or a
  directory is refused;
- a missing directory of the target is created (parents included), and removed again if the
  write fails;
- a replaced file keeps its permission bits;
- :func:`check_npy_path` refuses an output that is one of the inputs (same path after symbolic
  links, or the same file through a hard link) and a directory that cannot hold it (not
  writable, or a file system without storage such as /proc);
- the temporary file is removed on any error, on Ctrl-C (``KeyboardInterrupt``) and on the
  terminating signals (see :func:`atomic_path`);
- :func:`open_npy_memmap_atomic` checks the free disk space first and allocates the file's
  blocks before writing, so a full disk is a clear ``OSError`` (ENOSPC), never a SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import signal
import stat
import threading

import numpy as np

from kernelkit._util.io import _check_path_type, _irregular_kind

__all__ = ["save_npy_atomic", "open_npy_memmap_atomic", "check_npy_path", "atomic_path",
           "write_text_atomic", "free_bytes"]

#: Free disk space :func:`open_npy_memmap_atomic` keeps beyond the file itself: 1 % of the file,
#: at least this many bytes (file-system metadata, other writers).
FREE_SPACE_MARGIN = 2**20


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
        A missing directory is allowed: the write creates it (parents included).
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
        If it does not end in ``.npy``, exists and is not a regular file (a directory, a FIFO,
        a device, also through a symbolic link), is one of the inputs, or its directory (or the
        nearest one that exists) is a file, or is on a file system without storage such as
        /proc or /sys.
    PermissionError
        If that directory is not writable.
    """
    path = _check_path_type(path, name)
    if os.path.isdir(path):
        raise ValueError(f"{name} {path!r} is a directory; give a file name ending in .npy")
    if not path.lower().endswith(".npy"):
        raise ValueError(f"{name} must be a path ending in .npy; got {path!r}")
    _check_replaceable(path, name)
    for label, source in inputs:
        if _same_file(path, os.fspath(source)):
            raise ValueError(
                f"{name} {path!r} is the input {label} ({os.fspath(source)!r}); writing the "
                "result there would destroy the input: choose another output file"
            )
    _check_directory(path, name)
    return path


def _check_replaceable(path, name):
    """Refuse to replace an existing ``path`` (links followed) that is not a regular file: a
    FIFO or a device (/dev/null behind a link) would be swapped for a regular file."""
    kind = _irregular_kind(path)
    if kind is not None:
        raise ValueError(
            f"{name} {path!r} is {kind}, not a regular file; kernelkit replaces only regular "
            "files: choose another output file"
        )


def _existing_directory(directory):
    """``directory`` or its nearest ancestor that exists."""
    while not os.path.lexists(directory):
        directory = os.path.dirname(directory)
    return directory


def _check_directory(path, name):
    """The directory of ``path`` (or the nearest one that exists, where the write will create
    the rest) must be a writable directory on a file system that stores files."""
    parent = os.path.dirname(os.path.realpath(path))
    existing = _existing_directory(parent)
    where = f"{name} {path!r}: {existing!r}"
    if not os.path.isdir(existing):
        raise ValueError(f"{where} is not a directory")
    if hasattr(os, "statvfs") and os.statvfs(existing).f_blocks == 0:
        raise ValueError(
            f"{where} is on a file system without storage (such as /proc or /sys); write to a "
            "directory on a disk"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"{where} is not a writable directory")


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


#: The signals another process (or a closed terminal, or a CPU-time limit) sends to end a
#: process, whose default action ends it without any clean-up. SIGINT normally raises
#: ``KeyboardInterrupt`` already; it is listed for programs that reset it to the default.
TERMINATING_SIGNALS = tuple(
    getattr(signal, name) for name in
    ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU",
     "SIGVTALRM", "SIGPROF")
    if hasattr(signal, name)
)


@contextlib.contextmanager
def _signals_raise_system_exit():
    """While active, each of :data:`TERMINATING_SIGNALS` raises ``SystemExit(128 + signal
    number)`` (the status a shell reports for it, 143 for SIGTERM) so ``except``/``finally``
    clean-ups run; the default actions are restored afterwards.

    Only signals that have their default action (which would end the process without any
    clean-up), and only in the main thread (the only one that may set handlers): a handler the
    program installed itself, SIG_IGN (``nohup``) or Python's SIGINT handler are left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    taken = [s for s in TERMINATING_SIGNALS if signal.getsignal(s) is signal.SIG_DFL]
    for signum in taken:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum in taken:
            if signal.getsignal(signum) is handler:
                signal.signal(signum, signal.SIG_DFL)


def _make_directories(directory, created):
    """Create ``directory`` and its missing parents, appending each one made to ``created``."""
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for d in reversed(missing):
        os.mkdir(d)
        created.append(d)


@contextlib.contextmanager
def atomic_path(path):
    """Context manager: yields a temporary file name beside ``path`` to write; on success the
    file is ``os.replace``-d onto ``path``, on any error it is removed and ``path`` is untouched.

    A symbolic link ``path`` is followed: the file it points to is replaced (beside which the
    temporary file is made) and the link itself is kept. An existing target that is not a
    regular file (a FIFO, a device) raises ``ValueError``. Missing directories of the target
    are created, and removed again on an error. A replaced file keeps its permission bits. The
    temporary file is also removed on ``KeyboardInterrupt`` and, in the main thread, on each of
    :data:`TERMINATING_SIGNALS` (SIGTERM, SIGHUP, SIGQUIT...) that the program has left at its
    default action; such a signal then ends the program with exit status 128 + its number
    (``SystemExit``; 143 for SIGTERM).
    """
    target = os.path.realpath(path)
    _check_replaceable(target, "path")
    with _signals_raise_system_exit():
        created, tmp = [], None
        try:
            _make_directories(os.path.dirname(target), created)
            tmp = _temp_name(target)
            yield tmp
            with contextlib.suppress(FileNotFoundError):
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(tmp, target)
        except BaseException:
            if tmp is not None:
                _remove_quietly(tmp)
            for d in reversed(created):  # deepest first; one that is not empty stays
                with contextlib.suppress(OSError):
                    os.rmdir(d)
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
    apply (symbolic links followed, only regular files replaced, missing directories created,
    permissions kept).

    Parameters
    ----------
    path : str or os.PathLike
        Destination; must end in ``.npy`` (:func:`check_npy_path`); a missing directory is
        created.
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
    directory = _existing_directory(os.path.dirname(os.path.realpath(path)))
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
    :func:`atomic_path` apply (symbolic links followed, only regular files replaced, missing
    directories created, permissions kept, clean-up on terminating signals).

    Before anything is written the free space of the directory is checked (the array's bytes
    plus 1 %, at least :data:`FREE_SPACE_MARGIN`) and the file's blocks are allocated
    (``posix_fallocate``), so a full disk raises ``OSError`` (errno ENOSPC) up front instead of
    killing the process with SIGBUS half-way.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; must end in ``.npy`` (:func:`check_npy_path`); a missing directory is
        created.
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
