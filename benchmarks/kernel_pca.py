"""kernelkit's KernelPCA, Nystroem and RBFSampler on the GPU against scikit-learn (issue 41).

Data: ``higgs_like`` of benchmarks/kernel_ridge.py (28 standardised HIGGS-shaped features, labels
+-1), RBF kernel with gamma = 1 / d, unless a part says otherwise. Parts (``--parts``,
comma-separated), each writing its numbers into the JSON after every measurement:

- ``kpca_small``: n = ``--n-small`` (2e4), ``--components`` (64) components. kernelkit
  ``KernelPCA(eigen_solver="krylov")``: a warm-up fit on ``--warmup-n`` rows (compiles the
  kernels), then the timed fit; its eigenvalues against a dense float64 ``torch.linalg.eigvalsh``
  of the explicitly centred K (K from the exact formula, on the device; timed); scikit-learn's
  ``KernelPCA(eigen_solver="randomized", random_state=0)`` on the CPU (float64), its time and
  eigenvalue error. Floors: max relative eigenvalue error <= 1e-4, >= 50x scikit-learn.
- ``kpca_mid``: n = ``--n-mid`` (1e5): krylov fit time (floor <= 5 s), max residual / lambda_1.
- ``kpca_large``: n = ``--n-large`` (1e6), X a float32 torch tensor on the device: fit time
  (floor <= 120 s), every residual bound <= 1e-3 lambda_1, peak GPU memory.
- ``kpca_real``: scikit-learn's digits (bundled, standardised; ``--real-test`` held-out rows),
  gamma = 1 / d, ``--real-components`` components: kernelkit (default solver, then "krylov")
  against scikit-learn's KernelPCA with the same parameters: max |difference| of the
  ``fit_transform`` embeddings up to a sign per column (floor 1e-6 for the default solver) and of
  ``transform`` on the held-out rows.
- ``nystroem``: n = ``--nystroem-n`` (1e6) float32 rows on the device, M = ``--nystroem-m`` (1e4)
  landmarks: fit and transform times (output type recorded; a transform that runs out of GPU
  memory is recorded and then timed in row chunks); scikit-learn's Nystroem given kernelkit's
  fitted state (``components_``, ``component_indices_``, ``normalization_``) transforms
  ``--sklearn-rows`` rows on the CPU in float64 and float32: seconds per row, extrapolated
  linearly to n (transform is linear in the rows); agreement on ``--check-rows`` rows; speed-up
  against the faster dtype (floor 20x). Then ``Pipeline([Nystroem, RidgeClassifier])`` fit and
  accuracy at ``--pipeline-n`` rows, M = ``--pipeline-m``.
- ``rbf_sampler``: RBFSampler against scikit-learn's at the same random_state in float64 (max
  |difference|, floor 1e-12) on the CPU and on the device; transform of ``--rbf-n`` x 28 float32
  rows on the device with ``--rbf-components`` features against scikit-learn on
  ``--sklearn-rows`` rows (per row, extrapolated).

kernelkit's krylov fits are traced: time and calls of the kernel products (by dtype and width)
and of the basis orthonormalisation (``kernelkit.linalg.eigen._orthonormal_block``), with a
synchronisation after each (``breakdown``). A part that raises records its traceback and the
next part runs.

On the GPU machine, two commands of at most ~500 s each::

    python benchmarks/kernel_pca.py --parts kpca_small,kpca_mid,kpca_large,kpca_real \\
        --out benchmarks/results/kernel-pca-kpca-h200.json
    python benchmarks/kernel_pca.py --parts nystroem,rbf_sampler \\
        --out benchmarks/results/kernel-pca-approx-h200.json

``--smoke`` runs every part at tiny sizes on the CPU, the estimators' GPU code paths (Triton
kernels, tensor operands) under the Triton interpreter (``TRITON_INTERPRET=1``): it proves the
script runs; its floors mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (check_mode, default_out, device_facts, log, now, sync,  # noqa: E402
                     versions, wall_s, write_json_atomic)
from kernel_ridge import higgs_like  # noqa: E402

PARTS = ("kpca_small", "kpca_mid", "kpca_large", "kpca_real", "nystroem", "rbf_sampler",
         "kpca_products")
#: Issue 41's floors: (limit, "max" for value <= limit or "min" for value >= limit).
FLOORS = {
    "kpca_small.max_rel_eigenvalue_error": (1e-4, "max"),
    "kpca_small.speedup_vs_sklearn": (50.0, "min"),
    "kpca_mid.fit_s": (5.0, "max"),
    "kpca_large.fit_s": (120.0, "max"),
    "kpca_large.max_residual_over_lambda1": (1e-3, "max"),
    "kpca_real.default_solver_fit_transform_max_abs_diff": (1e-6, "max"),
    "nystroem.transform_speedup_vs_sklearn": (20.0, "min"),
    "rbf_sampler.max_abs_diff_cpu": (1e-12, "max"),
    "rbf_sampler.max_abs_diff_device": (1e-12, "max"),
}
SMOKE = dict(n_small=300, n_mid=400, n_large=600, components=8, warmup_n=100, real_rows=300,
             real_test=60, real_components=6, nystroem_n=2000, nystroem_m=40, sklearn_rows=500,
             check_rows=200, pipeline_n=1000, pipeline_m=40, pipeline_test=300, rbf_n=2000,
             rbf_components=64, rbf_check_n=300, rbf_check_components=32, product_n=[300, 500],
             product_columns=20, product_check_n=400)


# ------------------------------------------------------------------------------------ helpers
def higgs(n, seed=0):
    """``(X, y)``: n standardised HIGGS-shaped rows (float64) and their labels +-1."""
    X, y, _, _ = higgs_like(n, 2, seed)
    return X, y


def timed(fn, dev):
    """``(seconds, fn())``, synchronised before and after."""
    sync(dev)
    t = time.perf_counter()
    out = fn()
    sync(dev)
    return time.perf_counter() - t, out


def rel_error(values, reference):
    return float(np.max(np.abs(np.asarray(values) - reference) / np.abs(reference)))


def sign_aligned_diff(Z, Z_ref, signs=None):
    """``(max |Z s - Z_ref|, s)``: s = +-1 per column, the sign that best matches Z_ref (given
    ``signs``: those)."""
    if signs is None:
        signs = np.sign((Z * Z_ref).sum(axis=0))
        signs[signs == 0] = 1.0
    return float(np.max(np.abs(Z * signs - Z_ref))), signs


def numpy_of(Z):
    return Z.detach().cpu().numpy() if hasattr(Z, "detach") else np.asarray(Z)


def output_kind(Z):
    """What an estimator returned: its type, dtype, device and shape."""
    if hasattr(Z, "detach"):
        return dict(type="torch.Tensor", dtype=str(Z.dtype), device=str(Z.device),
                    shape=list(Z.shape))
    return dict(type=type(Z).__name__, dtype=str(Z.dtype), shape=list(Z.shape))


def blas_threads():
    from threadpoolctl import threadpool_info

    return {i["internal_api"]: i.get("num_threads") for i in threadpool_info()}


def peak_reset(dev):
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**30
    return None


def peak_gib(dev):
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**30
    return None


def free_device_memory(dev):
    import gc

    gc.collect()
    if dev == "cuda":
        import torch

        torch.cuda.empty_cache()


class Trace:
    """Times the kernel products (``KernelOperator.matmul``, by operand dtype and columns), the
    block Krylov orthonormalisations (``eigen._orthonormal_block``) and ``torch.linalg.eigh``
    (Rayleigh-Ritz, by shape) inside a ``with``,
    synchronising after each call; :meth:`summary` adds what the rest of the fit took."""

    def __init__(self, dev):
        self.dev = dev
        self.stats = {}

    def _wrap(self, fn, key_of):
        stats, dev = self.stats, self.dev

        def wrapped(*args, **kwargs):
            sync(dev)
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            sync(dev)
            entry = stats.setdefault(key_of(*args), dict(calls=0, s=0.0))
            entry["calls"] += 1
            entry["s"] += time.perf_counter() - t
            return out
        return wrapped

    def __enter__(self):
        from kernelkit.linalg import eigen
        from kernelkit.operators import kernel_operator

        import torch

        self._saved = (kernel_operator.KernelOperator.matmul, eigen._orthonormal_block,
                       torch.linalg.eigh)
        matmul, block, eigh = self._saved
        torch.linalg.eigh = self._wrap(eigh, lambda A, *a, **k: f"eigh {tuple(A.shape)}")

        def product_key(op, A, B, V):
            dtype = str(A.dtype).replace("torch.", "")
            return f"K@V {dtype} operands, {V.shape[1]} columns"

        kernel_operator.KernelOperator.matmul = self._wrap(matmul, product_key)
        eigen._orthonormal_block = self._wrap(block, lambda *a: "orthonormal_block")
        return self

    def __exit__(self, *exc):
        from kernelkit.linalg import eigen
        from kernelkit.operators import kernel_operator

        import torch

        (kernel_operator.KernelOperator.matmul, eigen._orthonormal_block,
         torch.linalg.eigh) = self._saved
        return False

    def summary(self, total_s):
        traced = sum(e["s"] for e in self.stats.values())
        return dict(self.stats, untraced_s=total_s - traced)


class HostSVDTimer:
    """Times ``numpy.linalg.svd`` calls inside a ``with`` (Nystroem.fit's K_mm factorisation on
    the host)."""

    def __enter__(self):
        self.calls, self.s = 0, 0.0
        self._saved = np.linalg.svd

        def svd(*args, **kwargs):
            t = time.perf_counter()
            out = self._saved(*args, **kwargs)
            self.calls += 1
            self.s += time.perf_counter() - t
            return out
        np.linalg.svd = svd
        return self

    def __exit__(self, *exc):
        np.linalg.svd = self._saved
        return False


class Bench:
    """The run: arguments, device, the JSON being filled and its floors."""

    def __init__(self, args, dev):
        self.args, self.dev = args, dev
        self.est_device = dev  # the estimators' ``device``
        self.kpca_warm = None
        facts = (device_facts(dev) if dev == "cuda" or args.smoke
                 else dict(name="cpu-float64", note="--device cpu: the NumPy/torch CPU paths"))
        self.out = args.out or default_out("kernel-pca", facts["name"])
        self.result = dict(benchmark="kernel_pca", issue=41, date=now(), smoke=args.smoke,
                           device=dev, device_facts=facts, versions=versions(),
                           cpu_count=os.cpu_count(), blas_threads=blas_threads(),
                           args=vars(args), floors={}, parts={})

    def part(self, name):
        return self.result["parts"].setdefault(name, {})

    def save(self):
        write_json_atomic(self.out, self.result)

    def floor(self, key, value):
        limit, kind = FLOORS[key]
        met = bool(value <= limit) if kind == "max" else bool(value >= limit)
        self.result["floors"][key] = dict(value=value, floor=limit, kind=kind, met=met)
        self.save()

    def record(self, name, **values):
        self.part(name).update(values)
        log(f"  {name}: " + ", ".join(f"{k}={_short(v)}" for k, v in values.items()))
        self.save()


def _short(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{...}"
    return str(v)


# ------------------------------------------------------------------------------- KernelPCA
def kpca(bench, k, gamma, solver="krylov"):
    from kernelkit import KernelPCA

    return KernelPCA(n_components=k, kernel="rbf", gamma=gamma, eigen_solver=solver,
                     device=bench.est_device, random_state=0)


def kpca_warm_up(bench, gamma):
    """One krylov fit on ``--warmup-n`` rows (compiles the kernels); its seconds, once."""
    if bench.kpca_warm is None:
        X, _ = higgs(bench.args.warmup_n, seed=7)
        bench.kpca_warm, _ = timed(lambda: kpca(bench, bench.args.components, gamma).fit(X),
                                   bench.dev)
        log(f"  krylov warm-up fit on {len(X)} rows: {bench.kpca_warm:.2f} s")
    return bench.kpca_warm


def kpca_timed_fit(bench, X, k, gamma):
    """The traced krylov fit of X: ``(model, record)``."""
    model = kpca(bench, k, gamma)
    with Trace(bench.dev) as trace, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seconds, _ = timed(lambda: model.fit(X), bench.dev)
    values, bounds = model.eigenvalues_, model.residual_bounds_
    return model, dict(
        fit_s=seconds, eigen_solver=model.eigen_solver_, n_products=int(model.n_iter_),
        n_components=int(len(values)), lambda_1=float(values[0]), lambda_k=float(values[-1]),
        max_residual_over_lambda1=float(bounds.max() / values[0]),
        residual_over_lambda1=(bounds / values[0]).tolist(), breakdown=trace.summary(seconds),
        warnings=[str(w.message) for w in caught])


def reference_eigenvalues(X, gamma, k, dev):
    """``(top k eigenvalues, seconds to form K, seconds of eigvalsh)`` of the centred float64
    RBF K of X, formed from the exact formula on ``dev``."""
    import torch

    def form():
        x = torch.tensor(X, dtype=torch.float64, device=dev)
        sq = (x * x).sum(dim=1)
        K = x @ x.T
        K.mul_(-2.0).add_(sq[:, None]).add_(sq[None, :]).clamp_(min=0.0).mul_(-gamma).exp_()
        K -= K.mean(dim=0, keepdim=True)  # H K H: column means, then the row means of that
        K -= K.mean(dim=1, keepdim=True)
        return K

    form_s, K = timed(form, dev)
    eig_s, w = timed(lambda: torch.linalg.eigvalsh(K), dev)
    return w.flip(0)[:k].cpu().numpy(), form_s, eig_s


def part_kpca_small(bench):
    from sklearn.decomposition import KernelPCA as SKKernelPCA

    a, name = bench.args, "kpca_small"
    X, _ = higgs(a.n_small)
    gamma, k = 1.0 / X.shape[1], a.components
    bench.record(name, n=len(X), d=X.shape[1], gamma=gamma, k=k,
                 warmup_fit_s=kpca_warm_up(bench, gamma), warmup_n=a.warmup_n)
    model, fit = kpca_timed_fit(bench, X, k, gamma)
    bench.record(name, kernelkit=fit)
    ref, form_s, eig_s = reference_eigenvalues(X, gamma, k, bench.dev)
    free_device_memory(bench.dev)
    err = rel_error(model.eigenvalues_, ref)
    bench.record(name, reference=dict(form_K_s=form_s, eigvalsh_s=eig_s,
                                      eigenvalues=ref.tolist()),
                 kernelkit_max_rel_eigenvalue_error=err,
                 kernelkit_rel_eigenvalue_errors=(np.abs(model.eigenvalues_ - ref) / ref).tolist())
    bench.floor(f"{name}.max_rel_eigenvalue_error", err)
    sk = SKKernelPCA(n_components=k, kernel="rbf", gamma=gamma, eigen_solver="randomized",
                     random_state=0)
    sk_s, _ = timed(lambda: sk.fit(X), "cpu")
    speedup = sk_s / fit["fit_s"]
    bench.record(name, sklearn=dict(fit_s=sk_s, eigen_solver="randomized",
                                    max_rel_eigenvalue_error=rel_error(sk.eigenvalues_, ref)),
                 speedup_vs_sklearn=speedup)
    bench.floor(f"{name}.speedup_vs_sklearn", speedup)


def part_kpca_mid(bench):
    X, _ = higgs(bench.args.n_mid)
    gamma = 1.0 / X.shape[1]
    bench.record("kpca_mid", n=len(X), d=X.shape[1], gamma=gamma, k=bench.args.components,
                 warmup_fit_s=kpca_warm_up(bench, gamma))
    _, fit = kpca_timed_fit(bench, X, bench.args.components, gamma)
    bench.record("kpca_mid", kernelkit=fit)
    bench.floor("kpca_mid.fit_s", fit["fit_s"])


def part_kpca_large(bench):
    import torch

    X, _ = higgs(bench.args.n_large)
    gamma = 1.0 / X.shape[1]
    bench.record("kpca_large", n=len(X), d=X.shape[1], gamma=gamma, k=bench.args.components,
                 warmup_fit_s=kpca_warm_up(bench, gamma))
    data = torch.tensor(X, dtype=torch.float32, device=bench.dev)
    given = f"torch.float32 tensor on {bench.dev}"
    try:  # a tensor on the device, if the estimator takes one (tried on a few rows)
        kpca(bench, bench.args.components, gamma).fit(data[:bench.args.warmup_n])
    except (TypeError, ValueError) as exc:
        bench.record("kpca_large", tensor_input_refused=repr(exc))
        data, given = data.cpu().numpy(), "NumPy float32 (the tensor was refused)"
    del X
    base = peak_reset(bench.dev)
    _, fit = kpca_timed_fit(bench, data, bench.args.components, gamma)
    bench.record("kpca_large", input=given, kernelkit=fit, gpu_memory_before_GiB=base,
                 gpu_peak_GiB=peak_gib(bench.dev))
    bench.floor("kpca_large.fit_s", fit["fit_s"])
    bench.floor("kpca_large.max_residual_over_lambda1", fit["max_residual_over_lambda1"])


def part_kpca_products(bench):
    """One krylov product, K V with V of ``--product-columns`` float64 columns (the block of 64
    components) at each n of ``--product-n``, three ways: the fused Triton K @ V (what "krylov"
    runs), Triton Gram row blocks made float64 times V (float64 GEMMs, KernelOperator.matmul's
    wide path), and the float32 Gram blocks times V in float32 (TF32 off); their relative
    Frobenius errors against the float64 product where n <= ``--product-check-n``."""
    import torch

    from kernelkit.operators.base import WIDE_BLOCK_ELEMENTS
    from kernelkit.operators.kernel_operator import KernelOperator

    torch.backends.cuda.matmul.allow_tf32 = False
    for n in bench.args.product_n:
        X, _ = higgs(n)
        gamma = 1.0 / X.shape[1]
        op = KernelOperator("rbf", {"gamma": gamma}, bench.est_device)
        Xo = op.data(X)
        V = torch.randn(n, bench.args.product_columns, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0)).to(op.device)
        step = max(1, WIDE_BLOCK_ELEMENTS // n)
        V32 = V.float()
        ways = {
            "fused_triton_kv": lambda: op.matmul(Xo, Xo, V),
            "gram_blocks_float64_gemm": lambda: op.chunked_matmul(
                (0, n), step, V, lambda lo, hi: op.block(Xo[lo:hi], Xo).double()),
            "gram_blocks_float32_gemm": lambda: op.chunked_matmul(
                (0, n), step, V32, lambda lo, hi: op.block(Xo[lo:hi], Xo)).double(),
        }
        row = dict(n=n, columns=V.shape[1], gamma=gamma)
        outs = {}
        for name, way in ways.items():
            way()  # compiles; the second call is timed
            seconds, outs[name] = timed(way, bench.dev)
            row[name + "_s"] = seconds
        if n <= bench.args.product_check_n:
            Xe = op.exact_data(X)
            exact = op.matmul(Xe, Xe, V)
            for name, out in outs.items():
                row[name + "_rel_error"] = float(torch.linalg.norm(out - exact)
                                                 / torch.linalg.norm(exact))
        bench.record("kpca_products", **{f"n{n}": row})
        outs.clear()
        ways.clear()
        free_device_memory(bench.dev)


def part_kpca_real(bench):
    from sklearn.datasets import load_digits
    from sklearn.decomposition import KernelPCA as SKKernelPCA
    from sklearn.preprocessing import StandardScaler

    a, name = bench.args, "kpca_real"
    X, _ = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    if a.real_rows:
        order = order[:a.real_rows]
    test, train = order[:a.real_test], order[a.real_test:]
    scaler = StandardScaler().fit(X[train])
    Xtr, Xte = scaler.transform(X[train]), scaler.transform(X[test])
    gamma, k = 1.0 / X.shape[1], a.real_components
    bench.record(name, dataset="sklearn.datasets.load_digits, standardised on the training rows",
                 n_train=len(Xtr), n_test=len(Xte), d=X.shape[1], gamma=gamma, k=k)
    sk = SKKernelPCA(n_components=k, kernel="rbf", gamma=gamma)
    sk_fit_s, Z_sk = timed(lambda: sk.fit_transform(Xtr), "cpu")
    T_sk = sk.transform(Xte)
    bench.record(name, sklearn=dict(fit_transform_s=sk_fit_s, eigen_solver="auto",
                                    max_abs_embedding=float(np.abs(Z_sk).max())))
    for label, solver in (("default_solver", "auto"), ("krylov", "krylov")):
        warm = kpca(bench, k, gamma, solver)  # compiles the kernels of d = 64 first
        warm.fit_transform(Xtr[:300])
        warm.transform(Xte)
        model = kpca(bench, k, gamma, solver)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit_s, Z = timed(lambda: model.fit_transform(Xtr), bench.dev)  # noqa: B023
            T = model.transform(Xte)
        diff, signs = sign_aligned_diff(Z, Z_sk)
        t_diff, _ = sign_aligned_diff(T, T_sk, signs)
        bench.record(name, **{label: dict(
            eigen_solver=model.eigen_solver_, fit_transform_s=fit_s,
            fit_transform_max_abs_diff=diff, transform_held_out_max_abs_diff=t_diff,
            max_rel_eigenvalue_diff=rel_error(model.eigenvalues_, sk.eigenvalues_),
            max_residual_over_lambda1=float(model.residual_bounds_.max()
                                            / model.eigenvalues_[0]),
            warnings=[str(w.message) for w in caught])})
        if label == "default_solver":
            bench.floor(f"{name}.default_solver_fit_transform_max_abs_diff", diff)


# -------------------------------------------------------------------------------- Nystroem
def sklearn_nystroem(fitted, gamma, dtype):
    """scikit-learn's Nystroem holding kernelkit's fitted state in ``dtype``."""
    from sklearn.kernel_approximation import Nystroem as SKNystroem

    sk = SKNystroem(kernel="rbf", gamma=gamma, n_components=len(fitted.components_),
                    random_state=0)
    sk.components_ = fitted.components_.astype(dtype)
    sk.component_indices_ = fitted.component_indices_
    sk.normalization_ = fitted.normalization_.astype(dtype)
    sk.n_features_in_ = fitted.n_features_in_
    sk._n_features_out = len(fitted.components_)
    return sk


def sklearn_per_row(transform, X_rows):
    """Seconds per row of scikit-learn's ``transform`` on ``X_rows`` (one call)."""
    seconds, _ = timed(lambda: transform(X_rows), "cpu")
    return dict(rows=len(X_rows), s=seconds, s_per_row=seconds / len(X_rows))


def chunked_transform_s(bench, model, Xg, rows):
    """Seconds to transform Xg in chunks of ``rows`` rows (each result dropped)."""
    def run():
        for lo in range(0, len(Xg), rows):
            model.transform(Xg[lo:lo + rows])
    return timed(run, bench.dev)[0]


def part_nystroem(bench):
    import torch
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import Pipeline

    from kernelkit import Nystroem

    a, dev, name = bench.args, bench.dev, "nystroem"
    X, _ = higgs(a.nystroem_n)
    X32 = X.astype(np.float32)
    del X
    gamma, n, m = 1.0 / X32.shape[1], len(X32), a.nystroem_m
    Xg = torch.from_numpy(X32).to(dev)
    bench.record(name, n=n, d=X32.shape[1], M=m, gamma=gamma,
                 input=f"torch.float32 tensor on {dev}")

    def make(components):
        return Nystroem(kernel="rbf", gamma=gamma, n_components=components, random_state=0,
                        device=bench.est_device)

    warm_rows = min(n, max(4 * a.pipeline_m, 4096))
    warm_s, _ = timed(lambda: make(min(256, warm_rows)).fit(Xg[:warm_rows]).transform(
        Xg[:warm_rows]), dev)
    bench.record(name, warmup_s=warm_s, warmup_rows=warm_rows)
    model = make(m)
    with HostSVDTimer() as svd:
        fit_s, _ = timed(lambda: model.fit(Xg), dev)
    bench.record(name, fit_s=fit_s, fit_host_svd_s=svd.s, fit_host_svd_calls=svd.calls)
    check_rows = min(a.check_rows, n)
    first_s, Z_check = timed(lambda: model.transform(Xg[:check_rows]), dev)
    bench.record(name, transform_output=output_kind(Z_check),
                 first_transform_check_rows_s=first_s)
    Z_check = numpy_of(Z_check)

    base = peak_reset(dev)
    try:
        transform_s, Z = timed(lambda: model.transform(Xg), dev)
        full = dict(transform_s=transform_s, output=output_kind(Z))
        del Z
    except torch.cuda.OutOfMemoryError as exc:
        full = dict(out_of_memory=str(exc).splitlines()[0])
    if "out_of_memory" in full:  # outside the handler: its traceback no longer holds memory
        free_device_memory(dev)
        rows = max(1, n // 10)
        transform_s = chunked_transform_s(bench, model, Xg, rows)
        full.update(chunked_rows=rows, transform_s=transform_s)
    bench.record(name, full_transform=dict(full, gpu_memory_before_GiB=base,
                                           gpu_peak_GiB=peak_gib(dev)),
                 transform_s=transform_s)
    free_device_memory(dev)

    sk_rows = min(a.sklearn_rows, n)
    sklearn = {}
    for dtype in (np.float64, np.float32):
        sk = sklearn_nystroem(model, gamma, dtype)
        timing = sklearn_per_row(sk.transform, X32[:sk_rows].astype(dtype))
        timing["extrapolated_to_n_s"] = timing["s_per_row"] * n
        if dtype == np.float64:
            Z_ref = sk.transform(X32[:check_rows].astype(np.float64))
            timing["check_rows"] = check_rows
            timing["max_abs_diff_vs_kernelkit"] = float(np.abs(Z_check - Z_ref).max())
            timing["max_abs_feature"] = float(np.abs(Z_ref).max())
        sklearn[np.dtype(dtype).name] = timing
        bench.record(name, sklearn=sklearn)
    best = min(sklearn.values(), key=lambda t: t["s_per_row"])
    speedup = best["extrapolated_to_n_s"] / transform_s
    bench.record(name, sklearn_s_per_row=best["s_per_row"],
                 sklearn_extrapolated_s=best["extrapolated_to_n_s"],
                 transform_speedup_vs_sklearn=speedup,
                 speedup_note="scikit-learn's transform timed on sklearn.<dtype>.rows rows of "
                              "the same float32 data (in float64 and in float32, the faster "
                              "taken), extrapolated linearly to n: transform is linear in the "
                              "rows")
    bench.floor(f"{name}.transform_speedup_vs_sklearn", speedup)
    Xg = model = None  # frees the device memory
    free_device_memory(dev)

    Xp, yp, Xpt, ypt = higgs_like(a.pipeline_n, a.pipeline_test, seed=3)
    pipe = Pipeline([("map", make(a.pipeline_m)), ("lin", RidgeClassifier(alpha=1.0))])
    fit_s, _ = timed(lambda: pipe.fit(Xp, yp), dev)
    score_s, accuracy = timed(lambda: pipe.score(Xpt, ypt), dev)
    linear = RidgeClassifier(alpha=1.0).fit(Xp, yp).score(Xpt, ypt)
    bench.record(name, pipeline=dict(
        steps="Pipeline([('map', kernelkit.Nystroem), ('lin', RidgeClassifier(alpha=1.0))])",
        input="NumPy float64", n=len(Xp), n_test=len(Xpt), M=a.pipeline_m, fit_s=fit_s,
        score_s=score_s, test_accuracy=float(accuracy),
        linear_ridge_classifier_accuracy=float(linear)))


# ------------------------------------------------------------------------------ RBFSampler
def part_rbf_sampler(bench):
    import torch
    from sklearn.kernel_approximation import RBFSampler as SKRBFSampler

    from kernelkit import RBFSampler

    a, dev, name = bench.args, bench.dev, "rbf_sampler"
    Xs, _ = higgs(a.rbf_check_n, seed=5)
    gamma = 1.0 / Xs.shape[1]
    sk = SKRBFSampler(gamma=gamma, n_components=a.rbf_check_components, random_state=0)
    Z_sk = sk.fit_transform(Xs)
    bench.record(name, check=dict(n=len(Xs), n_components=a.rbf_check_components, gamma=gamma,
                                  dtype="float64"))
    for label, where in (("cpu", "cpu"), ("device", bench.est_device)):
        ours = RBFSampler(gamma=gamma, n_components=a.rbf_check_components, random_state=0,
                          device=where)
        Z = ours.fit_transform(Xs)
        diff = float(np.abs(numpy_of(Z) - Z_sk).max())
        bench.record(name, **{f"equality_{label}": dict(
            device=where, max_abs_diff=diff, output=output_kind(Z),
            weights_identical=bool(np.array_equal(ours.random_weights_, sk.random_weights_)),
            offsets_identical=bool(np.array_equal(ours.random_offset_, sk.random_offset_)))})
        bench.floor(f"{name}.max_abs_diff_{label}", diff)

    X, _ = higgs(a.rbf_n)
    X32 = X.astype(np.float32)
    del X
    Xg = torch.from_numpy(X32).to(dev)
    model = RBFSampler(gamma=gamma, n_components=a.rbf_components, random_state=0,
                       device=bench.est_device).fit(Xg)
    warm_s, _ = timed(lambda: model.transform(Xg[:1000]), dev)
    base = peak_reset(dev)
    first_s, Z = timed(lambda: model.transform(Xg), dev)
    output = output_kind(Z)
    del Z
    transform_s = wall_s(lambda: model.transform(Xg), dev, runs=3)
    bench.record(name, speed=dict(n=len(X32), n_components=a.rbf_components,
                                  input=f"torch.float32 tensor on {dev}", output=output,
                                  warmup_1000_rows_s=warm_s, first_transform_s=first_s,
                                  transform_s_median_of_3=transform_s,
                                  gpu_memory_before_GiB=base, gpu_peak_GiB=peak_gib(dev),
                                  tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32)))
    Xg = model = None  # frees the device memory
    free_device_memory(dev)
    sk_rows = min(a.sklearn_rows, len(X32))
    sklearn = {}
    for dtype in (np.float64, np.float32):
        sk = SKRBFSampler(gamma=gamma, n_components=a.rbf_components, random_state=0)
        sk.fit(X32[:10].astype(dtype))
        timing = sklearn_per_row(sk.transform, X32[:sk_rows].astype(dtype))
        timing["extrapolated_to_n_s"] = timing["s_per_row"] * len(X32)
        sklearn[np.dtype(dtype).name] = timing
    best = min(sklearn.values(), key=lambda t: t["s_per_row"])
    bench.record(name, sklearn=sklearn, sklearn_s_per_row=best["s_per_row"],
                 sklearn_extrapolated_s=best["extrapolated_to_n_s"],
                 transform_speedup_vs_sklearn=best["extrapolated_to_n_s"] / transform_s)


# ------------------------------------------------------------------------------------ main
RUNNERS = dict(kpca_small=part_kpca_small, kpca_mid=part_kpca_mid, kpca_large=part_kpca_large,
               kpca_real=part_kpca_real, nystroem=part_nystroem, rbf_sampler=part_rbf_sampler,
               kpca_products=part_kpca_products)


def table(result):
    lines = [f"{result['device_facts']['name']}, torch {result['versions']['torch']}, triton "
             f"{result['versions']['triton']}"]
    for part, rec in result["parts"].items():
        if "error" in rec:
            lines.append(f"{part:<12} ERROR {rec['error']}")
            continue
        fit = rec.get("kernelkit", {})
        if fit:
            lines.append(f"{part:<12} n={rec['n']:>8} krylov fit {fit['fit_s']:8.2f} s, "
                         f"{fit['n_products']} products, max residual / lambda_1 "
                         f"{fit['max_residual_over_lambda1']:.2e}")
        if part == "kpca_small" and "sklearn" in rec:
            lines.append(f"{'':<12} eigenvalue rel. error "
                         f"{rec['kernelkit_max_rel_eigenvalue_error']:.2e} (sklearn randomized "
                         f"{rec['sklearn']['max_rel_eigenvalue_error']:.2e}); "
                         f"sklearn {rec['sklearn']['fit_s']:.1f} s = "
                         f"{rec['speedup_vs_sklearn']:.0f}x; eigvalsh "
                         f"{rec['reference']['eigvalsh_s']:.1f} s")
        if part == "kpca_large" and rec.get("gpu_peak_GiB") is not None:
            lines.append(f"{'':<12} peak GPU memory {rec['gpu_peak_GiB']:.1f} GiB")
        if part == "kpca_real":
            for label in ("default_solver", "krylov"):
                if label in rec:
                    r = rec[label]
                    lines.append(f"{part:<12} {label} ({r['eigen_solver']}): fit_transform "
                                 f"diff {r['fit_transform_max_abs_diff']:.2e}, held-out "
                                 f"transform diff {r['transform_held_out_max_abs_diff']:.2e}")
        if part in ("nystroem", "rbf_sampler") and "transform_speedup_vs_sklearn" in rec:
            gpu_s = rec.get("transform_s", rec.get("speed", {}).get("transform_s_median_of_3"))
            lines.append(f"{part:<12} transform {gpu_s:.3f} s; sklearn "
                         f"{rec['sklearn_s_per_row'] * 1e6:.2f} us/row -> "
                         f"{rec['sklearn_extrapolated_s']:.1f} s extrapolated; "
                         f"{rec['transform_speedup_vs_sklearn']:.0f}x")
        if part == "nystroem" and "pipeline" in rec:
            p = rec["pipeline"]
            lines.append(f"{'':<12} fit {rec['fit_s']:.2f} s (host SVD {rec['fit_host_svd_s']:.2f}"
                         f" s); pipeline n={p['n']} M={p['M']}: fit {p['fit_s']:.2f} s, "
                         f"accuracy {p['test_accuracy']:.4f} (linear "
                         f"{p['linear_ridge_classifier_accuracy']:.4f})")
    lines.append("floors:")
    for key, f in result["floors"].items():
        op = "<=" if f["kind"] == "max" else ">="
        lines.append(f"  {key:<55} {f['value']:.3g} {op} {f['floor']:g}: "
                     f"{'met' if f['met'] else 'NOT met'}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    count = lambda s: int(float(s))  # noqa: E731
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--n-small", type=count, default=20_000)
    p.add_argument("--n-mid", type=count, default=100_000)
    p.add_argument("--n-large", type=count, default=1_000_000)
    p.add_argument("--components", type=int, default=64, help="KernelPCA components (krylov)")
    p.add_argument("--warmup-n", type=count, default=2000, help="rows of the warm-up fit")
    p.add_argument("--real-rows", type=count, default=0, help="digits rows used (0: all)")
    p.add_argument("--real-test", type=count, default=297, help="held-out digits rows")
    p.add_argument("--real-components", type=int, default=16)
    p.add_argument("--nystroem-n", type=count, default=1_000_000)
    p.add_argument("--nystroem-m", type=count, default=10_000)
    p.add_argument("--sklearn-rows", type=count, default=20_000,
                   help="rows scikit-learn's transforms are timed on")
    p.add_argument("--check-rows", type=count, default=2000,
                   help="rows on which Nystroem's outputs are compared")
    p.add_argument("--pipeline-n", type=count, default=100_000)
    p.add_argument("--pipeline-m", type=count, default=2000)
    p.add_argument("--pipeline-test", type=count, default=20_000)
    p.add_argument("--product-n", type=lambda v: [count(x) for x in v.split(",")],
                   default=[100_000, 1_000_000], help="kpca_products: comma-separated n")
    p.add_argument("--product-columns", type=count, default=128)
    p.add_argument("--product-check-n", type=count, default=100_000,
                   help="kpca_products: errors against the float64 product up to this n")
    p.add_argument("--rbf-n", type=count, default=1_000_000)
    p.add_argument("--rbf-components", type=count, default=4096)
    p.add_argument("--rbf-check-n", type=count, default=2000)
    p.add_argument("--rbf-check-components", type=count, default=512)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: a float64 CPU run at the given sizes (no Triton)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes on the CPU, GPU code paths under the Triton interpreter")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = p.parse_args(argv)
    parts = [s for s in args.parts.split(",") if s]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if args.smoke:
        vars(args).update(SMOKE)
        dev = check_mode("benchmarks/kernel_pca.py", True)
        from kernelkit.operators import kernel_operator

        kernel_operator.TRITON_ON_CPU = True  # the estimators' GPU paths, interpreted
    elif args.device == "cuda":
        dev = check_mode("benchmarks/kernel_pca.py", False)
    else:
        dev = "cpu"
    bench = Bench(args, dev)
    log(f"kernel_pca benchmark on {bench.result['device_facts']['name']} ({dev}); JSON: "
        f"{bench.out}")
    bench.save()
    for part in parts:
        log(f"[{part}] {now()}")
        t = time.perf_counter()
        try:
            RUNNERS[part](bench)
        except Exception as exc:  # the next part still runs; the JSON says what failed
            bench.record(part, error=f"{type(exc).__name__}: {exc}",
                         traceback=traceback.format_exc())
            log(traceback.format_exc())
        free_device_memory(dev)
        bench.record(part, part_s=time.perf_counter() - t)
    print(f"\nJSON: {bench.out}")
    print(table(bench.result))


if __name__ == "__main__":
    main()
