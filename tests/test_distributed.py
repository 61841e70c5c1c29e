"""kernelkit over torch.distributed (gloo): 2 and 3 ranks give the single-process results.

Each world size is one spawn of tests/distributed_worker.py per rank (env:// rendezvous on a
free local port); every check of the worker runs in that one spawn, and each test here reads
its results. The Triton products of the workers run on ``--device`` (the CPU under the Triton
interpreter, which the workers switch on themselves, or CUDA); this process runs no Triton
kernel, so the file passes with or without TRITON_INTERPRET=1 here. The expected values are the
float64 references, or the same calls made here on the CPU in a process without a process group
(the single-process code paths). Sizes cover uneven shards (7 rows over 2 and 3 ranks) and
fewer rows than ranks (2 rows).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kernelkit_math import get_kernel
from tests.conftest import TOL
from tests.distributed_worker import gp_fits, inputs, ridge

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "distributed_worker.py"
#: Seconds a whole spawn may take (the workers' own collective timeout is 30 s).
SPAWN_TIMEOUT = 240


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(world, outdir, scenario="checks", device="cpu"):
    """Start ``world`` ranks of the worker, their Triton products on ``device`` (the CPU under
    the interpreter, or CUDA); return their exit codes and outputs (bounded by
    :data:`SPAWN_TIMEOUT`: a hang fails the test, it never blocks the suite)."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRITON_INTERPRET="1")
        if device == "cuda":
            del env["TRITON_INTERPRET"]
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(outdir), scenario, device], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + SPAWN_TIMEOUT
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append(out)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the {world} ranks did not finish within {SPAWN_TIMEOUT} s (a hang)")
    return [p.returncode for p in procs], outputs


def spawn_and_read(world, outdir, scenario="checks", device="cpu"):
    """``(world, [(results, errors) per rank], outdir)``: :func:`spawn`, every rank exiting 0,
    then each rank's saved results and recorded errors."""
    codes, outputs = spawn(world, outdir, scenario=scenario, device=device)
    assert codes == [0] * world, "\n".join(outputs)
    found = []
    for r in range(world):
        with np.load(outdir / f"rank{r}.npz") as f:
            results = {k: f[k] for k in f.files}
        found.append((results, json.loads((outdir / f"rank{r}.json").read_text())))
    return world, found, outdir


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def ranks(request, tmp_path_factory, device):
    """``(world, [(results, errors) per rank], outdir)`` of one spawn of every check."""
    world = request.param
    return spawn_and_read(world, tmp_path_factory.mktemp(f"dist{world}"), device=device)


def _result(ranks, name):
    """The result of check ``name``, after checking every rank has the same bits."""
    _, found, _ = ranks
    for results, errors in found:
        assert name not in errors, errors[name]
    first = found[0][0][name]
    for results, _ in found[1:]:
        np.testing.assert_array_equal(results[name], first)
    return first


def _work(ranks, name):
    """Per rank: [Gram entries, K @ V launcher rows, most rows in one launch, most rows of one
    solver row-block call] (tests/distributed_worker.py's spies)."""
    _, found, _ = ranks
    return np.array([results[f"{name}:work"] for results, _ in found])


def _shares(world, n):
    return [n * (r + 1) // world - n * r // world for r in range(world)]


def _errors(ranks, name):
    """``[type name, message]`` that check ``name`` raised, after checking every rank raised
    the same."""
    _, found, _ = ranks
    raised = [errors.get(name) for _, errors in found]
    assert raised[0] is not None, f"{name} raised nothing"
    assert raised == [raised[0]] * len(raised), raised
    return raised[0]


def _check_matvec(out, kernel, x, y, v, **params):
    """``out`` against the float64 K(x, y) @ v within kernel_matvec's error bound for the dtype
    of ``x`` (tests/test_gpu_matvec.py's ``check_matvec``), wherever it was computed."""
    import torch

    from tests.test_gpu_matvec import check_matvec

    x, y, v = (torch.from_numpy(a) for a in (x, y, v))
    dtype_name = str(x.dtype).replace("torch.", "")
    K = get_kernel(kernel).value(x.double().numpy(), y.double().numpy(), **params)
    check_matvec(torch.from_numpy(out), K, v, dtype_name, kernel, params, x, y)


@pytest.fixture(scope="module")
def data():
    return inputs()


# ------------------------------------------------------------ the digest of the arguments
def _checksum_reference(data):
    """kernelkit_gpu.distributed's checksum of ``data`` (bytes) in Python integers: word i
    (8 bytes, little-endian, zero-padded) XOR i * golden, SplitMix64's finaliser, the sum
    modulo 2**64 (little-endian bytes)."""
    data += bytes(-len(data) % 8)
    total, mod = 0, 2**64
    for i in range(len(data) // 8):
        z = int.from_bytes(data[8 * i:8 * i + 8], "little") ^ (i * 0x9E3779B97F4A7C15 % mod)
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % mod
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB % mod
        total = (total + (z ^ (z >> 31))) % mod
    return total.to_bytes(8, "little")


def test_checksum_is_the_same_on_every_device(device, monkeypatch):
    """Exact 64-bit integer arithmetic on the device (wrapping products, logical shifts), in
    any number of steps: the Python-integer value."""
    import torch

    from kernelkit_gpu import distributed as D

    rng = np.random.default_rng(3)
    for n_bytes in (0, 5, 8, 8 * 13 + 3):  # empty, one padded word, several steps
        data = rng.integers(0, 256, size=n_bytes, dtype=np.uint8)
        want = _checksum_reference(data.tobytes())
        on_device = torch.from_numpy(data).to(device)
        assert D._checksum(on_device) == want, n_bytes
        monkeypatch.setattr(D, "CHECKSUM_WORDS", 2)
        assert D._checksum(on_device) == want, n_bytes
        monkeypatch.undo()


def test_digest_sees_order_values_and_types(device):
    """Equal values in another memory layout or on another device: the same digest; the same
    rows in another order, a swap of two elements, another shape or dtype: another digest."""
    import torch
    from sklearn.gaussian_process.kernels import RBF

    from kernelkit_gpu.distributed import digest

    a = np.arange(24).reshape(6, 4)
    base = digest(a)
    assert digest(a.copy()) == digest(np.asfortranarray(a)) == base
    others = [a[::-1], np.roll(a, 1, axis=0), a.T, a.reshape(4, 6), a.astype(np.int32),
              a.astype(np.float64), a.tolist(), torch.from_numpy(a)]
    assert len({digest(o) for o in others} | {base}) == len(others) + 1
    x = np.linspace(0.0, 1.0, 11)
    swapped = x.copy()
    swapped[[2, 7]] = swapped[[7, 2]]
    assert digest(swapped) != digest(x)
    t = torch.from_numpy(x)
    assert digest(t.to(device)) == digest(t) != digest(torch.from_numpy(swapped))
    assert digest({"a": 1, "b": [2.0, None]}) == digest({"b": [2.0, None], "a": 1})
    assert digest({"a": 1}) != digest({"a": 1.0})
    assert digest(Path("K.npy")) == digest("K.npy") != digest("K2.npy")
    assert digest(RBF(1.0)) == digest(RBF(1.0)) != digest(RBF(2.0))


# ---------------------------------------------------------------------------- kernelkit.gram
@pytest.mark.subprocess
def test_gram_in_memory_equals_one_process(ranks, data):
    import kernelkit

    X, Y = data["X"], data["Y"]
    K = _result(ranks, "gram_xx")
    np.testing.assert_allclose(
        K, kernelkit.gram(X, kernel="rbf", gamma=0.3, block_size=2, device="cpu"), **TOL["float64"])
    assert np.array_equal(K, K.T) and np.all(np.diag(K) == 1.0)
    np.testing.assert_allclose(K, get_kernel("rbf").value(X, gamma=0.3), **TOL["float64"])
    np.testing.assert_allclose(_result(ranks, "gram_xy"),
                               kernelkit.gram(X, Y, kernel="matern", nu=1.5, device="cpu"),
                               **TOL["float64"])
    # 2 rows over 2 or 3 ranks: some ranks own none
    np.testing.assert_allclose(_result(ranks, "gram_small"),
                               kernelkit.gram(data["X2"], device="cpu"), **TOL["float64"])
    # the ranks shared the entries out: every entry computed once, by one rank
    for name, n_cols in [("gram_xx", 7), ("gram_xy", 5), ("gram_small", 2)]:
        entries = _work(ranks, name)[:, 0]
        n_rows = 2 if name == "gram_small" else 7
        assert entries.sum() == n_rows * n_cols and entries.max() < n_rows * n_cols, name


@pytest.mark.subprocess
def test_gram_file_equals_one_process_bit_for_bit(ranks, data, tmp_path):
    import kernelkit

    X32 = data["X"].astype(np.float32)
    single = np.load(kernelkit.gram(X32, out=tmp_path / "K.npy", kernel="laplacian",
                                    block_size=2, device="cpu"))
    K = _result(ranks, "gram_file_xx")
    assert K.dtype == np.float32
    np.testing.assert_array_equal(K, single)
    small = np.load(kernelkit.gram(data["X2"], out=tmp_path / "K2.npy", block_size=1,
                                   device="cpu"))
    np.testing.assert_array_equal(_result(ranks, "gram_file_small"), small)
    assert _work(ranks, "gram_file_xx")[:, 0].max() < 49 == _work(ranks, "gram_file_xx")[:, 0].sum()


@pytest.mark.subprocess
def test_gram_file_of_every_kernel_bit_for_bit(ranks, data, tmp_path, device):
    """Every registry kernel (the dot-product ones included), K(X, X) and K(X, Y), the default
    block size and one larger than a rank's share of the rows: the same file as one process on
    the same device (the CPU's float64 reference, or the GPU's Triton Gram blocks)."""
    import kernelkit
    from kernelkit_math import kernel_names
    from tests.distributed_worker import GRAM_BLOCK_SIZES

    cases = [(name, bs) for name in kernel_names() for bs in GRAM_BLOCK_SIZES]
    for key, Y in [("gram_kernels_xx", None), ("gram_kernels_xy", data["Yg"])]:
        files = _result(ranks, key)
        assert len(files) == len(cases)
        for K, (name, bs) in zip(files, cases):
            single = kernelkit.gram(data["Xg"], Y, kernel=name, block_size=bs, device=device,
                                    out=tmp_path / "K.npy")
            np.testing.assert_array_equal(K, np.load(single), err_msg=f"{key} {name} {bs}")


@pytest.mark.subprocess
def test_gram_refuses_different_arguments(ranks):
    """A permutation of integer rows keeps every sum; a different out path per rank would
    leave a path that was never written: both are refused on every rank, nothing is written."""
    world, _, outdir = ranks
    assert _errors(ranks, "error_gram_order") == [
        "ValueError", f"gram: the ranks passed different arguments: rank 1 of {world} passed a "
        "different X than rank 0; under a process group every rank passes the same full "
        "arguments (the same data, in the same order)"]
    kind, message = _errors(ranks, "error_gram_out")
    assert kind == "ValueError"
    assert message.startswith(f"gram: the ranks passed different arguments: rank 1 of {world} "
                              "passed a different out than rank 0")
    assert not [p for p in os.listdir(outdir) if p.startswith("out")]


@pytest.mark.subprocess
def test_cli_gram_under_a_process_group(ranks, data, tmp_path):
    import kernelkit

    single = np.load(kernelkit.gram(data["X"], out=tmp_path / "K.npy", kernel="laplacian",
                                    block_size=2, device="cpu"))
    np.testing.assert_array_equal(_result(ranks, "cli_gram"), single)


@pytest.mark.subprocess
def test_failed_rank_fails_every_rank_and_leaves_no_file(ranks):
    world, found, outdir = ranks
    for _, errors in found:
        assert errors["error_write"] == ["OSError",
                                         f"rank {world - 1} of {world}: disk went away on purpose"]
    assert not (outdir / "failed").exists()  # the directory made for the output is gone too
    assert not [p for p in os.listdir(outdir) if p.startswith(".") or "tmp" in p]


# -------------------------------------------------------------------- kernelkit_gpu.kernel_matvec
@pytest.mark.subprocess
def test_kernel_matvec_equals_one_process(ranks, data):
    """Against the float64 references, within kernel_matvec's error bound for the dtype."""
    X, Y, V, U, X2 = (data[k] for k in ("X", "Y", "V", "U", "X2"))
    _check_matvec(_result(ranks, "matvec64"), "rbf", X, Y, V, gamma=0.5)
    _check_matvec(_result(ranks, "matvec_t"), "laplacian", Y, X, U)  # K(X, Y).T = K(Y, X)
    _check_matvec(_result(ranks, "matvec_small"), "rbf", X2, Y, V)
    # float32 linear kernel on data at offset 1000: each shard centres on its own mean; the
    # bound includes the conditioning of the float32 dot products
    _check_matvec(_result(ranks, "matvec32"), "linear", X.astype(np.float32),
                  Y.astype(np.float32), V[:, 0].astype(np.float32))
    # each rank launched the Triton product on its own rows only
    world = ranks[0]
    for name, n in [("matvec64", 7), ("matvec32", 7), ("matvec_t", 5), ("matvec_small", 2)]:
        assert _work(ranks, name)[:, 1].tolist() == _shares(world, n), name


@pytest.mark.subprocess
def test_kernel_matvec_streamed_blocks(ranks, data):
    """Each rank holds only its rows of X, Y and V; Y and V travel owner by owner."""
    _check_matvec(_result(ranks, "matvec_streamed"), "rbf", data["X"], data["Y"], data["V"],
                  gamma=0.5)


@pytest.mark.subprocess
def test_kernel_matvec_errors_are_shared(ranks):
    world, found, _ = ranks
    errors = [e for _, e in found]
    # the NaN sits in the last rank's rows: that rank found it, every rank raised it
    want = ["ValueError", f"rank {world - 1} of {world}: x contains NaN or infinity"]
    for e in errors:
        assert e["error_nan_rows"][0] == want[0] and e["error_nan_rows"][1].startswith(want[1])
    different = "kernel_matvec: the ranks passed different arguments: rank 1 of {} passed a " \
                "different {} than rank 0; under a process group every rank passes the same " \
                "full arguments (the same data, in the same order)"
    assert _errors(ranks, "error_shapes") == ["ValueError", different.format(world, "x")]
    assert _errors(ranks, "error_values") == ["ValueError", different.format(world, "v")]
    # integer-valued rows in another order on rank 1: equal sums, different data
    assert _errors(ranks, "error_matvec_order") == ["ValueError", different.format(world, "x")]


@pytest.mark.subprocess
def test_local_turns_the_group_off(ranks, data):
    """Inside local() each rank computed its own row alone (different on every rank)."""
    world, found, _ = ranks
    for rank, (results, _) in enumerate(found):
        _check_matvec(results["local"], "rbf", data["X"][rank:rank + 1], data["Y"], data["V"])


@pytest.mark.subprocess
def test_shared_errors_keep_their_type(ranks):
    """An error type that takes no single message is raised as its nearest built-in base that
    does (UnicodeDecodeError: UnicodeError, a ValueError); another package's ValueError
    subclass as ValueError."""
    world, _, _ = ranks
    assert _errors(ranks, "error_unicode") == [
        "UnicodeError", f"rank {world - 1} of {world}: 'utf-8' codec can't decode byte 0xff in "
        "position 0: invalid start byte"]
    assert _errors(ranks, "error_foreign_value") == [
        "ValueError", f"rank {world - 1} of {world}: refused on purpose"]


# ---------------------------------------------------------------------------- KernelRidge
@pytest.mark.subprocess
def test_kernel_ridge_nystrom_equals_one_process(ranks, data):
    Xr, yr = data["Xr"], data["yr"]
    model = ridge(solver="nystrom", n_components=12, random_state=0)
    single = model.fit(Xr, yr, sample_weight=data["w"]).predict(Xr[:5])
    # tol=1e-10 on the preconditioned system: the solutions agree to about 1e-8 relative
    np.testing.assert_allclose(_result(ranks, "ridge_nystrom"), single, rtol=1e-7, atol=1e-9)
    coef = ridge(solver="nystrom", n_components=12, random_state=0).fit(Xr, yr[:, 0]).dual_coef_
    np.testing.assert_allclose(_result(ranks, "ridge_nystrom_coef"), coef, rtol=1e-6, atol=1e-8)
    # random_state=None: rank 0's landmarks on every rank, so the coefficients are equal
    assert _result(ranks, "ridge_unseeded").shape == (12,)
    # K_nM was streamed by rank over its own rows (40 in all)
    for name in ("ridge_nystrom", "ridge_nystrom_coef", "ridge_unseeded"):
        assert _work(ranks, name)[:, 3].tolist() == _shares(ranks[0], 40), name


@pytest.mark.subprocess
def test_kernel_ridge_cg_equals_one_process(ranks, data):
    Xr, yr = data["Xr"], data["yr"]
    coef = ridge(solver="cg", n_components=8, random_state=0).fit(Xr, yr[:, 0]).dual_coef_
    np.testing.assert_allclose(_result(ranks, "ridge_cg"), coef, rtol=1e-7, atol=1e-9)


@pytest.mark.subprocess
def test_kernel_ridge_cg_sharded_products(ranks, data):
    """solver="cg" with the Triton products: K @ P sharded by kernel_matvec over the ranks."""
    X, y = data["Xr"][:10], data["yr"][:10, 0]
    model = ridge(solver="cg")
    exact = np.linalg.solve(get_kernel("rbf").value(X, gamma=0.5) + model.alpha * np.eye(10), y)
    # CG stops at a true residual of tol ||y||: the coefficients are then within
    # tol ||y|| / alpha (the smallest eigenvalue of K + alpha I is above alpha)
    np.testing.assert_allclose(_result(ranks, "ridge_cg_triton"), exact, rtol=0,
                               atol=model.tol * np.linalg.norm(y) / model.alpha)
    # every product K @ P ran on the rank's own rows of the 10
    assert _work(ranks, "ridge_cg_triton")[:, 2].tolist() == _shares(ranks[0], 10)


@pytest.mark.subprocess
def test_kernel_ridge_memory_decisions_are_rank0s(ranks, data):
    """n_components="auto", the memory plan and the dense fallback from rank 0's free memory
    while every other rank reads too little for any plan: the one-process fit; rank 0 short of
    memory: its refusal on every rank."""
    model = ridge(solver="nystrom", n_components="auto", max_iter=2, tol=1e-30, random_state=0)
    model.fit(data["Xr"], data["yr"][:, 0])
    got = _result(ranks, "ridge_memory")
    assert got[:2].tolist() == [model.n_components_, True] and model.dense_fallback_
    np.testing.assert_allclose(got[2:], model.dual_coef_, rtol=1e-6, atol=1e-8)
    world = ranks[0]
    kind, message = _errors(ranks, "error_ridge_plan")
    assert kind == "ValueError"
    assert message.startswith(f"rank 0 of {world}: KernelRidge: this fit needs about")


@pytest.mark.subprocess
def test_kernel_ridge_checks_its_arguments_on_every_rank(ranks):
    """A NaN in one rank's y: its error on every rank, at once; different y: refused."""
    world, _, _ = ranks
    kind, message = _errors(ranks, "error_ridge_nan")
    assert kind == "ValueError"
    assert message.startswith(f"rank {world - 1} of {world}: Input y contains NaN")
    assert _errors(ranks, "error_ridge_data") == [
        "ValueError", f"KernelRidge.fit: the ranks passed different arguments: rank 1 of {world} "
        "passed a different y than rank 0; under a process group every rank passes the same "
        "full arguments (the same data, in the same order)"]


# ---------------------------------------------------------------------- GaussianProcessRegressor
@functools.lru_cache(maxsize=None)
def _gp_single(name, device):
    """The one-process result of GP check ``name`` (computed once for both world sizes). On the
    CPU, gp_fused is the same fit without the fused pass (the parent may run without the Triton
    interpreter); on CUDA it is the same fused fit in one process: the iterative path's probes
    come from the fit device's generator, so CPU and CUDA estimates differ by their spread."""
    return gp_fits(inputs(), fused_device="cuda" if device == "cuda" else None)[name]()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name",
    ["gp_fit", "gp_uneven", "gp_small", "gp_exact", "gp_float32", "gp_chunked", "gp_fused"])
def test_gp_equals_one_process(ranks, data, name, device):
    """Hyperparameters, log-likelihood, alpha_, predictive mean and std and the LML gradient:
    equal on every rank and to one process. gp_fit: iterative path (exact_max_n=0), 40 rows,
    L-BFGS; gp_uneven: 7 offset rows (uneven shards), two targets; gp_small: 2 rows (a rank
    with none on 3 ranks); gp_exact: the dense Cholesky path, rank 0's result broadcast;
    gp_float32: float32 blocks (the float64 true residual of CG sharded too); gp_chunked: no
    dense K, chunks of 2 rows (boundaries inside the shards); gp_fused: the gradient's
    contractions from the fused pass (on --device) on each rank's rows, all-reduced."""
    single = _gp_single(name, device)
    # The sharded products differ from one process's only in the rounding of the row-block
    # matrix products, so CG may stop an iteration apart: the results agree to the CG tolerance
    # times the condition of K (< 1e3 here). float64: cg_tol=1e-10, so 1e-6; float32
    # (gp_float32: blocks and K @ V in float32, eps 1.2e-7): cg_tol=1e-6, so 1e-3 (seen: 2e-7)
    tol = dict(rtol=1e-3, atol=1e-5) if name == "gp_float32" else dict(rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(_result(ranks, name), single, **tol)


@pytest.mark.subprocess
def test_gp_products_are_row_sharded(ranks):
    """Every K @ V of an iterative-path fit, and the predictive mean's k(Z, X) blocks, ran on
    this rank's rows of the 7 only."""
    world, found, _ = ranks
    shares = _shares(world, 7)
    for r, (results, errors) in enumerate(found):
        assert "gp_rows" not in errors, errors["gp_rows"]
        lo, hi, fewest, most, calls, cross_min, cross_max = results["gp_rows"].tolist()
        assert (lo, hi) == (7 * r // world, 7 * (r + 1) // world)
        assert fewest == most == shares[r] and calls > 0
        assert cross_min == cross_max == shares[r]


@pytest.mark.subprocess
def test_gp_errors_are_shared(ranks):
    """A rank that raises in its rows makes every rank raise the same error, at once; ranks
    passing different y all get a ValueError; unseeded draws are rank 0's."""
    world, found, _ = ranks
    for _, errors in found:
        assert errors["error_gp_rank"] == [
            "MemoryError", f"rank {world - 1} of {world}: injected: no memory for this rank's rows"]
    different = "GaussianProcessRegressor.{}: the ranks passed different arguments: rank 1 of " \
                "{} passed a different {} than rank 0; under a process group every rank " \
                "passes the same full arguments (the same data, in the same order)"
    assert _errors(ranks, "error_gp_data") == ["ValueError", different.format("fit", world, "y")]
    kind, message = _errors(ranks, "error_gp_nan")  # in the last rank's y only
    assert kind == "ValueError"
    assert message.startswith(f"rank {world - 1} of {world}: Input y contains NaN")
    # predict, sample_y and log_marginal_likelihood: other test points (as many, or more),
    # number of draws or theta
    for name, method, arg in [("error_gp_predict", "predict", "X"),
                              ("error_gp_predict_rows", "predict", "X"),
                              ("error_gp_sample", "sample_y", "n_samples"),
                              ("error_gp_lml", "log_marginal_likelihood", "theta")]:
        assert _errors(ranks, name) == ["ValueError", different.format(method, world, arg)]
    # random_state=None with a restart: the same probes and starts on every rank; unseeded
    # posterior draws: rank 0's on every rank
    assert _result(ranks, "gp_unseeded").shape == (9,)
    assert _result(ranks, "gp_sample_unseeded").shape == (3, 2)
    # a LinAlgError on one rank: fit raises it on every rank, the L-BFGS objective is -inf
    np.testing.assert_array_equal(_result(ranks, "gp_linalg"), [1.0, -np.inf])


# ---------------------------------------------------------------------------- a rank that dies
@pytest.mark.subprocess
def test_dead_rank_fails_the_others_and_leaves_no_file(tmp_path):
    """The last of 2 ranks exits mid-write: rank 0 fails (no hang), removing the temp file."""
    codes, outputs = spawn(2, tmp_path, "die")
    assert codes[1] == 3
    assert codes[0] == 0, outputs[0]  # the worker records the error and exits normally
    errors = json.loads((tmp_path / "rank0.json").read_text())
    assert "die" in errors, outputs[0]
    assert not (tmp_path / "died").exists()
    assert sorted(os.listdir(tmp_path)) == ["rank0.json", "rank0.npz"]


# ---------------------------------------------------------------------------- torchrun
@pytest.mark.subprocess
def test_torchrun_kernelkit_gram(tmp_path, data):
    """``torchrun --standalone --nproc_per_node 2 -m kernelkit gram``: the CLI sets up its own
    process group (env://, gloo on the CPU); the file equals the single-process one."""
    import kernelkit

    np.save(tmp_path / "X.npy", data["X"])
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "kernelkit", "gram", str(tmp_path / "X.npy"), "--kernel", "laplacian",
         "--block-size", "3", "--device", "cpu", "--out", str(tmp_path / "out" / "K.npy")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=SPAWN_TIMEOUT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("wrote ") == 1  # rank 0 reports
    single = kernelkit.gram(data["X"], out=tmp_path / "K1.npy", kernel="laplacian", block_size=3,
                            device="cpu")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "K.npy"), np.load(single))
