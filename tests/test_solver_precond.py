"""The one low-rank preconditioner (kernelkit.linalg.precond) against dense float64 NumPy: the
Nyström approximation it represents, its solve, log det, probes and quadratic form, and its
stability when the shift (noise or ridge) is far below ||K||."""

import numpy as np
import pytest
import torch

from kernelkit.linalg.cg import conjugate_gradient
from kernelkit.linalg import precond as _precond
from kernelkit.linalg.precond import LowRankPreconditioner, nystrom_factor


def _rbf(X, length_scale=0.9, scale=1.5):
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    return scale * np.exp(-0.5 * sq / length_scale**2)


def _build(K, rank, mu):
    Kt = torch.from_numpy(K)
    pivots = torch.from_numpy(np.random.default_rng(5).permutation(len(K))[:rank])
    B, nu = nystrom_factor(Kt[:, pivots], Kt[pivots][:, pivots], rows=pivots)
    return LowRankPreconditioner(B, mu, nu), pivots.numpy()


@pytest.fixture(params=["cholesky", "eigen"])
def form(request, monkeypatch):
    """Which form of P the shift-independent tests build: the Cholesky (Woodbury) form where
    ||B||_F^2 / mu allows it, or the eigen form always."""
    if request.param == "eigen":
        monkeypatch.setattr(_precond, "WOODBURY_MAX_RATIO", 0.0)
    return request.param


@pytest.fixture
def K():
    X = np.random.default_rng(0).uniform(-2.0, 2.0, size=(150, 2))
    return _rbf(X)


def test_solve_logdet_probes_and_quad_match_dense_nystrom(K, form):
    mu = 0.05
    pre, S = _build(K, 20, mu)
    assert pre.woodbury == (form == "cholesky")  # ||B||_F^2 / mu ~ 4e3
    n = K.shape[0]
    P = K[:, S] @ np.linalg.solve(K[np.ix_(S, S)], K[S]) + mu * np.eye(n)
    # 20 landmarks drawn uniformly, the shift nu ~ 1e-13: agreement to ~1e-10
    np.testing.assert_allclose(float(pre.logdet), np.linalg.slogdet(P)[1], rtol=1e-10, atol=0)
    V = np.random.default_rng(0).standard_normal((n, 3))
    np.testing.assert_allclose(pre.solve(torch.from_numpy(V)).numpy(), np.linalg.solve(P, V),
                               rtol=1e-8, atol=1e-10)
    # probes: z = (B or U Lambda^1/2 V^T) e1 + sqrt(mu) e2; e1 = I, e2 = 0: Z Z^T + mu I = P
    Z = pre.sample(torch.eye(20, dtype=torch.float64), torch.zeros((n, 20), dtype=torch.float64))
    np.testing.assert_allclose(Z.numpy() @ Z.numpy().T + mu * np.eye(n), P, rtol=0, atol=1e-10)
    W = np.random.default_rng(1).standard_normal((n, 4))
    np.testing.assert_allclose(float(pre.quad(torch.from_numpy(W))), np.sum(W * (P @ W)),
                               rtol=1e-10)


def test_per_column_shift(K):
    """KernelRidge's per-target alpha: one shift per right-hand-side column."""
    mus = np.array([0.05, 0.3, 0.05])
    pre, S = _build(K, 20, torch.from_numpy(mus))
    V = np.random.default_rng(2).standard_normal((K.shape[0], 3))
    got = pre.solve(torch.from_numpy(V)).numpy()
    Kn = K[:, S] @ np.linalg.solve(K[np.ix_(S, S)], K[S])
    for j, mu in enumerate(mus):
        np.testing.assert_allclose(got[:, j], np.linalg.solve(Kn + mu * np.eye(len(K)), V[:, j]),
                                   rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("mu", [1e-9, 1e-10, 1e-13])
def test_solve_is_backward_stable_for_a_tiny_shift(K, mu):
    """mu far below ||K|| (~60): the eigen form's solve x satisfies P x = v to a backward error
    of a few eps ||P|| ||x|| (measured 5.2e-17 to 5.4e-17 relative at mu = 1e-6 to 1e-13;
    bound 1e-14)."""
    pre, _ = _build(K, 40, mu)
    assert not pre.woodbury  # ||B||_F^2 / mu >= 2e11: the eigen form
    n = K.shape[0]
    Pd = (pre.U * pre.lam) @ pre.U.T + mu * torch.eye(n, dtype=torch.float64)
    v = torch.from_numpy(np.random.default_rng(3).standard_normal((n, 2)))
    x = pre.solve(v)
    backward = float(torch.linalg.norm(Pd @ x - v) / (torch.linalg.matrix_norm(Pd, 2)
                                                      * torch.linalg.norm(x)))
    assert backward <= 1e-14, backward


def test_cholesky_form_at_the_edge_of_its_ratio(K):
    """Just inside ||B||_F^2 = WOODBURY_MAX_RATIO mu the Cholesky form's solve loses about
    eps ||B||^2 / mu: its relative residual ||P x - v|| / ||v|| against the dense
    P = B B^T + mu I is at most eps64 x WOODBURY_MAX_RATIO (2.2e-6; measured 4.9e-7, and 6.3e-9 /
    6.8e-11 at ratios 1e8 / 1e6, so the bound scales with the ratio as the docstring says)."""
    Kt = torch.from_numpy(K)
    pivots = torch.from_numpy(np.random.default_rng(5).permutation(len(K))[:40])
    B, _ = nystrom_factor(Kt[:, pivots], Kt[pivots][:, pivots])  # no unshift: P = B B^T + mu I
    mu = 1.01 * float(B.square().sum()) / _precond.WOODBURY_MAX_RATIO
    P = B @ B.T + mu * torch.eye(len(K), dtype=torch.float64)
    v = torch.from_numpy(np.random.default_rng(3).standard_normal((len(K), 2)))
    pre = LowRankPreconditioner(B, mu)
    assert pre.woodbury
    residual = float(torch.linalg.norm(P @ pre.solve(v) - v) / torch.linalg.norm(v))
    assert residual <= _precond.EPS64 * _precond.WOODBURY_MAX_RATIO, residual


def test_preconditioner_cuts_cg_iterations(K, form):
    """CG on K + 1e-3 I against np.linalg.solve, without and with the rank-40 preconditioner."""
    n, mu = K.shape[0], 1e-3
    A = torch.from_numpy(K + mu * np.eye(n))
    b = torch.from_numpy(np.random.default_rng(4).standard_normal((n, 1)))
    iters = {}
    for rank in (0, 40):
        pre, _ = _build(K, rank, mu)
        res = conjugate_gradient(lambda V: A @ V, b, precond=pre, tol=1e-10, max_iter=2000)
        assert res.converged
        # cond(A) ~ 2e5, relative residual 1e-10: forward error <= 2e-5 relative
        ref = np.linalg.solve(A.numpy(), b.numpy())
        np.testing.assert_allclose(res.x.numpy(), ref, rtol=0, atol=2e-5 * np.abs(ref).max())
        iters[rank] = res.n_iter
    assert iters[40] * 4 < iters[0], iters


@pytest.mark.parametrize("scalar_shift", [True, False])
def test_form_follows_the_ratio_of_the_factor_to_the_shift(scalar_shift):
    """The Cholesky form exactly where ||B||_F^2 <= WOODBURY_MAX_RATIO mu, for a scalar mu;
    a per-column shift always takes the eigen form."""
    B = torch.tensor(np.random.default_rng(0).standard_normal((30, 4)))
    edge = float(B.square().sum()) / _precond.WOODBURY_MAX_RATIO
    for mu, want in [(edge * 1.01, True), (edge * 0.99, False)]:
        shift = mu if scalar_shift else torch.tensor([mu, 2 * mu], dtype=torch.float64)
        assert LowRankPreconditioner(B, shift).woodbury == (want and scalar_shift)


def test_logdet_and_quad_gradients_match_dense(form):
    """d log det P and d sum w^T P w with respect to B and mu, against autograd of the dense
    float64 P = B B^T + mu I (n = 40, k = 6, cond(P) ~ 1e3: agreement to ~1e-12)."""
    rng = np.random.default_rng(1)
    B0 = torch.tensor(rng.standard_normal((40, 6)))
    W = torch.tensor(rng.standard_normal((40, 3)))
    grads = {}
    for how in ("pre", "dense"):
        B = B0.clone().requires_grad_(True)
        mu = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
        if how == "pre":
            pre = LowRankPreconditioner(B, mu)
            assert pre.woodbury == (form == "cholesky")
            logdet, quad = pre.logdet, pre.quad(W)
        else:
            P = B @ B.T + mu * torch.eye(40, dtype=torch.float64)
            logdet, quad = torch.logdet(P), (W * (P @ W)).sum()
        grads[how] = [float(logdet.detach()), float(quad.detach())] + [
            g.numpy() for g in torch.autograd.grad(logdet + 0.1 * quad, (B, mu))]
    for got, want in zip(grads["pre"], grads["dense"]):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("m,block", [(1, 4096), (7, 3), (10, 5), (64, 4096)])
def test_symmetrize_in_place_equals_half_sum(m, block):
    """In square blocks (a block size that does not divide m included) the values are exactly
    those of 0.5 * (A + A.T), the matrix is exactly symmetric, and A itself is returned."""
    from kernelkit.linalg.precond import symmetrize_

    A = torch.tensor(np.random.default_rng(m).standard_normal((m, m)))
    want = 0.5 * (A + A.T)
    got = symmetrize_(A, block=block)
    assert got is A
    assert torch.equal(got, want) and torch.equal(got, got.T)


def test_plus_diagonal_leaves_its_input():
    from kernelkit.linalg.precond import plus_diagonal

    A = torch.tensor(np.random.default_rng(0).standard_normal((5, 5)))
    before = A.clone()
    B = plus_diagonal(A, 0.25)
    assert torch.equal(A, before) and torch.equal(B, A + 0.25 * torch.eye(5, dtype=A.dtype))
    assert plus_diagonal(A, 0.0) is A


@pytest.mark.parametrize("length_scale,t", [(0.9, 3), (0.9, 0), (4.0, 5)])
def test_terms_gradient_matches_autograd_of_dense(length_scale, t, form, monkeypatch):
    """nystrom_preconditioner's terms -1/2 log det P + 1/(2t) sum w^T P w: value and gradient
    with respect to every entry of Y = K[:, S] (its landmark rows, which are also G, included)
    and to mu, against autograd of the dense P = B B^T + mu I with B from nystrom_factor with
    autograd; in the Cholesky form by the closed form, in the eigen form by autograd through B,
    built once (one QR: a no-grad eigen build first had held two n x k matrices more at the
    peak). Length scale 4 makes G ill-conditioned (cond 5e7): there the Cholesky form's B,
    solved in place over Y_nu, is 7e-14 from the reference's out-of-place solve (another
    layout), and cond(C) carries that into the gradient: 2.6e-12 of the largest entry measured,
    hence 3e-11; 2e-14 in the well-conditioned cases, hence 2e-13. (The eigen form's P differs by
    the Nyström shift nu ~ eps ||Y||: measured up to 1.4e-14, and 1.3e-13 at length scale 4.)"""
    from kernelkit.linalg.precond import nystrom_preconditioner

    qr_calls = []
    qr = torch.linalg.qr
    monkeypatch.setattr(torch.linalg, "qr",
                        lambda A, *a, **k: qr_calls.append(1) or qr(A, *a, **k))
    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, size=(60, 2))
    K = torch.tensor(_rbf(X, length_scale=length_scale))
    rows = torch.tensor(np.sort(rng.permutation(60)[:12]))
    W = torch.tensor(rng.standard_normal((60, t)))
    out = {}
    for how in ("pre", "dense"):
        Y = K[:, rows].clone().requires_grad_(True)
        mu = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
        if how == "pre":
            pre = nystrom_preconditioner(Y, rows, mu)
            if form == "cholesky":
                assert pre.woodbury and pre._closed is not None
            else:
                assert not pre.woodbury and len(qr_calls) == 1
            value = pre.terms(W)
        else:
            B, _ = nystrom_factor(Y, Y[rows], rows=rows)
            P = B @ B.T + mu * torch.eye(60, dtype=torch.float64)
            value = -0.5 * torch.logdet(P) + (0.5 / t * (W * (P @ W)).sum() if t else 0.0)
        out[how] = [value.detach().numpy()] + [g.numpy() for g in torch.autograd.grad(value, (Y, mu))]
    tol = 2e-13 if length_scale < 1 else 3e-11
    for got, want in zip(out["pre"], out["dense"]):
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))


def test_closed_form_terms_only_with_gradients():
    """Without autograd inputs nystrom_preconditioner keeps no closed-form inputs (no n x k
    tensor held for a backward that never comes)."""
    from kernelkit.linalg.precond import nystrom_preconditioner

    X = np.random.default_rng(4).uniform(-2.0, 2.0, size=(40, 2))
    K = torch.tensor(_rbf(X))
    rows = torch.arange(0, 40, 5)
    pre = nystrom_preconditioner(K[:, rows], rows, torch.tensor(0.05, dtype=torch.float64))
    assert pre.woodbury and pre._closed is None

