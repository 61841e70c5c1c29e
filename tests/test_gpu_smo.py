"""The SMO subproblem: its float64 reference (kernelkit_math.smo) against independent checks, the
Triton kernel (kernelkit_gpu.smo_subproblem) against the reference, and the solver
(kernelkit.linalg.smo) with the kernel in place of the reference; the solver's row cache; the
gradient's product over kernel rows (kernelkit_math.smo.combine_rows, the Triton
kernelkit_gpu.smo_combine) against an independent column-by-column sum.

The kernel tests run under the Triton interpreter on the CPU and, unchanged, with
``pytest --device cuda``.
"""

import numpy as np
import pytest
import torch

from kernelkit.linalg import smo
from kernelkit_gpu._launch import tl, triton
from kernelkit_gpu.smo_subproblem import _pair_update
from kernelkit_math import smo as ref

EPS = np.finfo(np.float64).eps
kernel_test = pytest.mark.usefixtures("triton_can_run")


def _rbf(X, gamma=0.5):
    return np.exp(-gamma * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))


def _problem(rng, q, labels):
    """A feasible working set: RBF block K, labels (``mixed`` or ``same``: all +1), boxes C_t
    of different sizes, a start with about 40 % of the variables at 0, 30 % at C_t and the
    rest free, and G = Q a + p for a random p."""
    K = _rbf(rng.normal(size=(q, 3)))
    y = np.where(rng.random(q) < 0.5, 1.0, -1.0) if labels == "mixed" else np.ones(q)
    C = rng.uniform(0.5, 2.0, q)
    where = rng.random(q)
    a = np.where(where < 0.4, 0.0, np.where(where < 0.7, C, rng.uniform(0, 1, q) * C))
    G = y * (K @ (y * a)) + rng.normal(size=q) - 1.0
    return a, G, y, C, K


def _objective(a, y, K, p):
    return 0.5 * (y * a) @ K @ (y * a) + p @ a


# ------------------------------------------------------------------ the reference, checked alone
def _random_pairs(rng, n):
    """n inputs of the pair update, one per column: both label relations, boxes of different
    sizes, starts at 0, at C and free, and curvatures positive or 0 (two copies of a point)."""
    yi, yj = rng.choice([-1.0, 1.0], (2, n))
    Ci, Cj = rng.uniform(0.1, 3.0, (2, n))
    ai = np.choose(rng.integers(0, 3, n), [np.zeros(n), Ci, rng.uniform(0, 1, n) * Ci])
    aj = np.choose(rng.integers(0, 3, n), [np.zeros(n), Cj, rng.uniform(0, 1, n) * Cj])
    Gi, Gj = rng.normal(size=(2, n)) * 3
    Kii, Kjj = rng.uniform(0.5, 2.0, (2, n))
    Kij = np.where(rng.random(n) < 0.8, rng.uniform(-1, 1, n) * np.sqrt(Kii * Kjj),
                   (Kii + Kjj) / 2)
    return np.array([ai, aj, yi, yj, Ci, Cj, Gi, Gj, Kii, Kjj, Kij])


def test_pair_update_is_the_projected_minimiser(rng):
    """libsvm's clipped step is the minimiser of f along the pair's feasible line, projected
    onto the segment the box allows: for y_i != y_j a_i and a_j move by the same t, for
    y_i == y_j by -t and +t, and f changes by t g + t^2 quad / 2 (g = G_i + G_j, resp.
    G_j - G_i). Computed here from that description, not from libsvm's case analysis; both
    round a handful of float64 operations, so they agree to a few ulps of C."""
    hits = set()
    for ai, aj, yi, yj, Ci, Cj, Gi, Gj, Kii, Kjj, Kij in _random_pairs(rng, 2000).T:
        quad = Kii + Kjj - 2 * Kij
        quad = quad if quad > 0 else ref.TAU
        if yi != yj:
            step, lows, highs = -(Gi + Gj) / quad, [-ai, -aj], [Ci - ai, Cj - aj]
            lo, hi = max(lows), min(highs)
            want = ai + np.clip(step, lo, hi), aj + np.clip(step, lo, hi)
        else:
            step, lows, highs = -(Gj - Gi) / quad, [ai - Ci, -aj], [ai, Cj - aj]
            lo, hi = max(lows), min(highs)
            want = ai - np.clip(step, lo, hi), aj + np.clip(step, lo, hi)
        got = ref.pair_update(ai, aj, yi, yj, Ci, Cj, Gi, Gj, Kii, Kjj, Kij)
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * EPS * max(Ci, Cj))
        # in the box up to the rounding of C_i - diff or C_j + diff (libsvm's own)
        slack = 4 * EPS * max(Ci, Cj)
        assert -slack <= got[0] <= Ci + slack and -slack <= got[1] <= Cj + slack
        clipped = (("low", np.argmax(lows)) if step <= lo else ("high", np.argmin(highs))
                   if step >= hi else "inside")
        hits.add((yi == yj, clipped))
    # both label relations: inside, and each of the four bounds (a_i or a_j at 0 or C) reached
    assert len(hits) == 10


@pytest.mark.parametrize("labels", ["mixed", "same"])
def test_reference_reaches_the_subproblem_optimum(rng, labels):
    """Run to a tiny tol, the reference ends feasible (box, y^T a kept) with its gradient equal
    to Q a + p recomputed from scratch and m(a) - M(a) <= tol; every step lowers f."""
    a0, G0, y, C, K = _problem(rng, 40, labels)
    p = G0 - y * (K @ (y * a0))
    tol = 1e-9
    a, G, steps = ref.subproblem(a0, G0, y, C, K, tol, 100_000)
    assert 0 < steps < 100_000
    # float64 rounding of the running gradient: at most two terms of size max C max|K| per step
    np.testing.assert_allclose(G, y * (K @ (y * a)) + p, rtol=0,
                               atol=4 * EPS * (2 * steps + 40) * C.max())
    assert np.all((a >= 0) & (a <= C))
    assert y @ a == pytest.approx(y @ a0, abs=1e-12)
    up = ((y > 0) & (a < C)) | ((y < 0) & (a > 0))
    low = ((y > 0) & (a > 0)) | ((y < 0) & (a < C))
    u = -y * (y * (K @ (y * a)) + p)
    assert u[up].max() - u[low].min() <= tol + 1e-12
    f = [_objective(a0, y, K, p)]
    for budget in range(1, min(steps, 30) + 1):
        f.append(_objective(ref.subproblem(a0, G0, y, C, K, tol, budget)[0], y, K, p))
    assert np.all(np.diff(f) < 0)


# ------------------------------------------------------------------------- the Triton kernel
def _kernel_args(a, G, y, C, K, device, k_dtype=torch.float64):
    f64 = dict(dtype=torch.float64, device=device)
    return (torch.tensor(a, **f64), torch.tensor(G, **f64), torch.tensor(y, **f64),
            torch.tensor(C, **f64), torch.tensor(K, dtype=k_dtype, device=device))


def _assert_same(got, want):
    """The kernel runs the reference's float64 operations in the same order on the same inputs
    (the kernel compiled without fused multiply-adds; +, -, *, / correctly rounded, max, min
    and selects exact, ties to the first index in both), so a, G and the steps agree bit for
    bit: the tolerance is 0."""
    a, G, steps = got
    assert int(steps.item()) == want[2]
    np.testing.assert_array_equal(a.cpu().numpy(), want[0])
    np.testing.assert_array_equal(G.cpu().numpy(), want[1])


@kernel_test
@pytest.mark.parametrize("k_dtype", [torch.float64, torch.float32], ids=["K64", "K32"])
@pytest.mark.parametrize("labels", ["mixed", "same"])
@pytest.mark.parametrize("q", [1, 2, 63, 200])
def test_kernel_matches_reference(q, labels, k_dtype, device, rng):
    from kernelkit_gpu.smo_subproblem import subproblem

    a, G, y, C, K = _problem(rng, q, labels)
    args = _kernel_args(a, G, y, C, K, device, k_dtype)
    K_read = args[4].cpu().numpy()  # float32 K: the reference widens the same rounded values
    budget = 40 if q == 200 else 10 * q  # q = 200 stops on the budget (interpreter time)
    want = ref.subproblem(a, G, y, C, K_read, 1e-3, budget)
    if q == 63:
        assert 0 < want[2] < budget  # stopped on tol
    if q == 200:
        assert want[2] == budget
    _assert_same(subproblem(*args, 1e-3, budget), want)


@triton.jit
def _pairs_kernel(v_ptr, tau_ptr, out_ptr, N: tl.constexpr):
    """The kernel's pair update on the N pairs of the columns of v (11 rows: a_i, a_j, y_i,
    y_j, C_i, C_j, G_i, G_j, K_ii, K_jj, K_ij); the new a_i and a_j to the rows of out."""
    offs = tl.arange(0, N)
    new_i, new_j = _pair_update(
        tl.load(v_ptr + offs), tl.load(v_ptr + N + offs), tl.load(v_ptr + 2 * N + offs),
        tl.load(v_ptr + 3 * N + offs), tl.load(v_ptr + 4 * N + offs),
        tl.load(v_ptr + 5 * N + offs), tl.load(v_ptr + 6 * N + offs),
        tl.load(v_ptr + 7 * N + offs), tl.load(v_ptr + 8 * N + offs),
        tl.load(v_ptr + 9 * N + offs), tl.load(v_ptr + 10 * N + offs), tl.load(tau_ptr))
    tl.store(out_ptr + offs, new_i)
    tl.store(out_ptr + N + offs, new_j)


@kernel_test
def test_kernel_pair_update_matches_reference(device, rng):
    """Every branch of libsvm's clipping (the random pairs reach all of them: see
    test_pair_update_is_the_projected_minimiser), each ``if`` a select in the kernel: the same
    bits as the reference."""
    n = 2048
    v = _random_pairs(rng, n)
    out = torch.full((2, n), float("nan"), dtype=torch.float64, device=device)
    tau = torch.tensor([ref.TAU], dtype=torch.float64, device=device)
    _pairs_kernel[(1,)](torch.tensor(v, device=device), tau, out, N=n, enable_fp_fusion=False)
    want = np.array([ref.pair_update(*column) for column in v.T]).T
    np.testing.assert_array_equal(out.cpu().numpy(), want)


@kernel_test
def test_kernel_uses_tau_where_the_curvature_is_not_positive(device):
    """Two copies of one point (K_ii + K_jj - 2 K_ij = 0) with opposite labels and a gradient
    gap of 1e-13: the step is 1e-13 / TAU = 0.1 inside the box, so it shows TAU's float64 value
    (a float32 1e-12, what Triton makes of a Python float, is 4e-8 off)."""
    from kernelkit_gpu.smo_subproblem import subproblem

    a, G, y, C = [0.5, 0.5], [-1e-13, 0.0], [1.0, -1.0], [1.0, 1.0]
    K = np.ones((2, 2))
    want = ref.subproblem(a, G, y, C, K, 0.0, 1)
    np.testing.assert_allclose(want[0], 0.5 + 1e-13 / 1e-12, rtol=2 * EPS, atol=0)
    _assert_same(subproblem(*_kernel_args(a, G, y, C, K, device), 0.0, 1), want)


@kernel_test
def test_kernel_ties_go_to_the_first_index(device):
    """Every u of I_up equal, every u of I_low equal and every curvature equal (K = I): i is the
    first variable of I_up and j the first of I_low, in the reference (checked by hand: the
    first step moves a_0 and a_1 only) and in the kernel."""
    from kernelkit_gpu.smo_subproblem import subproblem

    q = 16
    a, G, C, K = np.zeros(q), -np.ones(q), np.ones(q), np.eye(q)
    y = np.where(np.arange(q) % 2, -1.0, 1.0)  # I_up: even t (u = 1), I_low: odd t (u = -1)
    first = ref.subproblem(a, G, y, C, K, 1e-3, 1)[0]
    assert first.tolist() == [1.0, 1.0] + [0.0] * (q - 2)
    for budget in (1, 3, 8):
        _assert_same(subproblem(*_kernel_args(a, G, y, C, K, device), 1e-3, budget),
                     ref.subproblem(a, G, y, C, K, 1e-3, budget))


@kernel_test
def test_kernel_overwrites_poisoned_outputs(device, rng, monkeypatch):
    """Every output the launcher allocates starts as NaN (the step count as a sentinel)."""
    from kernelkit_gpu import _launch
    from kernelkit_gpu.smo_subproblem import subproblem

    def poisoned(shape, dtype, device):
        fill = float("nan") if dtype.is_floating_point else -12345
        return torch.full(tuple(shape), fill, dtype=dtype, device=device)

    monkeypatch.setattr(_launch, "alloc", poisoned)
    a, G, y, C, K = _problem(rng, 37, "mixed")
    _assert_same(subproblem(*_kernel_args(a, G, y, C, K, device), 1e-3, 20),
                 ref.subproblem(a, G, y, C, K, 1e-3, 20))
    # no step at all (tol above the gap): the outputs are still written, as the inputs
    out = subproblem(*_kernel_args(a, G, y, C, K, device), 1e9, 20)
    _assert_same(out, (a, G, 0))


@kernel_test
def test_kernel_tol_tensor_strided_k_and_inputs_kept(device, rng):
    """tol as a float64 device tensor acts as the float; K as a transposed view and as a block
    of a larger matrix reads as the contiguous K; the inputs are not modified."""
    from kernelkit_gpu.smo_subproblem import subproblem

    a, G, y, C, K = _problem(rng, 30, "mixed")
    args = _kernel_args(a, G, y, C, K, device)
    kept = [t.clone() for t in args]
    want = ref.subproblem(a, G, y, C, K, 1e-2, 25)
    big = torch.zeros((35, 41), dtype=torch.float64, device=device)
    big[2:32, 5:35] = args[4]
    tol = torch.tensor([1e-2], dtype=torch.float64, device=device)
    for K_view in (args[4], args[4].T, big[2:32, 5:35]):
        _assert_same(subproblem(*args[:4], K_view, tol, 25), want)
    for before, after in zip(kept, args):
        assert torch.equal(before, after)


@kernel_test
@pytest.mark.parametrize("change,error,match", [
    (dict(alpha=np.ones(3)), TypeError, "alpha must be a torch.Tensor"),
    (dict(G="float32"), TypeError, "G must have dtype float64; got torch.float32"),
    (dict(y="short"), ValueError, r"y must have alpha's shape \(4,\)"),
    (dict(K="wide"), ValueError, r"K must have shape \(4, 4\)"),
    (dict(K="int"), TypeError, "K must have dtype float32, float64; got torch.int64"),
    (dict(budget=-1), ValueError, "budget must be an integer >= 0; got -1"),
    (dict(budget=2.5), ValueError, "budget must be an integer >= 0; got 2.5"),
    (dict(tol="1e-3"), TypeError, "tol must be a float or a one-element float64 tensor; got str"),
    (dict(tol="tensor2"), ValueError, "tol must be a float or a one-element float64 tensor on"),
    (dict(empty=True), ValueError, "alpha must hold 1 to 1024 variables; got 0"),
])
def test_kernel_bad_input(change, error, match, device):
    from kernelkit_gpu.smo_subproblem import subproblem

    f64 = dict(dtype=torch.float64, device=device)
    q = 0 if change.get("empty") else 4
    args = dict(alpha=torch.zeros(q, **f64), G=-torch.ones(q, **f64), y=torch.ones(q, **f64),
                C=torch.ones(q, **f64), K=torch.eye(q, **f64), tol=1e-3, budget=10)
    variants = {"float32": lambda: torch.ones(q, device=device),
                "short": lambda: torch.ones(q - 1, **f64),
                "wide": lambda: torch.ones((q, q + 1), **f64),
                "int": lambda: torch.ones((q, q), dtype=torch.int64, device=device),
                "tensor2": lambda: torch.ones(2, **f64)}
    for name, value in change.items():
        if name != "empty":
            named = isinstance(value, str) and value in variants
            args[name] = variants[value]() if named else value
    with pytest.raises(error, match=match):
        subproblem(**args)


# ---------------------------------------------------------------------------------- the solver
def _svc(rng, n=40):
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return torch.tensor(_rbf(X)), -torch.ones(n, dtype=torch.float64), torch.tensor(y)


@kernel_test
def test_solver_with_the_kernel_equals_the_solver_with_the_reference(device, rng, monkeypatch):
    """The solver's CPU path runs the reference; with the Triton kernel in its place (under the
    interpreter, or on the GPU with ``--device cuda``) every subproblem gives the same bits, so
    the whole solve does."""
    from kernelkit_gpu.smo_subproblem import subproblem

    K, p, y = _svc(rng)
    C = torch.full_like(p, 2.0)
    want = smo.solve(lambda i: K[i], p, y, C, torch.zeros_like(p), tol=1e-4, working_set=8)
    calls = []

    def with_kernel(alpha, G, y, C, K, tol, budget):
        calls.append(budget)
        a, g, steps = subproblem(*(torch.from_numpy(v).to(device) for v in (alpha, G, y, C, K)),
                                 tol, budget)
        return a.cpu().numpy(), g.cpu().numpy(), int(steps.item())

    monkeypatch.setattr(ref, "subproblem", with_kernel)
    got = smo.solve(lambda i: K[i], p, y, C, torch.zeros_like(p), tol=1e-4, working_set=8)
    assert len(calls) > 1 and got.converged and got.n_iter == want.n_iter
    assert torch.equal(got.alpha, want.alpha) and torch.equal(got.gradient, want.gradient)


def test_solver_on_the_device(device, rng):
    """On a GPU (``--device cuda``) the solver runs the Triton subproblem; its answer obeys the
    stopping rule with the gradient recomputed from scratch, and its objective is within tol S
    of the CPU solver's (each is in [f*, f* + tol S])."""
    K, p, y = _svc(rng, 120)
    C = torch.full_like(p, 1.0)
    tol = 1e-3
    cpu = smo.solve(lambda i: K[i], p, y, C, torch.zeros_like(p), tol=tol, working_set=16)
    Kd = K.to(device)
    got = smo.solve(lambda i: Kd[i.to(device)], p.to(device), y.to(device), C.to(device),
                    torch.zeros_like(p, device=device), tol=tol, working_set=16)
    a = got.alpha.cpu()
    G = y * (K @ (y * a)) + p
    up, low = smo._sets(a, y, C)
    u = -y * G
    # rounding of the running gradient: two terms of size max C max|K| per pairwise step
    slack = 4 * EPS * (2 * got.n_iter + len(p))
    assert got.converged and float(u[up].max() - u[low].min()) <= tol + slack
    G_cpu = y * (K @ (y * cpu.alpha)) + p
    assert abs(smo.objective(a, G, p) - smo.objective(cpu.alpha, G_cpu, p)) <= tol * float(C.sum())


def test_row_cache_grows_for_a_large_request_and_evicts_the_oldest(rng):
    """A request of more rows than the byte bound is served whole (duplicates included); later
    requests reuse the held rows and recompute only those evicted, least recently used first."""
    K = torch.tensor(rng.normal(size=(30, 30)))
    fetched = []

    def rows(i):
        fetched.append(i.tolist())
        return K[i]

    cache = smo.RowCache(rows, max_bytes=4 * 30 * 8)  # four rows
    wanted = torch.tensor([5, 3, 5, 9, 1, 7, 3])
    assert torch.equal(cache(wanted), K[wanted])
    assert fetched == [[1, 3, 5, 7, 9]] and cache.kept.tolist() == [1, 3, 5, 7, 9]
    assert torch.equal(cache(torch.tensor([7, 2])), K[[7, 2]])  # 2 evicts a row of the first
    assert fetched[1:] == [[2]] and len(cache.kept) == 5 and 7 in cache.kept
    assert torch.equal(cache(torch.tensor([7])), K[[7]])
    # 3, 5, 9 (last used by the first call) go first, then 2 (second call); 7 (third) stays
    assert torch.equal(cache(torch.arange(10, 14)), K[10:14])
    assert cache.kept.tolist() == [7, 10, 11, 12, 13]
    assert torch.equal(cache(torch.tensor([2, 7, 13])), K[[2, 7, 13]])
    assert fetched[2:] == [[10, 11, 12, 13], [2]] and cache.computed == 5 + 1 + 4 + 1


def test_row_cache_holds_no_more_slots_than_rows():
    """200 MiB of slots for a 3 x 3 kernel matrix would be 8.7 million rows of bookkeeping;
    a cache of a rank's columns (n_rows: the rows the indices range over) holds any row."""
    K = torch.arange(9, dtype=torch.float64).reshape(3, 3)
    cache = smo.RowCache(lambda i: K[i], max_bytes=200 * 2**20)
    assert torch.equal(cache(torch.tensor([2, 0])), K[[2, 0]])
    assert cache._block.shape == (3, 3) and len(cache._point_of) == 3
    K = torch.arange(60, dtype=torch.float64).reshape(30, 2)  # columns 4:6 of 30 x 30 rows
    cache = smo.RowCache(lambda i: K[i], max_bytes=200 * 2**20, n_rows=30)
    assert torch.equal(cache(torch.tensor([29, 3])), K[[29, 3]])
    assert cache._block.shape == (30, 2) and cache.kept.tolist() == [3, 29]


# ------------------------------------------------------------ the gradient's product over rows
def _column_sums(rows, coef):
    """sum_t coef_t rows[t, j] for each column j by Python floats (IEEE double, no fused
    multiply-add), t in order: the specification of combine_rows, computed independently."""
    out = []
    for column in rows.T.tolist():
        total = column[0] * coef[0]
        for value, c in zip(column[1:], coef[1:]):
            total = total + value * c
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("q,n", [(1, 5), (7, 1), (300, 100), (512, 37)])
def test_combine_rows_sums_each_column_alone(q, n, rng):
    """Every column in the order of the rows, whatever block of columns is passed (a rank's
    shard): the same bits as the whole. A BLAS matrix-vector product does not promise that (its
    blocking and threads follow the matrix's shape), and the sharded SVM needs it."""
    rows, coef = rng.normal(size=(q, n)), rng.normal(size=q)
    whole = ref.combine_rows(rows, coef)
    np.testing.assert_array_equal(whole, _column_sums(rows, coef.tolist()))
    for lo, hi in [(0, n // 2), (n // 2, n), (n - 1, n), (0, 0)]:
        np.testing.assert_array_equal(ref.combine_rows(rows[:, lo:hi], coef), whole[lo:hi])
    # the solver's product on the CPU is the reference, on any block of columns
    t = torch.from_numpy(rows)
    for lo, hi in [(0, n), (n // 3, n)]:
        np.testing.assert_array_equal(smo._combine(t[:, lo:hi], torch.from_numpy(coef)).numpy(),
                                      whole[lo:hi])
    assert ref.combine_rows(np.zeros((0, n)), np.zeros(0)).tolist() == [0.0] * n


@kernel_test
@pytest.mark.parametrize("q,n", [(1, 1), (3, 300), (64, 257), (512, 37)])
def test_combine_kernel_matches_reference(q, n, device, rng):
    """The Triton gradient product equals its reference bit for bit, on whole rows and on a
    strided block of their columns (a view: as a rank's shard of a larger matrix)."""
    from kernelkit_gpu.smo_combine import combine_rows

    rows, coef = rng.normal(size=(q, n + 5)), rng.normal(size=q)
    K, c = torch.tensor(rows, device=device), torch.tensor(coef, device=device)
    block = K[:, 2:2 + n]
    kept = block.clone()
    got = combine_rows(block, c)
    np.testing.assert_array_equal(got.cpu().numpy(), ref.combine_rows(rows[:, 2:2 + n], coef))
    assert torch.equal(block, kept)
    assert combine_rows(K[:0], c[:0]).tolist() == [0.0] * (n + 5)


@kernel_test
@pytest.mark.parametrize("change,error,match", [
    (lambda K, c: (K.float(), c), TypeError, "rows must have dtype float64"),
    (lambda K, c: (K[0], c), ValueError, r"rows must be 2-D \(q, n\)"),
    (lambda K, c: (K, c[:-1]), ValueError, r"coef must have shape \(3,\)"),
    (lambda K, c: (K, c.cpu().numpy()), TypeError, "coef must be a torch.Tensor"),
])
def test_combine_kernel_bad_input(change, error, match, device):
    from kernelkit_gpu.smo_combine import combine_rows

    K = torch.ones((3, 4), dtype=torch.float64, device=device)
    c = torch.ones(3, dtype=torch.float64, device=device)
    with pytest.raises(error, match=match):
        combine_rows(*change(K, c))
