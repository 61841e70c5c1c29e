"""Attention inputs for the comparison tools: read q, k, v from a file, or make synthetic ones.

- :func:`load_qkv` reads ``q``, ``k``, ``v`` from ``.npz``, ``.pt`` / ``.pth`` or
  ``.safetensors`` and normalises them to (B, H, T, D), with errors that name the file, the
  array and its shape.
- :func:`synthetic_qkv` draws Gaussian q, k, v whose scaled scores have a chosen spread, so the
  softmax weights are diffuse (low temperature) or peaky (high temperature).

torch and safetensors are imported only when a file needs them.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib

import numpy as np

__all__ = ["load_qkv", "qkv_shapes", "synthetic_qkv", "QKV_SUFFIXES"]

#: File types :func:`load_qkv` reads.
QKV_SUFFIXES = (".npz", ".pt", ".pth", ".safetensors")

_NAMES = ("q", "k", "v")
_LEGEND = {2: "(T, D)", 3: "(H, T, D)", 4: "(B, H, T, D)"}


#: What reading a damaged .npz raises (zip structure, compressed stream, .npy header).
_NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)


def _read_npz(path, where, data=True):
    try:
        archive = np.load(path, allow_pickle=False)
    except _NPZ_ERRORS as exc:
        # np.load calls any file that is neither .npy nor a zip archive "pickled data".
        raise ValueError(
            f"{where} is not a valid .npz archive ({exc}); kernelkit never unpickles files: "
            "save arrays with np.savez(path, q=q, k=k, v=v)"
        ) from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{where} holds a single .npy array, not an .npz archive of q, k, v")
    with archive:
        found = list(archive.files)
        arrays = {}
        for name in _NAMES:
            if name not in found:
                continue
            try:
                shape = _check_npz_member(archive, name, where)
                arrays[name] = archive[name] if data else shape
            except _NPZ_ERRORS as exc:
                if "pickle" in str(exc).lower():  # an object array inside the archive
                    raise ValueError(
                        f"{where} holds pickled object arrays; kernelkit refuses to unpickle "
                        "data: save numeric arrays with np.savez(path, q=q, k=k, v=v)"
                    ) from None
                if str(exc).startswith(where):  # already names the file
                    raise
                raise ValueError(
                    f"{where}: array {name!r} could not be read; the file is truncated or "
                    f"corrupt ({type(exc).__name__}: {exc})"
                ) from None
        return arrays, found


def _check_npz_member(archive, name, where):
    """The shape that array ``name``'s .npy header declares, read without its data; a shape
    whose bytes exceed what the archive holds for the member is refused (truncated or corrupt)."""
    info = archive.zip.getinfo(name + ".npy")
    with archive.zip.open(info) as f:
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _fortran_order, dtype = read_header(f)
        header_bytes = f.tell()
    declared = math.prod(shape) * dtype.itemsize
    held = info.file_size - header_bytes
    if declared > held:
        raise ValueError(
            f"{where}: array {name!r} declares shape {shape} of {dtype} ({declared} bytes) but "
            f"the file holds only {held} bytes of it; the file is truncated or corrupt"
        )
    return shape


def _npz_shapes(path, where):
    """{name: declared shape} of q, k, v in an .npz, from the .npy headers alone."""
    return _read_npz(path, where, data=False)


def _pt_shapes(path, where):
    import torch

    try:  # memory-mapped: the shapes without reading the tensors' data
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - not a zip-format torch file; _read_pt says what is wrong
        return None
    if not isinstance(obj, dict):
        return None
    shapes = {n: tuple(obj[n].shape) for n in _NAMES if isinstance(obj.get(n), torch.Tensor)}
    return shapes, [str(key) for key in obj]


def _safetensors_shapes(path, where):
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            found = list(f.keys())
            return {n: tuple(f.get_slice(n).get_shape()) for n in _NAMES if n in found}, found
    except SafetensorError as exc:
        raise ValueError(f"{where} is not a valid .safetensors file: {exc}") from None


def _tensor_to_numpy(t):
    import torch

    t = t.detach().cpu()
    if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = t.float()  # NumPy has no bfloat16 or 8-bit floats; float32 holds them exactly
    return t.numpy()


def _read_pt(path, where):
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt file fails anywhere inside torch.load's unpickler
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(
            f"{where} could not be read as a torch file of tensors (torch.load with "
            f"weights_only=True): {first}"
        ) from None
    if not isinstance(obj, dict):
        raise ValueError(
            f"{where} holds a {type(obj).__name__}; expected a dict of tensors, saved with "
            "torch.save({'q': q, 'k': k, 'v': v}, path)"
        )
    arrays = {}
    for name in _NAMES:
        if name in obj:
            if not isinstance(obj[name], torch.Tensor):
                raise ValueError(
                    f"{where}: {name!r} is a {type(obj[name]).__name__}, not a torch.Tensor"
                )
            arrays[name] = _tensor_to_numpy(obj[name])
    return arrays, [str(key) for key in obj]


def _read_safetensors(path, where):
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            found = list(f.keys())
            dtypes = {name: f.get_slice(name).get_dtype() for name in _NAMES if name in found}
        if any(dt in ("BF16", "F8_E4M3", "F8_E5M2") for dt in dtypes.values()):
            # NumPy cannot hold these dtypes: read through torch, then widen to float32.
            from safetensors.torch import load_file

            return {n: _tensor_to_numpy(t) for n, t in load_file(path).items() if n in _NAMES}, found
        from safetensors.numpy import load_file

        return {n: a for n, a in load_file(path).items() if n in _NAMES}, found
    except SafetensorError as exc:
        raise ValueError(f"{where} is not a valid .safetensors file: {exc}") from None


_READERS = {".npz": _read_npz, ".pt": _read_pt, ".pth": _read_pt, ".safetensors": _read_safetensors}
_SHAPE_READERS = {".npz": _npz_shapes, ".pt": _pt_shapes, ".pth": _pt_shapes,
                  ".safetensors": _safetensors_shapes}


def _check_dtype(arr, name, where):
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{where}: {name} has dtype {arr.dtype}; expected real numbers")
    return arr


def _finite_float(arr, name, where):
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: {name} of shape {arr.shape} holds NaN or infinite values")
    return arr if arr.dtype.kind == "f" else arr.astype(np.float64)


def _fit_shapes(shapes, where):
    """Check that the shapes of q, k, v of one rank fit together; return them as 4-D
    (B, H, T, D) shapes.

    k and v must share every axis but the last, q and k their leading axes (B, H) and D.

    Raises
    ------
    ValueError
        Naming the arrays and their shapes when the ranks differ or the shapes do not match.
    """
    q, k, v = (tuple(shapes[n]) for n in _NAMES)
    for name, shape in zip(_NAMES, (q, k, v)):
        if len(shape) not in _LEGEND:
            raise ValueError(
                f"{where}: {name} has shape {shape} ({len(shape)}-D); expected (B, H, T, D), "
                "(H, T, D) or (T, D)"
            )
        if 0 in shape:
            raise ValueError(f"{where}: {name} has shape {shape}, which is empty")
    if not len(q) == len(k) == len(v):
        listed = ", ".join(f"{n} {s}" for n, s in zip(_NAMES, (q, k, v)))
        raise ValueError(f"{where}: q, k, v must have the same number of axes; got {listed}")
    legend = _LEGEND[len(q)]
    if k[:-1] != v[:-1]:
        raise ValueError(
            f"{where}: v has shape {v} but k has shape {k}; k and v must agree in "
            f"every axis but the last of {legend}"
        )
    if q[:-2] != k[:-2] or q[-1] != k[-1]:
        raise ValueError(
            f"{where}: k has shape {k} but q has shape {q}; q and k must agree in "
            f"every axis of {legend} but T"
        )
    return tuple((1,) * (4 - len(x)) + x for x in (q, k, v))


def _check_path(path):
    """(path as str, "qkv file '...'" for messages, lower-case suffix)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike); got {path!r}")
    path = os.fspath(path)
    where = f"qkv file {path!r}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{where} is a directory")
    if not os.path.isfile(path):  # reading a FIFO would wait for a writer forever
        raise ValueError(f"{where} is not a regular file (a FIFO, socket or device)")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _READERS:
        raise ValueError(
            f"{where} has unsupported extension {suffix or '(none)'!r}; expected one of "
            + ", ".join(QKV_SUFFIXES)
        )
    return path, where, suffix


def _check_present(arrays, found, where):
    missing = [name for name in _NAMES if name not in arrays]
    if missing:
        held = ", ".join(repr(n) for n in sorted(found)) or "nothing"
        raise ValueError(
            f"{where} has no array named {missing[0]!r} (it holds {held}); expected arrays "
            "'q', 'k' and 'v'"
        )


def qkv_shapes(path):
    """The (B, H, T, D) shapes of q, k, v in a file, read from its headers without the data.

    An ``.npz`` or ``.safetensors`` file declares its shapes in headers; a ``.pt`` file saved
    by ``torch.save`` (zip format) is memory-mapped. Use it to plan memory before
    :func:`load_qkv` reads the arrays.

    Parameters
    ----------
    path : str or os.PathLike
        As for :func:`load_qkv`.

    Returns
    -------
    shapes : tuple of three tuples, or None
        The 4-D shapes of q, k and v as :func:`load_qkv` returns them; None for a ``.pt`` file
        whose shapes cannot be read without loading it (an old, non-zip torch file).

    Raises
    ------
    FileNotFoundError, ValueError, TypeError
        As :func:`load_qkv`, for what the headers show: a missing array, a wrong rank, an empty
        or inconsistent shape, a header declaring more data than the file holds.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "qkv.npz")
    >>> np.savez(p, q=np.ones((5, 8)), k=np.ones((7, 8)), v=np.ones((7, 4)))
    >>> qkv_shapes(p)
    ((1, 1, 5, 8), (1, 1, 7, 8), (1, 1, 7, 4))
    """
    path, where, suffix = _check_path(path)
    read = _SHAPE_READERS[suffix](path, where)
    if read is None:
        return None
    shapes, found = read
    _check_present(shapes, found, where)
    return _fit_shapes(shapes, where)


def load_qkv(path):
    """Read q, k, v from a ``.npz``, ``.pt`` / ``.pth`` or ``.safetensors`` file.

    The file holds three arrays named ``q``, ``k`` and ``v`` (other entries are ignored), all
    of shape (B, H, T, D), all (H, T, D) or all (T, D); k and v share their shape up to the
    last axis (Dv may differ from D), and q shares (B, H) and D with k (S may differ from T).

    Parameters
    ----------
    path : str or os.PathLike
        - ``.npz``: ``np.savez(path, q=q, k=k, v=v)`` (pickled arrays are refused);
        - ``.pt`` / ``.pth``: ``torch.save({"q": q, "k": k, "v": v}, path)``, read with
          ``weights_only=True`` so no code in the file runs;
        - ``.safetensors``: ``safetensors.numpy.save_file`` or ``safetensors.torch.save_file``.

    Returns
    -------
    q, k, v : ndarray of shape (B, H, T, D), (B, H, S, D), (B, H, S, Dv)
        3-D inputs get B = 1, 2-D inputs B = H = 1. Floating dtypes are kept (bfloat16 and
        8-bit floats become float32, which holds them exactly); integers become float64.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        For a directory or another non-regular file (a FIFO), an unknown extension, an
        unreadable file, a missing array (the message lists what the file holds), a
        non-numeric, empty, non-finite or wrongly ranked array, or shapes that do not fit
        together. Messages name the file, the array and its shape.
    TypeError
        If ``path`` is not a path.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "qkv.npz")
    >>> np.savez(p, q=np.ones((5, 8)), k=np.ones((7, 8)), v=np.ones((7, 4)))
    >>> [x.shape for x in load_qkv(p)]
    [(1, 1, 5, 8), (1, 1, 7, 8), (1, 1, 7, 4)]
    """
    path, where, suffix = _check_path(path)
    arrays, found = _READERS[suffix](path, where)
    _check_present(arrays, found, where)
    arrays = {name: _check_dtype(np.asarray(arrays[name]), name, where) for name in _NAMES}
    shapes = _fit_shapes({name: a.shape for name, a in arrays.items()}, where)
    return tuple(_finite_float(arrays[name], name, where).reshape(shape)
                 for name, shape in zip(_NAMES, shapes))


def synthetic_qkv(batch, heads, T, d, *, temperature=1.0, seed=0, clusters=None, S=None,
                  dv=None, dtype=np.float32):
    r"""Gaussian q, k, v whose softmax attention is diffuse or peaky.

    q and k have N(0, temperature) entries and v N(0, 1) entries. Without clusters the entries
    are independent, so each scaled score, a sum of D independent products divided by sqrt(D),
    has standard deviation ``temperature``:

    .. math::

        \operatorname{std}\left(\frac{q_i \cdot k_j}{\sqrt{D}}\right) = \text{temperature}

    With temperature 0.5 the weights are close to uniform over the keys; with 4 or more each
    query puts most of its weight on a few keys. Higher temperature also means larger
    ||q||, ||k||, which is what makes positive random features (FAVOR+) noisy. Such attention
    matrices are nearly full-rank (no M-feature method gets close for M much below S).

    With ``clusters=C``, every query and key belongs to one of C random centres c (drawn per
    batch element and head, uniformly) and is sqrt(temperature) (sqrt(3/4) c + sqrt(1/4) g)
    with g ~ N(0, I): each query attends to the keys of its own cluster, a structured, peaky
    pattern whose attention matrix is close to rank C (entries keep variance ``temperature``).

    Parameters
    ----------
    batch, heads, T, d : int
        B, H, query length T and head dimension D; each at least 1.
    temperature : float, default=1.0
        Variance of the q and k entries, the standard deviation of the scaled scores without
        clusters; positive.
    seed : int, default=0
        Seed of the NumPy generator; equal seeds give equal arrays.
    clusters : int or None, default=None
        Number of clusters C of queries and keys; None draws them independently.
    S : int or None, default=None
        Key length; None means T.
    dv : int or None, default=None
        Value dimension Dv; None means D.
    dtype : NumPy float dtype, default=np.float32

    Returns
    -------
    q, k, v : ndarray of shape (B, H, T, D), (B, H, S, D), (B, H, S, Dv)

    Raises
    ------
    ValueError
        For a size below 1, a temperature that is not a positive finite number, or a dtype that
        is not a floating-point type.
    TypeError
        For sizes, clusters or a seed that are not integers.

    Examples
    --------
    >>> q, k, v = synthetic_qkv(1, 2, 64, 16, temperature=4.0, seed=0)
    >>> q.shape, v.dtype
    ((1, 2, 64, 16), dtype('float32'))
    >>> scores = q[0, 0] @ k[0, 0].T / np.sqrt(16)
    >>> bool(abs(scores.std() - 4.0) < 0.5)  # a sample estimate of the spread
    True
    >>> q, k, v = synthetic_qkv(1, 1, 64, 16, temperature=2.0, clusters=4, seed=0)
    >>> q.shape, k.shape
    ((1, 1, 64, 16), (1, 1, 64, 16))
    """
    sizes = {"batch": batch, "heads": heads, "T": T, "d": d,
             "S": T if S is None else S, "dv": d if dv is None else dv}
    if clusters is not None:
        sizes["clusters"] = clusters
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int; got {seed!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.number)) \
            or not np.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a positive finite number; got {temperature!r}")
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"dtype must be a floating-point type; got {dtype}")
    rng = np.random.default_rng(seed)
    B, H, S = sizes["batch"], sizes["heads"], sizes["S"]
    if clusters is None:
        q, k = (rng.standard_normal((B, H, n, d)) for n in (T, S))
    else:
        centres = rng.standard_normal((B, H, clusters, d))

        def draw(n):
            member = rng.integers(0, clusters, size=(B, H, n, 1))
            centre = np.take_along_axis(centres, member, axis=2)
            return math.sqrt(0.75) * centre + 0.5 * rng.standard_normal((B, H, n, d))

        q, k = draw(T), draw(S)
    sd = math.sqrt(temperature)
    v = rng.standard_normal((B, H, S, sizes["dv"]))
    return (sd * q).astype(dtype), (sd * k).astype(dtype), v.astype(dtype)
