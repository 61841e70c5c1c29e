"""kernelkit.gram (block-wise Gram matrices, kernelkit/blocked_gram.py) and kernelkit._util.io / atomic (file reading, atomic writes)."""

import contextlib
import errno
import os
import signal
import stat
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkit._util import atomic, io
from kernelkit import blocked_gram as gram_module
from kernelkit.blocked_gram import default_block_size, gram
from kernelkit_math import get_kernel
from tests.cases import N_FEATURES, case_ids
from tests.conftest import TOL

CASES = case_ids()
CASE_IDS = [c[2] for c in CASES]


def reference(name, X, Y=None, **params):
    return get_kernel(name).value(X, Y, **params)


def data(rng, n, d=N_FEATURES, dtype=np.float64):
    return rng.standard_normal((n, d)).astype(dtype)


def assert_same_result(actual, desired, device, dtype="float64"):
    """Two computations of one Gram matrix that differ only in their blocking or destination.

    On the CPU every entry is the float64 reference of its own pair, so the bits are equal. On
    the GPU each block is prepared on its own (centred on its own mean), so the entries agree to
    the rounding of the computation's dtype (float64 data: float64; float32 data: float32)."""
    if device == "cpu":
        np.testing.assert_array_equal(actual, desired)
    else:
        np.testing.assert_allclose(actual, desired, **TOL[dtype])


# ------------------------------------------------------------------ agreement with the registry
@pytest.mark.parametrize("name, params, _id", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    "n_x, n_y, block_size",
    [(1, 1, None), (63, 17, 8), (50, 31, 7), (20, 1, 3), (1, 40, 1)],
    ids=lambda v: str(v),
)
def test_gram_xy_matches_reference(rng, name, params, _id, n_x, n_y, block_size):
    X, Y = data(rng, n_x), data(rng, n_y)
    K = gram(X, Y, name, block_size=block_size, **params)
    assert K.dtype == np.float64 and K.shape == (n_x, n_y)
    np.testing.assert_allclose(K, reference(name, X, Y, **params), **TOL["float64"])


@pytest.mark.parametrize("name, params, _id", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("n, block_size", [(1, None), (63, 8), (64, 64), (50, 7), (37, 1)])
def test_gram_symmetric_exact_across_blocks(rng, name, params, _id, n, block_size):
    X = data(rng, n)
    spec = get_kernel(name)
    K = gram(X, kernel=name, block_size=block_size, **params)
    assert np.array_equal(K, K.T), "K(X, X) must be exactly symmetric"
    assert np.array_equal(np.diag(K), spec.diag(X, **params)), "diagonal must be the exact diag"
    np.testing.assert_allclose(K, reference(name, X, **params), **TOL["float64"])


def test_block_size_does_not_change_the_result(rng, device):
    X, Y = data(rng, 45), data(rng, 29)
    whole = gram(X, Y, "matern", nu=2.5, length_scale=1.7, device=device)
    for bs in (1, 2, 16, 44, 45, 1000):
        K = gram(X, Y, "matern", nu=2.5, length_scale=1.7, block_size=bs, device=device)
        assert_same_result(K, whole, device)


def test_gamma_none_means_one_over_n_features_in_every_block(rng):
    X = data(rng, 30, d=5)
    K = gram(X, kernel="rbf", block_size=4)
    np.testing.assert_allclose(K, reference("rbf", X, gamma=0.2), **TOL["float64"])


def test_accepts_lists_and_int_arrays():
    K = gram([[0, 1], [2, 3]], [[1, 1]], "linear")
    np.testing.assert_array_equal(K, [[1.0], [5.0]])


def test_float32_input_in_memory_is_float64(rng, device):
    """The result is float64; its values are float64-exact on the CPU and the accurate float32
    mode's on the GPU (float32 data run the float32 kernel there)."""
    X = data(rng, 10, dtype=np.float32)
    K = gram(X, kernel="rbf", gamma=0.3, device=device)
    assert K.dtype == np.float64
    tol = TOL["float64" if device == "cpu" else "float32"]
    np.testing.assert_allclose(K, reference("rbf", X.astype(np.float64), gamma=0.3), **tol)
    assert np.array_equal(np.diag(K), np.ones(10))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 40), block_size=st.integers(1, 45),
    name=st.sampled_from(["rbf", "polynomial", "cosine", "sigmoid", "laplacian"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_symmetry_and_diag(n, block_size, name, seed):
    X = np.random.default_rng(seed).standard_normal((n, 4))
    K = gram(X, kernel=name, block_size=block_size)
    assert np.array_equal(K, K.T)
    assert np.array_equal(np.diag(K), get_kernel(name).diag(X))


# ------------------------------------------------------------------------------- out= files
@pytest.mark.parametrize("symmetric", [True, False], ids=["Y=None", "Y"])
def test_out_writes_loadable_npy_equal_to_memory(rng, tmp_path, symmetric, device):
    X = data(rng, 41)
    Y = None if symmetric else data(rng, 23)
    target = tmp_path / "K.npy"
    result = gram(X, Y, "rbf", out=target, block_size=6, gamma=0.3, device=device)
    assert result == str(target)
    K = np.load(target)
    assert K.dtype == np.float64
    # K(X, X) goes to a file in square tiles, to memory in row strips
    assert_same_result(K, gram(X, Y, "rbf", block_size=6, gamma=0.3, device=device), device)
    assert sorted(os.listdir(tmp_path)) == ["K.npy"], "no temporary file may be left behind"


def test_out_accepts_str_path(rng, tmp_path):
    X = data(rng, 5)
    target = str(tmp_path / "K.npy")
    assert gram(X, kernel="linear", out=target) == target
    np.testing.assert_allclose(np.load(target), X @ X.T, **TOL["float64"])


def test_float32_inputs_give_float32_file(rng, tmp_path):
    X, Y = data(rng, 33, dtype=np.float32), data(rng, 12, dtype=np.float32)
    gram(X, Y, "laplacian", out=tmp_path / "K.npy", block_size=5, gamma=0.5)
    K = np.load(tmp_path / "K.npy")
    assert K.dtype == np.float32
    np.testing.assert_array_equal(K, gram(X, Y, "laplacian", gamma=0.5).astype(np.float32))
    # symmetric float32 file: still exactly symmetric with the (rounded) exact diagonal
    gram(X, kernel="sigmoid", out=tmp_path / "S.npy", block_size=4)
    S = np.load(tmp_path / "S.npy")
    assert S.dtype == np.float32 and np.array_equal(S, S.T)
    assert np.array_equal(np.diag(S), get_kernel("sigmoid").diag(X).astype(np.float32))


def test_mixed_float32_float64_gives_float64_file(rng, tmp_path):
    X, Y = data(rng, 4, dtype=np.float32), data(rng, 3)
    gram(X, Y, "rbf", out=tmp_path / "K.npy")
    assert np.load(tmp_path / "K.npy").dtype == np.float64


def test_out_overwrites_existing_file_atomically(rng, tmp_path):
    target = tmp_path / "K.npy"
    np.save(target, np.zeros(3))
    X = data(rng, 6)
    gram(X, kernel="rbf", out=target)
    assert np.load(target).shape == (6, 6)
    assert sorted(os.listdir(tmp_path)) == ["K.npy"]


def _fail_on_call(monkeypatch, n_ok):
    """Make the block evaluator raise on call number ``n_ok + 1``; return the call counter."""
    real = gram_module._block_value
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > n_ok:
            raise RuntimeError("simulated failure mid-way")
        return real(*args, **kwargs)

    monkeypatch.setattr(gram_module, "_block_value", flaky)
    return calls


@pytest.mark.parametrize("symmetric", [True, False], ids=["Y=None", "Y"])
def test_failure_mid_way_leaves_no_file(rng, tmp_path, monkeypatch, symmetric):
    X = data(rng, 40)
    Y = None if symmetric else data(rng, 9)
    calls = _fail_on_call(monkeypatch, n_ok=3)
    with pytest.raises(RuntimeError, match="simulated"):
        gram(X, Y, "rbf", out=tmp_path / "K.npy", block_size=4)
    assert calls["n"] == 4, "the failure must happen after some blocks were written"
    assert os.listdir(tmp_path) == [], "neither the final file nor a temporary file may remain"


def test_failure_keeps_previous_file(rng, tmp_path, monkeypatch):
    target = tmp_path / "K.npy"
    np.save(target, np.arange(4.0))
    _fail_on_call(monkeypatch, n_ok=1)
    with pytest.raises(RuntimeError):
        gram(data(rng, 20), kernel="rbf", out=target, block_size=3)
    np.testing.assert_array_equal(np.load(target), np.arange(4.0))
    assert sorted(os.listdir(tmp_path)) == ["K.npy"]


def test_keyboard_interrupt_leaves_no_file(rng, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gram_module, "_block_value", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gram(data(rng, 5), kernel="rbf", out=tmp_path / "K.npy")
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------- out of memory
def _out_of_memory_above(monkeypatch, max_rows):
    """Make every block of more than ``max_rows`` rows raise MemoryError; record block heights."""
    real = gram_module._block_value
    heights = []

    def limited(spec, A, *args, **kwargs):
        heights.append(A.shape[0])
        if A.shape[0] > max_rows:
            raise MemoryError("simulated: block too large")
        return real(spec, A, *args, **kwargs)

    monkeypatch.setattr(gram_module, "_block_value", limited)
    return heights


@pytest.mark.parametrize("symmetric", [True, False], ids=["Y=None", "Y"])
def test_out_of_memory_block_is_retried_smaller(rng, tmp_path, monkeypatch, symmetric):
    X = data(rng, 37)
    Y = None if symmetric else data(rng, 11)
    expected = gram(X, Y, "rbf", block_size=37, gamma=0.3)
    heights = _out_of_memory_above(monkeypatch, max_rows=5)
    K = np.load(gram(X, Y, "rbf", out=tmp_path / "K.npy", block_size=32, gamma=0.3))
    assert max(heights) == 32 and 4 in heights, "32 -> 16 -> 8 -> 4 rows"
    np.testing.assert_allclose(K, expected, rtol=1e-14, atol=0)
    if symmetric:
        np.testing.assert_array_equal(K, K.T)
        np.testing.assert_array_equal(np.diag(K), np.ones(37))


def test_out_of_memory_on_a_single_row_is_raised(rng, tmp_path, monkeypatch):
    _out_of_memory_above(monkeypatch, max_rows=0)
    with pytest.raises(MemoryError, match="simulated"):
        gram(data(rng, 6), kernel="rbf", out=tmp_path / "K.npy", block_size=4)
    assert os.listdir(tmp_path) == []


def test_other_errors_are_not_retried(rng, tmp_path, monkeypatch):
    calls = _fail_on_call(monkeypatch, n_ok=0)
    with pytest.raises(RuntimeError, match="simulated failure"):
        gram(data(rng, 8), kernel="rbf", block_size=4)
    assert calls["n"] == 1


def test_default_block_size_on_cuda_respects_free_gpu_memory(monkeypatch):
    monkeypatch.setattr(gram_module, "_free_gpu_bytes", lambda: 64 * 2**20)
    rows = default_block_size(10**6, 10**5, device="cuda")
    assert rows == 16 * 2**20 // (16 * 10**5)
    monkeypatch.setattr(gram_module, "_free_gpu_bytes", lambda: 2**40)
    rows = default_block_size(10**6, 10**5, device="cuda")
    assert rows == gram_module.GPU_MEMORY_BUDGET_BYTES // (16 * 10**5)


# ---------------------------------------------------------------------------- progress bars
def test_progress_true_shows_bar_on_stderr(rng, capsys):
    gram(data(rng, 20), kernel="rbf", block_size=3, progress=True)
    captured = capsys.readouterr()
    assert "gram rbf" in captured.err and captured.out == ""


@pytest.mark.parametrize("progress", [False, None])
def test_no_bar_for_small_or_disabled(rng, capsys, progress):
    gram(data(rng, 20), kernel="rbf", block_size=3, progress=progress)
    assert capsys.readouterr().err == ""


def test_progress_none_shows_bar_for_long_jobs(rng, capsys, monkeypatch):
    monkeypatch.setattr(gram_module, "_LONG_JOB_ENTRIES", 100)
    gram(data(rng, 40), kernel="rbf", block_size=4)  # 10 blocks, > 100 entries
    assert "gram rbf" in capsys.readouterr().err


def test_default_block_size_respects_budget():
    assert default_block_size(10, 10) == 10
    assert default_block_size(10**6, 10**5, memory_budget=2**20) == 1
    rows = default_block_size(10**6, 10_000)
    assert 1 <= rows < 10**6
    assert rows * 10_000 * 48 <= gram_module.MEMORY_BUDGET_BYTES


# -------------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(kernel="nope"), ValueError, "unknown kernel 'nope'"),
        (dict(kernel=3), TypeError, "kernel must be"),
        (dict(block_size=0), ValueError, "block_size"),
        (dict(block_size=2.5), TypeError, "block_size"),
        (dict(block_size=True), TypeError, "block_size"),
        (dict(gamma=-1.0), ValueError, "gamma"),
        (dict(gamma="big"), TypeError, "gamma"),
        (dict(length_scale=2.0), TypeError, "unknown parameter"),
        (dict(progress="yes"), TypeError, "progress"),
        (dict(device="tpu"), ValueError, "device"),
        (dict(device="cuda"), ValueError, "device"),
        (dict(out=3), TypeError, "out"),
        (dict(out=np.empty((4, 4))), TypeError, "out"),
        (dict(out="K.txt"), ValueError, "out must be a path ending in .npy"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_arguments(rng, no_gpu, kwargs, error, match):
    with pytest.raises(error, match=match):
        gram(data(rng, 4), **kwargs)


def test_bad_data_names_the_argument(rng, tmp_path):
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        gram(np.ones(3))
    Y = data(rng, 3)
    Y[1, 1] = np.nan
    with pytest.raises(ValueError, match="Y"):
        gram(data(rng, 3), Y)
    with pytest.raises(ValueError, match="features"):
        gram(data(rng, 3, d=2), data(rng, 3, d=3))
    with pytest.raises(TypeError, match="X"):
        gram([["a", "b"]])
    with pytest.raises(ValueError, match="directory"):
        gram(data(rng, 3), out=tmp_path)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------- io module
def write(path, text):
    path.write_text(text)
    return path


def test_load_csv_with_and_without_header(tmp_path):
    expected = np.array([[1.0, 2.5], [-3.0, 4e-3]])
    plain = write(tmp_path / "a.csv", "1,2.5\n-3,4e-3\n")
    header = write(tmp_path / "b.csv", "x, y\n1, 2.5\n\n-3 ,4e-3\n\n")
    for p in (plain, header):
        X = io.load_matrix(p, "X")
        assert X.dtype == np.float64
        np.testing.assert_array_equal(X, expected)
    single = io.load_matrix(write(tmp_path / "c.csv", "v\n1\n2\n3\n"), "X")
    assert single.shape == (3, 1)


@pytest.mark.parametrize(
    "text, match",
    [
        ("1,2\n3\n", "malformed CSV row at line 2: expected 2 comma-separated values, got 1"),
        ("1,2\n3,abc\n", "non-numeric value 'abc' at line 2, column 2"),
        ("a,b\n1,2\nc,d\n", "non-numeric value 'c' at line 3, column 1"),
        ("1,2\n3,\n", "non-numeric value '' at line 2, column 2"),
        ("x,y\n", "no data rows"),
        ("", "no data rows"),
    ],
)
def test_load_csv_errors(tmp_path, text, match):
    p = write(tmp_path / "bad.csv", text)
    with pytest.raises(ValueError, match=match) as info:
        io.load_matrix(p, "Y")
    assert str(info.value).startswith("Y file") and "bad.csv" in str(info.value)


def test_load_npy_keeps_float32_and_converts_ints(tmp_path):
    np.save(tmp_path / "f.npy", np.ones((2, 3), np.float32))
    np.save(tmp_path / "i.npy", np.arange(6).reshape(3, 2))
    assert io.load_matrix(tmp_path / "f.npy").dtype == np.float32
    X = io.load_matrix(tmp_path / "i.npy")
    assert X.dtype == np.float64
    np.testing.assert_array_equal(X, np.arange(6.0).reshape(3, 2))


def test_load_npy_errors(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="pickled"):
        io.load_matrix(tmp_path / "obj.npy", "X")
    np.save(tmp_path / "vec.npy", np.ones(4))
    with pytest.raises(ValueError, match=r"1-D array .* expected a 2-D array"):
        io.load_matrix(tmp_path / "vec.npy", "X")
    np.save(tmp_path / "s.npy", np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="dtype"):
        io.load_matrix(tmp_path / "s.npy", "X")
    np.save(tmp_path / "c.npy", np.ones((2, 2), complex))
    with pytest.raises(ValueError, match="complex"):
        io.load_matrix(tmp_path / "c.npy", "X")
    (tmp_path / "junk.npy").write_bytes(b"definitely not numpy")
    with pytest.raises(ValueError, match="junk.npy"):
        io.load_matrix(tmp_path / "junk.npy", "X")
    np.savez(tmp_path / "arch.npz", a=np.ones((2, 2)))
    os.replace(tmp_path / "arch.npz", tmp_path / "arch.npy")
    with pytest.raises(ValueError, match="npz"):
        io.load_matrix(tmp_path / "arch.npy", "X")
    np.save(tmp_path / "empty.npy", np.ones((0, 3)))
    with pytest.raises(ValueError, match="empty"):
        io.load_matrix(tmp_path / "empty.npy", "X")


def test_load_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="X file .*nothere.npy.* does not exist"):
        io.load_matrix(tmp_path / "nothere.npy", "X")
    write(tmp_path / "data.txt", "1,2\n")
    with pytest.raises(ValueError, match="unsupported extension '.txt'"):
        io.load_matrix(tmp_path / "data.txt", "X")
    with pytest.raises(ValueError, match="directory"):
        io.load_matrix(tmp_path, "X")
    with pytest.raises(TypeError, match="X must be a file path"):
        io.load_matrix(3, "X")


def test_load_refuses_files_that_are_not_regular(tmp_path):
    """Issue 18 H: a device or FIFO (also behind a link) is refused before it is opened (a FIFO
    would block np.load forever; tests/test_cli.py runs that case in a subprocess)."""
    (tmp_path / "null.npy").symlink_to(os.devnull)
    with pytest.raises(ValueError, match=r"X file .*null.npy.* is a character device, not a "
                                         r"regular \.npy or \.csv file"):
        io.load_matrix(tmp_path / "null.npy", "X")
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "link.csv").symlink_to(tmp_path / "pipe.csv")
    for name in ("pipe.csv", "link.csv"):
        with pytest.raises(ValueError, match=r"Y file .* is a FIFO \(named pipe\)"):
            io.load_matrix(tmp_path / name, "Y")


def _npy_header(path, shape, descr="<f8"):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": False, "shape": shape})
    return path


@pytest.mark.parametrize("shape", [(10**6, 10**6), (1000, 3), (9,)], ids=str)
def test_load_npy_refuses_a_header_larger_than_the_file(tmp_path, shape):
    """Issue 18 G: a header declaring more data than the file holds is "truncated or corrupt",
    said before the declared array is allocated (8 TB for (10**6, 10**6))."""
    path = _npy_header(tmp_path / "X.npy", shape)
    with open(path, "ab") as f:
        f.write(bytes(64))
    declared = int(np.prod(shape, dtype=object)) * 8
    with pytest.raises(ValueError) as info:
        io.load_matrix(path, "X")
    assert str(info.value) == (
        f"X file {str(path)!r} declares an array of shape {shape} and dtype float64 "
        f"({declared} bytes) but holds only 64 bytes of data; the file is truncated or corrupt")


def test_load_npy_header_checks_pass_complete_files(tmp_path):
    """The size check counts the header exactly: a complete file loads, any version."""
    X = np.arange(6.0).reshape(3, 2)
    for version in ((1, 0), (2, 0), (3, 0)):
        path = tmp_path / f"v{version[0]}.npy"
        with open(path, "wb") as f:
            np.lib.format.write_array(f, X, version=version)
        np.testing.assert_array_equal(io.load_matrix(path, "X"), X)
    with open(tmp_path / "cut.npy", "wb") as f:
        f.write(np.lib.format.MAGIC_PREFIX + b"\x01")
    with pytest.raises(ValueError, match="cut.npy.* is not a valid .npy file"):
        io.load_matrix(tmp_path / "cut.npy", "X")


def test_save_npy_atomic_roundtrip_and_failure(tmp_path, monkeypatch):
    target = tmp_path / "a.npy"
    assert atomic.save_npy_atomic(target, np.arange(5.0)) == str(target)
    np.testing.assert_array_equal(np.load(target), np.arange(5.0))

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(io.np, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        atomic.save_npy_atomic(tmp_path / "b.npy", np.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["a.npy"]


def test_open_npy_memmap_atomic(tmp_path):
    target = tmp_path / "m.npy"
    with atomic.open_npy_memmap_atomic(target, (3, 2), np.float32) as mm:
        mm[:] = 7
        assert not target.exists(), "nothing may appear under the final name before success"
    K = np.load(target)
    assert K.dtype == np.float32 and K.shape == (3, 2) and (K == 7).all()
    with pytest.raises(ZeroDivisionError):
        with atomic.open_npy_memmap_atomic(tmp_path / "n.npy", (2, 2)) as mm:
            mm[0] = 1
            1 / 0
    assert sorted(os.listdir(tmp_path)) == ["m.npy"]


# --------------------------------------------------- data safety of out= (issue 9, items 6-8)
def test_out_refuses_the_memory_mapped_input(rng, tmp_path):
    path = tmp_path / "X.npy"
    np.save(path, data(rng, 12))
    before = path.read_bytes()
    (tmp_path / "link.npy").symlink_to(path)
    os.link(path, tmp_path / "hard.npy")
    X = np.load(path, mmap_mode="r")
    for out in (path, str(path), tmp_path / "link.npy", tmp_path / "hard.npy"):
        with pytest.raises(ValueError, match=r"out .* is the input X .*destroy the input"):
            gram(X, kernel="rbf", out=out)
        with pytest.raises(ValueError, match="is the input Y"):
            gram(data(rng, 3), X[1:5], kernel="rbf", out=out)  # a view of the map counts too
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["X.npy", "hard.npy", "link.npy"]


def test_out_keeps_the_permission_bits_of_a_replaced_file(rng, tmp_path):
    target = tmp_path / "K.npy"
    np.save(target, np.zeros(3))
    os.chmod(target, 0o604)
    gram(data(rng, 5), kernel="rbf", out=target)
    assert np.load(target).shape == (5, 5)
    assert os.stat(target).st_mode & 0o7777 == 0o604
    os.chmod(target, 0o444)  # read-only: still replaced (as by a rename), still read-only
    gram(data(rng, 4), kernel="rbf", out=target)
    assert np.load(target).shape == (4, 4) and os.stat(target).st_mode & 0o7777 == 0o444


def test_out_symlink_replaces_its_target_and_stays_a_link(rng, tmp_path):
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "K.npy"
    np.save(target, np.zeros(3))
    link = tmp_path / "K.npy"
    link.symlink_to(target)
    X = data(rng, 6)
    assert gram(X, kernel="rbf", out=link) == str(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    np.testing.assert_array_equal(np.load(target), gram(X, kernel="rbf"))
    assert sorted(os.listdir(tmp_path / "store")) == ["K.npy"], "the temporary file goes there"
    dangling = tmp_path / "new.npy"  # a link to a file that does not exist yet
    dangling.symlink_to(tmp_path / "store" / "new.npy")
    gram(X, kernel="rbf", out=dangling)
    assert dangling.is_symlink() and np.load(tmp_path / "store" / "new.npy").shape == (6, 6)


def device_copy(path):
    """A copy of /dev/full at ``path`` (made with mknod, as in the issue's reproduction), or a
    skip where that needs privileges this process lacks. Tests never point an output at a real
    device: as root, a regression would replace /dev/null itself."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    return path


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_out_refuses_a_target_that_is_not_a_regular_file(rng, tmp_path, kind):
    """Issue 18 E: a FIFO or a device, also behind a symbolic link, is refused, not replaced
    by a regular file (as root, a link to /dev/null replaced /dev/null)."""
    node = tmp_path / "node.npy"
    if kind == "a FIFO":
        os.mkfifo(node)
    else:
        device_copy(node)
    (tmp_path / "link.npy").symlink_to(node)
    for name in ("node.npy", "link.npy"):
        with pytest.raises(ValueError, match=rf"out .*{name}.* is {kind}.* not a regular file"):
            gram(data(rng, 4), kernel="rbf", out=tmp_path / name)
        with pytest.raises(ValueError, match="not a regular file"):
            atomic.save_npy_atomic(tmp_path / name, np.ones(2))
        with pytest.raises(ValueError, match="not a regular file"):
            atomic.write_text_atomic(tmp_path / name, "text")
    assert sorted(os.listdir(tmp_path)) == ["link.npy", "node.npy"]
    assert not stat.S_ISREG(os.stat(node).st_mode)


def test_out_creates_missing_directories(rng, tmp_path):
    """Issue 21: a missing output directory is created, parents included."""
    X = data(rng, 5)
    out = tmp_path / "a" / "b" / "K.npy"
    assert gram(X, kernel="rbf", out=out) == str(out)
    np.testing.assert_array_equal(np.load(out), gram(X, kernel="rbf"))
    assert os.listdir(tmp_path / "a" / "b") == ["K.npy"]


def test_out_directories_are_removed_when_the_write_fails(rng, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("block failed")

    monkeypatch.setattr(gram_module, "_block_value", broken)
    (tmp_path / "a").mkdir()
    with pytest.raises(RuntimeError, match="block failed"):
        gram(data(rng, 5), kernel="rbf", out=tmp_path / "a" / "b" / "c" / "K.npy")
    assert os.listdir(tmp_path) == ["a"] and os.listdir(tmp_path / "a") == [], \
        "only the directories the write created are removed"
    monkeypatch.setattr(atomic, "free_bytes", lambda directory: 0)
    with pytest.raises(OSError, match="not enough free disk space"):
        gram(data(rng, 5), kernel="rbf", out=tmp_path / "new" / "K.npy")
    assert os.listdir(tmp_path) == ["a"]


def test_out_directory_must_be_able_to_hold_the_file(rng, tmp_path, monkeypatch):
    """Issue 21: /proc/K.npy was "not enough free disk space ... 0 bytes"."""
    X = data(rng, 4)
    if os.path.isdir("/proc"):
        with pytest.raises(ValueError, match=r"out '/proc/K.npy': '/proc' is on a file system "
                                             r"without storage \(such as /proc or /sys\)"):
            gram(X, kernel="rbf", out="/proc/K.npy")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"out .*: '.*file' is not a directory"):
        gram(X, kernel="rbf", out=tmp_path / "file" / "sub" / "K.npy")
    real_access = os.access
    monkeypatch.setattr(io.os, "access",  # a read-only directory (root may write anywhere)
                        lambda p, mode: False if str(p) == str(tmp_path) else real_access(p, mode))
    with pytest.raises(PermissionError, match=r"out .*new.*K.npy.* is not a writable directory"):
        gram(X, kernel="rbf", out=tmp_path / "new" / "K.npy")
    assert os.listdir(tmp_path) == ["file"]


def test_out_too_little_disk_space_is_a_clear_oserror(rng, tmp_path, monkeypatch):
    seen = []

    def probe(directory):
        seen.append(directory)
        return 10_000

    monkeypatch.setattr(atomic, "free_bytes", probe)
    target = tmp_path / "K.npy"
    with pytest.raises(OSError) as info:
        gram(data(rng, 300), kernel="rbf", out=target)
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert str(target) in message and "720000 bytes" in message  # 300 * 300 * 8 bytes
    assert "10000 bytes" in message and "available" in message
    assert seen == [str(tmp_path)]
    assert os.listdir(tmp_path) == [], "no temporary file may remain"


def test_out_blocks_are_allocated_before_writing(rng, tmp_path, monkeypatch):
    allocated = []
    real_value = gram_module._block_value

    def value(*args, **kwargs):  # the temporary file as the first block is computed
        if not allocated:
            (tmp,) = [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
            allocated.append((os.stat(tmp).st_blocks * 512, os.stat(tmp).st_size))
        return real_value(*args, **kwargs)

    monkeypatch.setattr(gram_module, "_block_value", value)
    gram(data(rng, 400), kernel="rbf", out=tmp_path / "K.npy")
    blocks, size = allocated[0]
    assert size > 400 * 400 * 8 and blocks >= size, "the file must not be sparse"


def test_out_allocation_failure_is_a_clear_oserror(rng, tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "posix_fallocate", full)
    with pytest.raises(OSError, match="not enough free disk space for .*K.npy") as info:
        gram(data(rng, 20), kernel="rbf", out=tmp_path / "K.npy")
    assert info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


_SIGTERM_CHILD = """
import sys, time
import numpy as np
from kernelkit import blocked_gram as gram_module
real = gram_module._block_value
def slow(*args, **kwargs):
    print("writing", flush=True)
    time.sleep(0.2)
    return real(*args, **kwargs)
gram_module._block_value = slow
gram_module.gram(np.ones((40, 2)) * np.arange(40.0)[:, None], kernel="rbf", out=sys.argv[1],
                 block_size=4)
print("finished", flush=True)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGQUIT],
                         ids=lambda s: signal.Signals(s).name)
def test_signal_mid_write_removes_the_temporary_file(tmp_path, signum):
    """SIGTERM, and (issue 18 I) SIGQUIT, which left the full-size temporary file (SIGHUP:
    tests/test_cli.py)."""
    target = tmp_path / "K.npy"
    np.save(target, np.arange(3.0))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", _SIGTERM_CHILD, str(target)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "writing\n"
        assert len(os.listdir(tmp_path)) == 2, "the temporary file exists during the write"
        child.send_signal(signum)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 128 + signum, err
    assert "finished" not in out and "Traceback" not in err
    assert os.listdir(tmp_path) == ["K.npy"], "no temporary file may remain"
    np.testing.assert_array_equal(np.load(target), np.arange(3.0))


def _handlers():
    return {s: signal.getsignal(s) for s in atomic.TERMINATING_SIGNALS}


def test_signal_handlers_are_set_during_the_write_and_restored(rng, tmp_path, monkeypatch):
    before = _handlers()
    assert {signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT} <= set(atomic.TERMINATING_SIGNALS)
    assert before[signal.SIGINT] is signal.default_int_handler
    defaults = [s for s, h in before.items() if h is signal.SIG_DFL]
    assert signal.SIGHUP in defaults and signal.SIGQUIT in defaults
    seen = []
    real_value = gram_module._block_value

    def value(*args, **kwargs):
        seen.append(_handlers())
        return real_value(*args, **kwargs)

    monkeypatch.setattr(gram_module, "_block_value", value)
    gram(data(rng, 5), kernel="rbf", out=tmp_path / "K.npy")
    during = seen[0]
    assert all(during[s] is not signal.SIG_DFL for s in defaults), "each default one is caught"
    assert during[signal.SIGINT] is signal.default_int_handler, "KeyboardInterrupt stays"
    assert _handlers() == before


def test_sigterm_handlers_are_restored(rng, tmp_path):
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    gram(data(rng, 5), kernel="rbf", out=tmp_path / "K.npy")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def own(signum, frame):
        raise AssertionError("not called")

    seen = []
    real_value = gram_module._block_value
    signal.signal(signal.SIGTERM, own)
    try:
        def value(*args, **kwargs):
            seen.append(signal.getsignal(signal.SIGTERM))
            return real_value(*args, **kwargs)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(gram_module, "_block_value", value)
            gram(data(rng, 5), kernel="rbf", out=tmp_path / "K.npy")
        assert seen and all(h is own for h in seen), "the program's own handler stays in place"
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_out_from_a_worker_thread(rng, tmp_path):
    """Signal handlers can only be set from the main thread: a worker thread still writes."""
    X = data(rng, 9)
    errors = []

    def work():
        try:
            gram(X, kernel="rbf", out=tmp_path / "K.npy")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert errors == []
    np.testing.assert_array_equal(np.load(tmp_path / "K.npy"), gram(X, kernel="rbf"))


class _RowRecorder(np.ndarray):
    """An array that records the rows each assignment touches."""

    def __setitem__(self, key, value):
        rows = key[0] if isinstance(key, tuple) else key
        self.writes.append((rows.start, rows.stop))
        super().__setitem__(key, value)


@pytest.mark.parametrize("block_size", [4, 7, None])
def test_out_writes_row_blocks_front_to_back(rng, tmp_path, monkeypatch, block_size, device):
    recorder = np.full((30, 30), np.nan).view(_RowRecorder)
    recorder.writes = []

    @contextlib.contextmanager
    def fake_memmap(path, shape, dtype):
        yield recorder

    monkeypatch.setattr(gram_module, "open_npy_memmap_atomic", fake_memmap)
    X = data(rng, 30)
    gram(X, kernel="rbf", out=tmp_path / "K.npy", block_size=block_size, device=device)
    height = 30 if block_size is None else block_size
    starts = [start for start, _ in recorder.writes]
    assert starts == sorted(starts), "row blocks are written in order"
    for start, stop in recorder.writes:
        assert stop is not None and stop - start <= height, "no strip across later rows"
    assert_same_result(np.asarray(recorder), gram(X, kernel="rbf", device=device), device)


@pytest.mark.parametrize("name, params, _id", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("n, block_size", [(1, None), (50, 7), (37, 1)])
def test_out_symmetric_exact_every_kernel(rng, tmp_path, name, params, _id, n, block_size):
    X = data(rng, n)
    K = np.load(gram(X, kernel=name, out=tmp_path / "K.npy", block_size=block_size, **params))
    assert np.array_equal(K, K.T), "K(X, X) written to a file must be exactly symmetric"
    assert np.array_equal(np.diag(K), get_kernel(name).diag(X, **params))
    np.testing.assert_allclose(K, reference(name, X, **params), **TOL["float64"])


@pytest.mark.parametrize("name", ["polynomial", "rbf"])
def test_out_symmetric_exact_after_a_retry_with_a_different_tiling(rng, tmp_path, monkeypatch,
                                                                  name):
    """Row block [14, 21) runs out of memory once: blocks of 3 rows follow, and [20, 23) spans
    two tiles of the 7-wide tiling that the earlier blocks used right of their diagonal."""
    real = gram_module._block_value
    diagonal_calls = []

    def once(spec, A, B, *args, **kwargs):
        if B is None:
            diagonal_calls.append(len(A))
            if len(diagonal_calls) == 3:
                raise MemoryError("simulated")
        return real(spec, A, B, *args, **kwargs)

    monkeypatch.setattr(gram_module, "_block_value", once)
    X = data(rng, 33)
    K = np.load(gram(X, kernel=name, out=tmp_path / "K.npy", block_size=7))
    assert diagonal_calls[:4] == [7, 7, 7, 3]
    assert np.array_equal(K, K.T)
    np.testing.assert_allclose(K, reference(name, X), **TOL["float64"])


def test_kernelkit_gram_is_the_function(rng):
    """``kernelkit.gram(X, ...)`` is the function, as users expect (issue 11): its module has a
    name of its own, so no attribute shadows the other."""
    import kernelkit

    X = rng.normal(size=(7, 3))
    assert callable(kernelkit.gram) and kernelkit.gram is gram
    np.testing.assert_array_equal(kernelkit.gram(X, kernel="rbf", gamma=0.5, device="cpu"),
                                  get_kernel("rbf").value(X, gamma=0.5))


@pytest.mark.parametrize("with_y", [False, True])
def test_read_only_input_gives_no_warning_and_stays_unchanged(device, rng, with_y):
    # On the GPU the data go to the device through torch.from_numpy, which warns about read-only
    # arrays; kernelkit only reads them, so a user must see no warning.
    X = rng.normal(size=(9, 3))
    Y = rng.normal(size=(5, 3)) if with_y else None
    before = [a.copy() for a in (X, Y) if a is not None]
    for a in (X, Y):
        if a is not None:
            a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K = gram(X, Y, kernel="rbf", device="auto")
        K_blocked = gram(X, Y, kernel="rbf", block_size=4, device="auto")
    desired = reference("rbf", X, Y)
    np.testing.assert_allclose(K, desired, **TOL["float64"])  # float64 input: float64 on either device
    np.testing.assert_allclose(K_blocked, desired, **TOL["float64"])
    for a, b in zip([a for a in (X, Y) if a is not None], before):
        np.testing.assert_array_equal(a, b)
