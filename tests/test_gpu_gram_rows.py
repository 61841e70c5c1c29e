"""Kernel rows of one point set for many requests: :class:`kernelkit_gpu.GramRows` (the Gram
kernels on points prepared once, kept on the device or streamed to it in chunks) and
:meth:`kernelkit.operators.kernel_operator.KernelOperator.rows_of` over it, with its rule for
keeping the points on the device.

Tolerances: each block is checked against the float64 registry reference with the Gram
kernels' own rule (``check_values``: TOL of the dtype, plus the conditioning of the dot-product
kernels), the contract of :func:`kernelkit_gpu.gram`. A streamed block is the resident one bit
for bit where nothing but the Triton kernels touches the points (distance kernels: the same
preparation kernel row by row, the same tiles); the dot-product kernels' float64 row offsets and
cosine's row normalisation are torch reductions, whose rounding may depend on the number of
rows reduced, so there the two agree to that rule.

Under the Triton interpreter on the CPU, and unchanged on a GPU with ``pytest --device cuda``.
"""

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import ConstantKernel, Matern

import kernelkit
import kernelkit_gpu
from kernelkit.operators import kernel_operator, kernel_tree
from kernelkit_gpu.pairwise import gram_fused as gram_module
from kernelkit_math.registry import get_kernel
from tests.conftest import TOL
from tests.gpu_cases import (CASE_IDS, DTYPES, GPU_CASES, check_values, randn, reference,
                             spy_gram_rows, spy_kernels, to_numpy64)

pytestmark = pytest.mark.usefixtures("triton_can_run")

#: Requested rows: unsorted, a duplicate, both ends of the points.
ROWS = [5, 0, 199, 5, 130, 64]


def _bitwise(name):
    """Whether streamed and resident blocks are equal bit for bit (module docstring)."""
    return get_kernel(name).pairwise in ("sqeuclidean", "manhattan")


@pytest.mark.parametrize("dtype_name,d", [("float64", 3), ("float64", 17), ("float32", 17)])
@pytest.mark.parametrize("case", GPU_CASES, ids=CASE_IDS)
def test_rows_match_the_reference_resident_and_streamed(case, dtype_name, d, device, rng):
    """K(x[rows], x) for every registry kernel, D = 3 (direct differences) and 17 (tensor
    cores), 200 points (streamed: chunks of 128 and 72): the Gram kernels' accuracy rule."""
    _, name, params_fn = case
    params = params_fn(d)
    x = randn(rng, (200, d), DTYPES[dtype_name], device)
    resident = kernelkit_gpu.GramRows(x, name, **params)
    streamed = kernelkit_gpu.GramRows(x, name, chunk_rows=100, **params)
    assert resident.chunk_rows is None and streamed.chunk_rows == 128
    want = reference(name, params, x[ROWS], x)
    for block in (resident(ROWS), streamed(ROWS)):
        assert block.shape == (len(ROWS), 200) and block.device == x.device
        assert block.dtype == (torch.float64 if dtype_name == "float64" else torch.float32)
        check_values(block, want, dtype_name, name, params, x[ROWS], x)
    if _bitwise(name):
        assert torch.equal(resident(ROWS), streamed(ROWS))


def test_rows_from_host_points_streamed_to_the_device(device, rng):
    """Points in host memory, blocks computed on ``device``: on a GPU the points are pinned and
    streamed; the blocks are those of the points copied to the device (both centred on the mean
    computed on the host)."""
    x = randn(rng, (300, 20), torch.float64, "cpu")
    streamed = kernelkit_gpu.GramRows(x, "rbf", device=device, chunk_rows=128, gamma=0.1)
    resident = kernelkit_gpu.GramRows(x, "rbf", device=device, gamma=0.1)
    assert torch.equal(streamed(ROWS), resident(ROWS))
    assert streamed(ROWS).device.type == torch.device(device).type


def test_points_are_prepared_once(device, rng, monkeypatch):
    """The preparation kernel runs over the points once, at construction; a call prepares its
    own rows (test_prepared_rows_are_the_points_own_rows) and launches the tensor-core kernel
    and its fix-up. Streamed, the construction checks each chunk, and a call prepares its rows
    and then each chunk before its tiles."""
    names = ("_gram_prep_kernel", "_gram_mma_kernel", "_gram_fix_kernel")
    calls = spy_kernels(monkeypatch, gram_module, {name: name for name in names})
    x = randn(rng, (200, 20), torch.float64, device)
    rows = kernelkit_gpu.GramRows(x, "rbf", gamma=0.1)
    for _ in range(3):
        rows(ROWS)
    assert [c[0] for c in calls] == ["_gram_prep_kernel"] + [
        "_gram_prep_kernel", "_gram_mma_kernel", "_gram_fix_kernel"] * 3
    calls.clear()
    streamed = kernelkit_gpu.GramRows(x, "rbf", chunk_rows=128, gamma=0.1)
    assert [c[0] for c in calls] == ["_gram_prep_kernel"] * 2
    calls.clear()
    streamed(ROWS)
    assert [c[0] for c in calls] == ["_gram_prep_kernel"] + [
        "_gram_prep_kernel", "_gram_mma_kernel", "_gram_fix_kernel"] * 2


def test_prepared_rows_are_the_points_own_rows(device, rng, monkeypatch):
    """A call's rows, prepared alone, hold the very values (and norms) of the same points in the
    preparation of all N points: the preparation kernel works row by row."""
    buffers = []
    real = gram_module._prep_launch

    def keep(*args, **kwargs):
        buffers.append(real(*args, **kwargs))
        return buffers[-1]

    monkeypatch.setattr(gram_module, "_prep_launch", keep)
    x = randn(rng, (200, 20), torch.float64, device, offset=3.0)
    kernelkit_gpu.GramRows(x, "rbf", gamma=0.1)(ROWS)
    (points, points_norms), (mine, mine_norms) = buffers
    assert torch.equal(mine[:len(ROWS)], points[ROWS])
    assert torch.equal(mine_norms[:len(ROWS)], points_norms[ROWS])


def test_empty_requests_and_points(device, rng):
    x = randn(rng, (50, 4), torch.float32, device)
    assert kernelkit_gpu.GramRows(x, "rbf")([]).shape == (0, 50)
    none = kernelkit_gpu.GramRows(x[:0], "rbf")
    assert none.n == 0 and none(np.zeros(0, dtype=int)).shape == (0, 0)


def test_inputs_not_modified(device, rng):
    x = randn(rng, (200, 20), torch.float64, device, offset=5.0)
    rows = np.array(ROWS[:4])
    kept = x.clone(), rows.copy()
    for chunk in (None, 128):
        kernelkit_gpu.GramRows(x, "rbf", chunk_rows=chunk)(rows)
    assert torch.equal(x, kept[0]) and np.array_equal(rows, kept[1])


# the interpreter computes on the bad values before the flag is read
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("chunk", [None, 128], ids=["resident", "streamed"])
def test_bad_data_is_refused_once_at_construction(device, rng, chunk):
    """NaN / infinity and float32 values whose squares overflow: the messages of ``gram``;
    inside ``assume_finite`` nothing is checked (and nothing waits for the device)."""
    x = randn(rng, (150, 20), torch.float32, device)
    bad = x.clone()
    bad[140, 3] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN or infinity"):
        kernelkit_gpu.GramRows(bad, "rbf", chunk_rows=chunk)
    bad[140, 3] = 1e30
    with pytest.raises(ValueError, match="x is out of range for float32 arithmetic"):
        kernelkit_gpu.GramRows(bad, "rbf", chunk_rows=chunk)
    bad[140, 3] = float("inf")
    with kernelkit_gpu.assume_finite():
        kernelkit_gpu.GramRows(bad, "rbf", chunk_rows=chunk)


@pytest.mark.parametrize("rows,error,match", [
    ([[1, 2]], TypeError, r"rows must be a 1-D array of integers; got an array of dtype int64 "
                          r"and shape \(1, 2\)"),
    ([1.0, 2.0], TypeError, "rows must be a 1-D array of integers; got an array of dtype float64"),
    ([True, False], TypeError, "dtype bool"),
    ([0, 30], ValueError, r"rows must be in \[0, 30\); got values from 0 to 30"),
    ([-1, 3], ValueError, r"rows must be in \[0, 30\); got values from -1 to 3"),
])
def test_bad_rows(device, rng, rows, error, match):
    grows = kernelkit_gpu.GramRows(randn(rng, (30, 3), torch.float32, device), "rbf")
    with pytest.raises(error, match=match):
        grows(rows)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(chunk_rows=0), ValueError, "chunk_rows must be None or an integer >= 1; got 0"),
    (dict(chunk_rows=True), ValueError, "chunk_rows must be None or an integer >= 1; got True"),
    (dict(chunk_rows=2.5), ValueError, "chunk_rows must be None or an integer >= 1; got 2.5"),
    (dict(device="gpu"), ValueError, "device must be a torch.device or a device string such as "
                                     "'cuda'; got 'gpu'"),
    (dict(device="meta"), ValueError, "device must be a CUDA device, or the CPU with the Triton "
                                      "interpreter on"),
    (dict(kernel="nope"), ValueError, "nope"),
    (dict(precision="exact"), ValueError, "precision must be 'accurate' or 'fast'"),
    (dict(gamma=-1.0), ValueError, "gamma"),
])
def test_bad_arguments(device, rng, kwargs, error, match):
    x = randn(rng, (30, 3), torch.float32, device)
    kernel = kwargs.pop("kernel", "rbf")
    with pytest.raises(error, match=match):
        kernelkit_gpu.GramRows(x, kernel, **kwargs)


def test_rows_off_the_host_are_refused(device, rng):
    """Rows are checked on the host, never by a wait for the device."""
    grows = kernelkit_gpu.GramRows(randn(rng, (30, 3), torch.float32, device), "rbf")
    with pytest.raises(ValueError, match="rows must be on the host .* got a tensor on meta"):
        grows(torch.arange(3, device="meta"))


# ------------------------------------------------------------------ KernelOperator.rows_of
#: (id, kernel structure, the kernel's float64 values of NumPy operands)
def _operator_cases():
    tree = kernelkit.RBF(length_scale=1.5) + ConstantKernel(0.5) * Matern(length_scale=2.0,
                                                                          nu=1.5)
    cases = [("rbf", kernel_tree.registry_kernel("rbf", {"gamma": 0.05}),
              lambda A, B: get_kernel("rbf").value(A, B, gamma=0.05)),
             ("linear", kernel_tree.registry_kernel("linear", {}),
              lambda A, B: get_kernel("linear").value(A, B)),
             ("laplacian", kernel_tree.registry_kernel("laplacian", {"gamma": 0.1}),
              lambda A, B: get_kernel("laplacian").value(A, B, gamma=0.1)),
             ("tree", kernel_tree.kernel_part(kernel_tree.parse_kernel(tree, 20)), tree)]
    return cases


OPERATOR_CASES = _operator_cases()


def _operator(structure, device, monkeypatch, triton):
    monkeypatch.setattr(kernel_operator, "TRITON_ON_CPU", triton and device == "cpu")
    return kernel_operator.KernelOperator(structure, where=device if triton else "cpu")


@pytest.mark.parametrize("case", OPERATOR_CASES, ids=[c[0] for c in OPERATOR_CASES])
def test_operator_rows_equal_its_blocks(case, device, rng, monkeypatch):
    """rows_of(X, points)(indices) is block(take(Pe, indices), Pe) for Pe = take(exact_data(X),
    points): that very computation on the CPU (equal); with the Triton kernels on points
    prepared once, both within the float64 rule of the reference, so within twice it of each
    other."""
    _, structure, value = case
    X = rng.normal(size=(260, 20)) + 2.0
    points = rng.permutation(260)[:200]
    indices = np.array(ROWS)
    want = value(X[points][indices], X[points])
    bound = 2 * (TOL["float64"]["atol"] + TOL["float64"]["rtol"] * np.abs(want))
    if case[0] == "linear":  # a dot product's conditioning (tests/gpu_cases.check_values)
        bound += 2 * 64 * 2.0**-53 * np.abs(X[points][indices]) @ np.abs(X[points]).T
    for triton in (False, True):
        op = _operator(structure, device, monkeypatch, triton)
        Pe = op.take(op.exact_data(X), points)
        block = op.block(op.take(Pe, indices), Pe)
        got = op.rows_of(X, points)(indices)
        assert got.dtype == torch.float64 and got.device.type == op.device.type
        if not triton:
            assert torch.equal(got, block)
        np.testing.assert_array_less(np.abs(to_numpy64(got) - to_numpy64(block)), bound)
        np.testing.assert_array_less(np.abs(to_numpy64(got) - want), bound / 2)


def test_operator_streams_the_points_where_they_and_the_reserve_do_not_fit(device, rng,
                                                                            monkeypatch):
    """The rule: the points take 8 (D + L (2 D' + 2)) bytes each (200 points, D = 20, one
    leaf: 200 * 688 bytes); with the caller's reserve they must fit in ROWS_MEMORY_SHARE of the
    free memory, else they stream in chunks of ROWS_CHUNK_BYTES (rounded up to 128 points).
    Streamed rows are the resident rows."""
    chunks = spy_gram_rows(monkeypatch)
    op = _operator(kernel_tree.registry_kernel("rbf", {"gamma": 0.05}), device, monkeypatch,
                   True)
    X = rng.normal(size=(230, 20))
    points = np.arange(10, 210)
    need = 200 * 8 * (20 + (2 * 32 + 2))
    free = (need + 1000) / kernel_operator.ROWS_MEMORY_SHARE  # room for a reserve of ~1000
    monkeypatch.setattr(kernel_operator, "_free_bytes", lambda where: free)
    monkeypatch.setattr(kernel_operator, "ROWS_CHUNK_BYTES", 100 * 688)
    resident = op.rows_of(X, points, reserve_bytes=900)(ROWS)
    streamed = op.rows_of(X, points, reserve_bytes=1100)(ROWS)
    assert chunks == [None, 100]
    assert torch.equal(streamed, resident)
    monkeypatch.setattr(kernel_operator, "_free_bytes", lambda where: None)  # unknown: resident
    op.rows_of(X, points, reserve_bytes=10**18)
    assert chunks[-1] is None
