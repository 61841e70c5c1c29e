"""Shared cases and checks for the Triton kernel tests (tests/test_gpu_gram.py, tests/test_gpu_matvec.py).

Every registry kernel appears in ``GPU_CASES``; ``test_every_registry_kernel_has_gpu_cases`` fails
when a kernel is added to the registry without being added here.
"""

import numpy as np
import torch

from kernelkit_math.registry import get_kernel
from tests.conftest import TOL

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

#: Kernels whose value is a function of x·y (not centred; conditioning checked by ``check_dot``).
DOT_KINDS = ("linear", "polynomial", "sigmoid", "exponential")
STATIONARY = ("rbf", "laplacian", "matern", "rational_quadratic")


def _ramp(d, lo, hi):
    return np.linspace(lo, hi, d)


#: (id, kernel name, params as a function of D). Values keep K away from ~0 and ~1 on
#: standard-normal data; per-feature parameters get one entry per feature.
GPU_CASES = [
    ("linear", "linear", lambda d: {}),
    ("cosine", "cosine", lambda d: {}),
    ("polynomial", "polynomial", lambda d: {}),
    ("polynomial-neg", "polynomial", lambda d: dict(gamma=0.3, degree=2, coef0=-0.5)),
    ("sigmoid", "sigmoid", lambda d: {}),
    ("sigmoid-neg", "sigmoid", lambda d: dict(gamma=0.2, coef0=-0.3)),
    ("exponential", "exponential", lambda d: {}),
    ("rbf", "rbf", lambda d: {}),
    ("rbf-pf", "rbf", lambda d: dict(gamma=_ramp(d, 0.5, 1.5) / d)),
    ("laplacian", "laplacian", lambda d: {}),
    ("laplacian-pf", "laplacian", lambda d: dict(gamma=_ramp(d, 0.5, 1.5) / d)),
    ("matern05", "matern", lambda d: dict(nu=0.5, length_scale=1.3 * np.sqrt(d / 3))),
    ("matern15-pf", "matern", lambda d: dict(nu=1.5, length_scale=_ramp(d, 0.8, 2.0) * np.sqrt(d / 3))),
    ("matern25", "matern", lambda d: dict(nu=2.5, length_scale=0.9 * np.sqrt(d / 3))),
    ("rq", "rational_quadratic", lambda d: {}),
    ("rq-pf", "rational_quadratic",
     lambda d: dict(length_scale=_ramp(d, 1.0, 2.0) * np.sqrt(d / 3), alpha=0.3)),
]
CASE_IDS = [c[0] for c in GPU_CASES]
STATIONARY_CASES = [c for c in GPU_CASES if c[1] in STATIONARY]


def to_numpy64(t):
    """The exact values a kernel sees (16-bit inputs rounded), as float64 NumPy."""
    return None if t is None else t.detach().cpu().to(torch.float64).numpy()


def reference(name, params, x, y=None):
    """Float64 registry reference on the (rounded) inputs."""
    return get_kernel(name).value(to_numpy64(x), to_numpy64(y), **params)


def rel_fro(K, ref):
    K = to_numpy64(K) if isinstance(K, torch.Tensor) else K
    return float(np.linalg.norm(K - ref) / np.linalg.norm(ref))


def _unit_roundoff(dtype_name):
    # 16-bit products are exact in float32 and accumulate in float32.
    return 2.0**-53 if dtype_name == "float64" else 2.0**-24


def dot_slope(name, params, X, Y):
    """|dk/ds| at s = x·y (float64): how the kernel amplifies an error in the dot product."""
    spec = get_kernel(name)
    p = spec.resolve(X.shape[1], **params)
    S = X @ (X if Y is None else Y).T
    d = X.shape[1]
    if name == "linear":
        return np.ones_like(S)
    if name == "polynomial":
        g = 1.0 / d if p["gamma"] is None else p["gamma"]
        deg = p["degree"]
        return np.abs(deg * g * (g * S + p["coef0"]) ** (deg - 1)) if deg > 0 else np.zeros_like(S)
    if name == "sigmoid":
        g = 1.0 / d if p["gamma"] is None else p["gamma"]
        return g * (1.0 - np.tanh(g * S + p["coef0"]) ** 2)
    if name == "exponential":
        sc = 1.0 / np.sqrt(d) if p["scale"] is None else p["scale"]
        return sc * np.exp(sc * S)
    raise ValueError(name)


def check_values(K, ref, dtype_name, name, params, x, y=None, tol=None):
    """Elementwise check at the dtype's TOL.

    Dot-product kernels get an extra term for their conditioning: a float32 dot product is
    exact only to ~u Σ|x_k y_k|, so |K - K_ref| may reach |dk/ds| C u Σ|x_k y_k| even though
    every operation is correctly rounded (C = 64 covers D = 17 accumulation and the split
    tf32x3 products on tensor cores, ~8 u each).
    """
    tol = TOL[dtype_name] if tol is None else tol
    Kn = to_numpy64(K)
    assert np.isfinite(Kn).all(), "non-finite (unwritten?) elements"
    err = np.abs(Kn - ref)
    bound = tol["atol"] + tol["rtol"] * np.abs(ref)
    if name in DOT_KINDS:
        X, Y = to_numpy64(x), to_numpy64(y)
        absdot = np.abs(X) @ np.abs(X if Y is None else Y).T
        bound = bound + 64 * _unit_roundoff(dtype_name) * dot_slope(name, params, X, Y) * absdot
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), (
        f"max excess at {worst}: got {Kn[worst]!r}, reference {ref[worst]!r}, "
        f"error {err[worst]:.3g} > bound {bound[worst]:.3g}"
    )


def poisoned(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def randn(rng, shape, dtype, device, offset=0.0, spread=1.0):
    a = offset + spread * rng.standard_normal(shape)
    return torch.from_numpy(a).to(dtype=dtype, device=device)
