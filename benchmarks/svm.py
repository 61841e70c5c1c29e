"""kernelkit's SVC, SVR and OneClassSVM against scikit-learn's (libsvm) in the same process
(issue 40).

Parts (``--parts``, comma-separated):

- ``binary``: RBF SVC at ``--n`` training rows on a real set (cps1988, y = log weekly wage above
  its mean; benchmarks/zoo_data.py) and a synthetic one (HIGGS-shaped,
  ``kernel_ridge.higgs_like``): fit time of both (kernelkit after a warm-up fit that compiles
  its kernels), test accuracy, the dual objective of each from its own dual coefficients
  (computed the same way, in float64), and the support sets.
- ``svr``: RBF SVR (epsilon = 0.1) on cps1988's log wage and on a smooth synthetic target.
- ``oneclass``: RBF OneClassSVM (nu = 0.1) on the HIGGS-shaped rows.
- ``multiclass``: 10 classes, d = 64 (``make_classification``), OvO SVC: both at ``--n-multi``
  (agreement of ``predict`` on the test rows), kernelkit alone at ``--n-multi-large``.
- ``profile``: kernelkit's SVC on the HIGGS-shaped rows at ``--n``, with the solver's parts
  timed (synchronised): the subproblems (:func:`kernelkit.linalg.smo._subproblem`), the kernel
  rows (``RowCache``), the gradient reconstructions, and the rest of the outer loop.
- ``large``: kernelkit's SVC alone on HIGGS-shaped data at each ``--large-n``: time, time per
  point, test accuracy, n_iter and the KKT gap at exit, peak GPU memory.
- ``large-d``: kernelkit's SVC alone at ``--large-d-n`` rows of ``--large-d-dim`` standard-normal
  features (default 10^6 x 256: X is 2 GiB in float64), at most ``--large-d-max-iter`` pairwise
  steps, once per ``--large-d-modes``: ``auto`` (the points on the GPU where they fit,
  ``KernelOperator.rows_of``'s rule) and ``streamed`` (``ROWS_MEMORY_SHARE = 0``: X kept in
  pinned host memory and streamed to the GPU at every kernel-row request). Time, outer steps
  and time per step, kernel-row requests, peak GPU memory (the points' own bytes beside it),
  whether the points streamed and in chunks of how many.

``--working-set`` sets ``kernelkit.linalg.smo.WORKING_SET`` (variables per outer step, at most
1024 on a GPU) for every fit of the run.

scikit-learn runs with the same C, gamma, tol (and epsilon / nu) and ``cache_size=--sk-cache``
MB. The JSON is rewritten after every measurement, so a run cut short keeps what finished::

    python benchmarks/svm.py --parts binary,svr,oneclass,multiclass
    python benchmarks/svm.py --parts large-d,profile             # 10^6 x 256; one 2e4 fit's parts
    TRITON_INTERPRET=1 python benchmarks/svm.py --smoke     # tiny sizes on the CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (check_mode, default_out, device_facts, log, now, versions,  # noqa: E402
                     write_json_atomic)

PARTS = ("binary", "svr", "oneclass", "multiclass", "large", "large-d", "profile")


def cps1988(n, seed=0):
    import zoo_data

    return zoo_data.CASES["cps1988"].load(n=n, seed=seed)


def higgs(n, n_test, seed=0):
    from kernel_ridge import higgs_like

    return higgs_like(n, n_test, seed=seed)


def smooth_target(X, seed=0):
    """A smooth function of three random directions of X plus noise 0.1 (SVR's synthetic)."""
    W = np.random.default_rng(seed).standard_normal((X.shape[1], 3)) / np.sqrt(X.shape[1])
    P = X @ W
    noise = np.random.default_rng(seed + 1).standard_normal(len(X))
    return np.sin(2 * P[:, 0]) + 0.5 * P[:, 1] * P[:, 2] + 0.1 * noise


def gamma_scale(X):
    return 1.0 / (X.shape[1] * X.var())


def rbf_float64(A, B, gamma, device):
    """exp(-gamma |a - b|^2) in float64 by the difference form (no cancellation)."""
    import torch

    A = torch.as_tensor(A, dtype=torch.float64, device=device)
    B = torch.as_tensor(B, dtype=torch.float64, device=device)
    out = torch.empty((len(A), len(B)), dtype=torch.float64, device=device)
    for s in range(0, len(A), 1024):
        out[s:s + 1024] = torch.exp(-gamma * torch.cdist(A[s:s + 1024], B).square())
    return out


def dual_value(model, gamma, kind, y, device):
    """libsvm's dual objective of a fitted binary model from its dual_coef_ (float64):
    SVC 1/2 c^T K c - sum|c|; SVR 1/2 c^T K c + eps sum|c| - y_S^T c; one-class 1/2 c^T K c."""
    import torch

    c = torch.as_tensor(np.asarray(model.dual_coef_[0], dtype=np.float64), device=device)
    K = rbf_float64(model.support_vectors_, model.support_vectors_, gamma, device)
    quad = 0.5 * float(c @ (K @ c))
    if kind == "svc":
        return quad - float(c.abs().sum())
    if kind == "svr":
        ys = torch.as_tensor(y[model.support_], dtype=torch.float64, device=device)
        return quad + model.epsilon * float(c.abs().sum()) - float(ys @ c)
    return quad


def timed_fit(model, X, y, device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    model.fit(X, y) if y is not None else model.fit(X)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return seconds, peak


class Record:
    """The JSON document, written after every measurement."""

    def __init__(self, path, args, device):
        self.path = path
        self.doc = dict(benchmark="svm", date=now(), command=" ".join(sys.argv),
                        device=device_facts(device), versions=versions(),
                        args=vars(args), rows=[])
        self.write()

    def add(self, row):
        self.doc["rows"].append(row)
        self.write()
        log("  " + ", ".join(f"{k}={_short(v)}" for k, v in row.items()))

    def write(self):
        write_json_atomic(self.path, self.doc)


def _short(v):
    return f"{v:.6g}" if isinstance(v, float) else v


def compare(rec, part, dataset, kind, make_kk, make_sk, X, y, Xt, yt, gamma, device, args):
    """Fit both, record time, test score, dual objective and support-set agreement."""
    kk, sk = make_kk(), make_sk()
    kk_s, kk_peak = timed_fit(kk, X, y, device)
    row = dict(part=part, dataset=dataset, n=len(X), d=X.shape[1], gamma=gamma,
               kernelkit_s=kk_s, kernelkit_peak_mib=kk_peak, kernelkit_n_iter=int(
                   np.sum(kk.n_iter_)), kernelkit_n_support=int(len(kk.support_)))
    rec.add(dict(row, stage="kernelkit"))
    if len(X) > args.sk_max_n:
        rec.doc["rows"][-1]["sklearn"] = f"skipped: n > --sk-max-n {args.sk_max_n}"
        rec.write()
        return
    sk_s, _ = timed_fit(sk, X, y, "cpu")
    row.update(sklearn_s=sk_s, speedup=sk_s / kk_s, sklearn_n_support=int(len(sk.support_)))
    if kind == "svc":
        row.update(kernelkit_accuracy=float(kk.score(Xt, yt)),
                   sklearn_accuracy=float(sk.score(Xt, yt)))
        row["accuracy_diff_pp"] = 100 * abs(row["kernelkit_accuracy"] - row["sklearn_accuracy"])
        row["predict_agreement"] = float(np.mean(kk.predict(Xt) == sk.predict(Xt)))
    elif kind == "svr":
        row.update(kernelkit_rmse=float(np.sqrt(np.mean((kk.predict(Xt) - yt) ** 2))),
                   sklearn_rmse=float(np.sqrt(np.mean((sk.predict(Xt) - yt) ** 2))))
        row["max_prediction_diff"] = float(np.max(np.abs(kk.predict(Xt) - sk.predict(Xt))))
    else:
        row["sign_agreement"] = float(np.mean(kk.predict(Xt) == sk.predict(Xt)))
        row["max_decision_diff"] = float(np.max(np.abs(kk.decision_function(Xt)
                                                       - sk.decision_function(Xt))))
    if kind != "svc" or len(getattr(kk, "classes_", [0, 1])) == 2:
        f_kk = dual_value(kk, gamma, kind, y, device)
        f_sk = dual_value(sk, gamma, kind, y, device)
        row.update(kernelkit_dual=f_kk, sklearn_dual=f_sk,
                   dual_rel_diff=abs(f_kk - f_sk) / max(abs(f_sk), 1e-300))
    both = len(np.intersect1d(kk.support_, sk.support_))
    row["support_jaccard"] = both / len(np.union1d(kk.support_, sk.support_))
    rec.doc["rows"][-1] = row
    rec.write()
    log("  " + ", ".join(f"{k}={_short(v)}" for k, v in row.items()))


def profile_fit(fit, device):
    """Seconds of ``fit()`` in the SMO solver's parts, each call synchronised: subproblems (and
    their count and steps), kernel rows, gradient reconstructions; ``kernelkit_s`` the whole."""
    from unittest import mock

    import torch

    from kernelkit.linalg import smo

    spent = dict(subproblem_s=0.0, subproblem_calls=0, subproblem_steps=0, rows_s=0.0,
                 rows_calls=0, reconstruct_s=0.0, reconstruct_calls=0)

    inside = []  # non-empty within a reconstruction (its rows are counted there)

    def timed(name, fn, count_steps=False):
        def wrapper(*a, **k):
            if name == "reconstruct":
                inside.append(1)
                try:
                    return measured(*a, **k)
                finally:
                    inside.pop()
            return measured(*a, **k)

        def measured(*a, **k):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = fn(*a, **k)
            if device == "cuda":
                torch.cuda.synchronize()
            key = "rows_in_reconstruct" if name == "rows" and inside else name
            spent[key + "_s"] = spent.get(key + "_s", 0.0) + time.perf_counter() - start
            spent[key + "_calls"] = spent.get(key + "_calls", 0) + 1
            if count_steps:
                spent["subproblem_steps"] += int(out[2])
            return out
        return wrapper

    with mock.patch.object(smo, "_subproblem", timed("subproblem", smo._subproblem, True)), \
            mock.patch.object(smo.RowCache, "__call__", timed("rows", smo.RowCache.__call__)), \
            mock.patch.object(smo, "_reconstruct", timed("reconstruct", smo._reconstruct)):
        seconds, peak = timed_fit(type("Fit", (), {"fit": staticmethod(lambda *a: fit())})(),
                                  None, None, device)
    spent.update(kernelkit_s=seconds, kernelkit_peak_mib=peak,
                 rest_s=seconds - spent["subproblem_s"] - spent["rows_s"]
                 - spent["reconstruct_s"])
    return spent


def normal_classes(n, d, seed=0):
    """(X, y): n standard-normal rows of d features (float64) and labels +-1 from a smooth
    non-linear function of three random directions plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    W = np.random.default_rng(12345).standard_normal((d, 3)) / np.sqrt(d)
    P = X @ W
    f = np.sin(2.0 * P[:, 0]) + 0.5 * P[:, 1] ** 2 - 0.5 + P[:, 2] * P[:, 0]
    return X, np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)


def large_d_fit(fit, device, streamed):
    """Time ``fit()`` (peak GPU memory included) with the points kept on the GPU where they fit
    or, ``streamed``, always streamed from the host; count the outer steps (subproblems) and
    the kernel-row requests, and record how the points were held. ``--smoke`` runs the same
    Triton path on the CPU under the interpreter."""
    from unittest import mock

    import kernelkit_gpu
    from kernelkit.linalg import smo
    from kernelkit.operators import kernel_operator

    held, counts = [], dict(outer_steps=0, rows_calls=0)
    real_rows, real_subproblem = kernelkit_gpu.GramRows, smo._subproblem

    def rows(*a, **k):
        held.append(k.get("chunk_rows"))
        block = real_rows(*a, **k)

        def call(indices):
            counts["rows_calls"] += 1
            return block(indices)

        return call

    def subproblem(*a, **k):
        counts["outer_steps"] += 1
        return real_subproblem(*a, **k)

    share = 0.0 if streamed else kernel_operator.ROWS_MEMORY_SHARE
    with mock.patch.object(kernelkit_gpu, "GramRows", rows), \
            mock.patch.object(smo, "_subproblem", subproblem), \
            mock.patch.object(kernel_operator, "ROWS_MEMORY_SHARE", share), \
            mock.patch.object(kernel_operator, "TRITON_ON_CPU", device == "cpu"):  # --smoke
        seconds, peak = timed_fit(type("Fit", (), {"fit": staticmethod(lambda *a: fit())})(),
                                  None, None, device)
    return dict(seconds=seconds, peak=peak, streamed=held[0] is not None,
                chunk_rows=held[0], **counts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="binary,svr,oneclass,multiclass")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--n-multi", type=int, default=10_000)
    p.add_argument("--n-multi-large", type=int, default=100_000)
    p.add_argument("--large-n", default="100000,300000,1000000")
    p.add_argument("--large-time-limit", type=float, default=300.0,
                   help="skip the larger sizes of 'large' once one fit took longer than this")
    p.add_argument("--large-d-n", type=int, default=1_000_000)
    p.add_argument("--large-d-dim", type=int, default=256)
    p.add_argument("--large-d-max-iter", type=int, default=100_000,
                   help="most pairwise SMO steps of a 'large-d' fit (-1: libsvm's limit)")
    p.add_argument("--large-d-modes", default="auto,streamed")
    p.add_argument("--working-set", type=int,
                   help="kernelkit.linalg.smo.WORKING_SET for every fit (default: the module's)")
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--sk-cache", type=float, default=4000.0)
    p.add_argument("--sk-max-n", type=int, default=30_000)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out")
    args = p.parse_args(argv)
    device = check_mode("svm.py", args.smoke)
    if args.smoke:
        args.n, args.n_multi, args.n_multi_large, args.large_n = 300, 300, 500, "400"
        args.large_d_n, args.large_d_dim, args.large_d_max_iter = 300, 20, 2000
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; choose from {PARTS}")
    modes = args.large_d_modes.split(",")
    if set(modes) - {"auto", "streamed"}:
        raise SystemExit(f"--large-d-modes: choose from auto, streamed; got {modes}")
    from kernelkit.linalg import smo

    if args.working_set is not None:
        if not 2 <= args.working_set <= 1024:
            raise SystemExit(f"--working-set must be in [2, 1024]; got {args.working_set}")
        smo.WORKING_SET = args.working_set
    args.working_set = smo.WORKING_SET

    from sklearn.datasets import make_classification
    from sklearn.svm import SVC as SkSVC, SVR as SkSVR, OneClassSVM as SkOneClass

    from kernelkit import SVC, SVR, OneClassSVM

    out = args.out or default_out("svm", device_facts(device)["name"])
    rec = Record(out, args, device)
    common = dict(tol=args.tol)
    log(f"warm-up fit (compiles the kernels) on {device}")
    Xw, yw, _, _ = higgs(500, 10)
    start = time.perf_counter()
    SVC(device=device, gamma=0.05).fit(Xw, yw)
    SVR(device=device, gamma=0.05).fit(Xw, smooth_target(Xw))
    OneClassSVM(device=device, gamma=0.05).fit(Xw)
    rec.doc["warm_up_s"] = time.perf_counter() - start
    rec.write()

    if "binary" in parts:
        log("binary SVC")
        X, y, Xt, yt = cps1988(args.n)
        sets = [("cps1988_wage_above_mean", X, np.where(y > 0, 1, -1), Xt, np.where(yt > 0, 1, -1)),
                ("higgs_like", *higgs(args.n, 5000))]
        for name, X, y, Xt, yt in sets:
            g = gamma_scale(X)
            compare(rec, "binary", name, "svc",
                    lambda: SVC(C=args.C, gamma=g, device=device, **common),
                    lambda: SkSVC(C=args.C, gamma=g, cache_size=args.sk_cache, **common),
                    X, y, Xt, yt, g, device, args)
    if "svr" in parts:
        log("SVR")
        X, y, Xt, yt = cps1988(args.n)
        Xh, _, Xht, _ = higgs(args.n, 5000)
        sets = [("cps1988_log_wage", X, y, Xt, yt),
                ("higgs_like_smooth", Xh, smooth_target(Xh), Xht, smooth_target(Xht))]
        for name, X, y, Xt, yt in sets:
            g = gamma_scale(X)
            compare(rec, "svr", name, "svr",
                    lambda: SVR(C=args.C, epsilon=0.1, gamma=g, device=device, **common),
                    lambda: SkSVR(C=args.C, epsilon=0.1, gamma=g, cache_size=args.sk_cache,
                                  **common),
                    X, y, Xt, yt, g, device, args)
    if "oneclass" in parts:
        log("OneClassSVM")
        X, _, Xt, _ = higgs(args.n, 5000)
        g = gamma_scale(X)
        compare(rec, "oneclass", "higgs_like", "oneclass",
                lambda: OneClassSVM(nu=0.1, gamma=g, device=device, **common),
                lambda: SkOneClass(nu=0.1, gamma=g, cache_size=args.sk_cache, **common),
                X, None, Xt, None, g, device, args)
    if "multiclass" in parts:
        log("multi-class SVC, 10 classes, d = 64")
        for n in (args.n_multi, args.n_multi_large):
            X, y = make_classification(n + 5000, n_features=64, n_informative=32, n_classes=10,
                                       n_clusters_per_class=2, flip_y=0.02, random_state=0)
            X = (X - X.mean(0)) / X.std(0)
            X, Xt, y, yt = X[:n], X[n:], y[:n], y[n:]
            g = gamma_scale(X)
            compare(rec, "multiclass", f"classification_10x64_n{n}", "svc",
                    lambda: SVC(C=args.C, gamma=g, device=device, **common),
                    lambda: SkSVC(C=args.C, gamma=g, cache_size=args.sk_cache, **common),
                    X, y, Xt, yt, g, device, args)
    if "large" in parts:
        log("large SVC, HIGGS-shaped")
        for n in [int(v) for v in args.large_n.split(",")]:
            X, y, Xt, yt = higgs(n, 20_000)
            g = gamma_scale(X)
            model = SVC(C=args.C, gamma=g, device=device, **common)
            seconds, peak = timed_fit(model, X, y, device)
            rec.add(dict(part="large", dataset="higgs_like", n=n, d=28, gamma=g,
                         kernelkit_s=seconds, s_per_point=seconds / n, kernelkit_peak_mib=peak,
                         accuracy=float(model.score(Xt, yt)), n_iter=int(model.n_iter_[0]),
                         fit_status=int(model.fit_status_),
                         n_support=int(len(model.support_))))
            if seconds > args.large_time_limit:
                break
    if "large-d" in parts:
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        n, d = args.large_d_n, args.large_d_dim
        log(f"large-d SVC, {n} x {d} standard-normal rows")
        X, y = normal_classes(n + 2000, d)  # 2000 test rows: K(test, SV) stays small
        X, Xt, y, yt = X[:n], X[n:], y[:n], y[n:]
        for mode in modes:
            model = SVC(C=args.C, gamma=1.0 / d, max_iter=args.large_d_max_iter, device=device,
                        **common)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter: fit_status
                spent = large_d_fit(lambda: model.fit(X, y), device, mode == "streamed")
            rec.add(dict(part="large-d", dataset=f"normal_classes_d{d}", n=n, d=d, mode=mode,
                         working_set=smo.WORKING_SET, kernelkit_s=spent["seconds"],
                         kernelkit_peak_mib=spent["peak"], points_mib=8 * n * d / 2**20,
                         streamed=spent["streamed"], chunk_rows=spent["chunk_rows"],
                         outer_steps=spent["outer_steps"], rows_calls=spent["rows_calls"],
                         s_per_outer_step=spent["seconds"] / max(spent["outer_steps"], 1),
                         n_iter=int(model.n_iter_[0]), fit_status=int(model.fit_status_),
                         n_support=int(len(model.support_)),
                         accuracy=float(model.score(Xt, yt))))
    if "profile" in parts:
        log("profile of one SVC fit")
        X, y, _, _ = higgs(args.n, 10)
        g = gamma_scale(X)
        spent = profile_fit(lambda: SVC(C=args.C, gamma=g, device=device, **common).fit(X, y),
                            device)
        rec.add(dict(part="profile", dataset="higgs_like", n=args.n, d=28, gamma=g, **spent))
    log(f"wrote {out}")
    log(f"{'part':<11}{'dataset':<30}{'n':>8}{'kk s':>9}{'sk s':>9}{'ratio':>8}"
        f"{'dual rel':>10}")
    for r in rec.doc["rows"]:
        log(f"{r['part']:<11}{r['dataset']:<30}{r['n']:>8}{r['kernelkit_s']:>9.3f}"
            f"{r.get('sklearn_s', float('nan')):>9.3f}{r.get('speedup', float('nan')):>8.1f}"
            f"{r.get('dual_rel_diff', float('nan')):>10.2e}")


if __name__ == "__main__":
    main()
