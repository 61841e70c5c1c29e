"""Shared cases, checks and spies of the Triton kernel tests (tests/test_gpu_*.py).

Every registry kernel appears in ``GPU_CASES`` through its examples in the registry;
``test_every_registry_kernel_has_gpu_cases`` fails for an entry without a GPU example. The attention tests share the
FlashAttention accuracy rule (:func:`check_rule`); the fixtures (interpreter check, poisoned
outputs, attention autotuning off) are in tests/conftest.py.
"""

import os

import numpy as np
import torch

from kernelkit_math.registry import REGISTRY, get_kernel
from tests.conftest import TOL

# On a GPU every new Gram / matrix-free kernel variant would otherwise benchmark all autotune
# configs: hundreds of extra compilations. The tests use the default config;
# test_every_config_is_correct runs each.
os.environ.setdefault("KERNELKIT_GPU_AUTOTUNE", "0")

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

#: Kernels whose value is a function of x·y (not centred; conditioning checked by ``check_dot``).
DOT_KINDS = tuple(name for name, spec in REGISTRY.items() if spec.pairwise == "dot")
STATIONARY = tuple(name for name, spec in REGISTRY.items() if spec.stationary)


#: (id, kernel name, params as a function of D): the registry's examples marked ``gpu``
#: (``KernelSpec.examples``), so a new registry kernel appears here by itself.
GPU_CASES = [
    (name if example.id == "default" else f"{name}-{example.id}", name, example.params)
    for name, spec in REGISTRY.items()
    for example in spec.examples if example.gpu
]
CASE_IDS = [c[0] for c in GPU_CASES]
STATIONARY_CASES = [c for c in GPU_CASES if c[1] in STATIONARY]
#: (id, kernel name, params as a function of D): the registry's examples marked ``offset``,
#: chosen for data at 1000 + 0.05 N(0, 1); split into dot-product kernels and the rest.
OFFSET_CASES = [
    (f"{name}-{example.id}", name, example.params)
    for name, spec in REGISTRY.items()
    for example in spec.examples if example.offset
]
OFFSET_DOT_CASES = [c for c in OFFSET_CASES if c[1] in DOT_KINDS]
#: Without the registry's "-cancel" examples, whose gamma x·y + coef0 cancels on purpose (no
#: float32 output holds it to 1e-6; bounds that know the conditioning check those, as matvec's).
OFFSET_DOT_CASES_WELL_CONDITIONED = [c for c in OFFSET_DOT_CASES if not c[0].endswith("-cancel")]
OFFSET_OTHER_CASES = [c for c in OFFSET_CASES if c[1] not in DOT_KINDS]


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


# ------------------------------------------------------------------- data that test numerics
#: Row scales of the cosine tests: squares of such rows underflow / overflow the dtype (0: a
#: zero row). float64 adds scales whose squares leave float64's range.
ROW_SCALES = {
    "float32": (1e-30, 1e-20, 1.0, 1e20, 1e30, 0.0),
    "float64": (1e-30, 1e-20, 1.0, 1e20, 1e30, 0.0, 1e-300, 1e300),
}


def scaled_rows(rng, n, d, dtype_name, device):
    """Standard-normal rows, row i multiplied by ``ROW_SCALES[dtype_name][i % len]``."""
    scales = np.array(ROW_SCALES[dtype_name])[np.arange(n) % len(ROW_SCALES[dtype_name])]
    return torch.from_numpy(rng.standard_normal((n, d)) * scales[:, None]).to(
        dtype=DTYPES[dtype_name], device=device)


#: Per-feature (ARD) kernels far from the origin: (offset, smallest and largest length scale)
#: per dtype. float64 at 1e6 (spacing 1.2e-10) resolves spreads of 1e-4; float32's spacing at
#: 1e6 is 0.0625, so float32 data sit at 1e3 (spacing 6.1e-5) with scales from 1e-2.
ARD_DATA = {"float64": (1e6, 1e-4, 1.0), "float32": (1e3, 1e-2, 1.0)}
ARD_KERNELS = ("rbf", "laplacian", "matern", "rational_quadratic")


def ard_case(rng, name, n, m, d, dtype_name, device):
    """(x, y, length scales, registry params): data offset by ``ARD_DATA[dtype]`` with feature k
    spread by its length scale l_k (log-spaced), and per-feature parameters that keep K in (0, 1)."""
    offset, lo, hi = ARD_DATA[dtype_name]
    ls = np.logspace(np.log10(lo), np.log10(hi), d)
    x, y = (torch.from_numpy(offset + ls * rng.standard_normal((k, d))).to(
        dtype=DTYPES[dtype_name], device=device) for k in (n, m))
    params = {"rbf": dict(gamma=1.0 / (2 * d * ls**2)), "laplacian": dict(gamma=1.0 / (d * ls)),
              "matern": dict(length_scale=np.sqrt(d) * ls, nu=1.5),
              "rational_quadratic": dict(length_scale=np.sqrt(d) * ls, alpha=0.7)}[name]
    return x, y, params


def exact_ard(name, params, x, y):
    """K from float64 differences formed *before* any weighting (exact for data this close
    together: Sterbenz), written out here independently of kernelkit_math."""
    X, Y = to_numpy64(x), to_numpy64(y)
    diff = X[:, None, :] - Y[None, :, :]
    if name == "rbf":
        return np.exp(-(params["gamma"] * diff**2).sum(-1))
    if name == "laplacian":
        return np.exp(-(params["gamma"] * np.abs(diff)).sum(-1))
    r2 = (diff**2 / params["length_scale"] ** 2).sum(-1)
    if name == "matern":  # nu = 1.5
        t = np.sqrt(3.0 * r2)
        return (1.0 + t) * np.exp(-t)
    return (1.0 + r2 / (2.0 * params["alpha"])) ** -params["alpha"]


# --------------------------------------------------------------------------------- spies
def spy_calls(monkeypatch, targets):
    """Replace each function ``module.name`` of ``targets`` (``(module, name, tag)`` triples) by a
    spy that appends ``tag`` to the returned list, then calls the real function: proof that a
    launcher ran (and how often, in which order)."""
    calls = []
    for module, name, tag in targets:
        real = getattr(module, name)

        def spy(*args, _real=real, _tag=tag, **kwargs):
            calls.append(_tag)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    return calls


class _KernelSpy:
    """Stands in for a Triton kernel launched as ``kernel[grid](*args, **kwargs)``."""

    def __init__(self, real, tag, calls):
        self.real, self.tag, self.calls = real, tag, calls

    def __getitem__(self, grid):
        launch = self.real[grid]

        def run(*args, **kwargs):
            self.calls.append((self.tag, kwargs))
            return launch(*args, **kwargs)

        return run


def spy_kernels(monkeypatch, module, tags):
    """Replace each Triton kernel ``module.<name>`` (``tags``: {name: tag}) by a spy; every launch
    appends ``(tag, keyword arguments)`` to the returned list, then runs the real kernel."""
    calls = []
    for name, tag in tags.items():
        monkeypatch.setattr(module, name, _KernelSpy(getattr(module, name), tag, calls))
    return calls


# ------------------------------------------------------------------ attention: the accuracy rule
#: Dtypes of the Triton attention kernels.
ATTN_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Unit roundoff of each dtype (2^-p, p = significand bits): the floor of the rule is a few of these.
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: Floors of the rule in units of the dtype's roundoff times max(1, max |reference|). Gradients get
#: more: the backward forms delta_i = rowsum(dO_i O_i) - dlse_i in float32 and subtracts it from
#: dP; where one key carries all the weight (p = 1, e.g. the first causal row) eager autograd
#: cancels exactly, while the fused form keeps the rounding of that length-Dv sum.
FLOOR_OUT, FLOOR_GRAD = 2.0, 8.0


def f64(t):
    return t.detach().to(torch.float64)


def max_err(a, ref):
    a = to_numpy64(a) if isinstance(a, torch.Tensor) else a
    ref = to_numpy64(ref) if isinstance(ref, torch.Tensor) else ref
    assert np.isfinite(a).all(), "non-finite values (unwritten or poisoned elements?)"
    return float(np.max(np.abs(a - ref), initial=0.0))


def check_rule(ours, naive, ref, dtype_name, what, floor_ulps=FLOOR_OUT, term_scale=0.0):
    """FlashAttention rule: err(ours) <= 2 err(same-dtype eager torch) + a floor of ``floor_ulps``
    units in the last place of max(1, the largest reference value) (both errors against
    float64), or, if larger, ``floor_ulps`` float32 units of ``term_scale``: the size of the
    terms that cancel in float32 arithmetic (gradients pass the softmax tests'
    ``gradient_term_scales``; every dtype accumulates and subtracts them in float32, so their
    rounding is float32's)."""
    ref = to_numpy64(ref) if isinstance(ref, torch.Tensor) else ref
    e_ours, e_naive = max_err(ours, ref), max_err(naive, ref)
    scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    bound = 2.0 * e_naive + floor_ulps * max(UNIT[dtype_name] * scale, UNIT["float32"] * term_scale)
    assert e_ours <= bound, (
        f"{what} ({dtype_name}): error {e_ours:.3g} > 2 x eager-torch error {e_naive:.3g} "
        f"+ floor = {bound:.3g}"
    )


def spy_gram_rows(monkeypatch):
    """The ``chunk_rows`` of every ``kernelkit_gpu.GramRows`` built from now on (None: the points
    kept on the device), in order."""
    import kernelkit_gpu

    chunks = []
    real = kernelkit_gpu.GramRows

    def spy(*args, **kwargs):
        chunks.append(kwargs.get("chunk_rows"))
        return real(*args, **kwargs)

    monkeypatch.setattr(kernelkit_gpu, "GramRows", spy)
    return chunks
