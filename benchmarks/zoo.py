"""The zoo report (issue 39): every case of ``benchmarks/zoo_data.py`` through kernelkit's default
GaussianProcessRegressor and KernelRidge, with scikit-learn's and GPyTorch's GPs as baselines.

Per case (``--size small|full``: each case's ``small_n`` or ``full_n`` training rows):

- ``gp``: kernelkit.GaussianProcessRegressor(case kernel), default settings (``--gp-settings``
  changes them, e.g. ``'{"exact_max_n": 0}'`` for the iterative path): fit seconds, test
  RMSE and NLPD (mean negative log predictive density, Gaussian with the predictive std, noise
  included), log-likelihood evaluations of the fit (pretraining's included) with their seconds
  (max / median) and CG steps per evaluation (max / median; iterative path only), the fitted
  kernel and theta;
- ``kr``: kernelkit.KernelRidge(kernel=case kernel), default settings: fit seconds, test RMSE;
- ``sklearn``: scikit-learn's GaussianProcessRegressor(case kernel) for n <= ``--sklearn-max-n``:
  fit seconds, RMSE, NLPD, its optimum's log marginal likelihood and, evaluated by it exactly,
  that of kernelkit's fitted theta (``lml_at_ours``);
- ``gpytorch``: GPyTorch's exact GP as in ``benchmarks/gp.py`` (ScaleKernel(ARD RBF), Gaussian
  likelihood, 50 Adam steps at lr 0.1; single-target cases, n <= ``--gpytorch-max-n``), when
  gpytorch imports.

Each part of each case runs in its own Python process with a time limit (``--timeout``): a part
that exceeds it is recorded as ``"timeout"`` and the report goes on; an error is recorded with its
message. The JSON (``--out``, written atomically after every part) holds every figure; a markdown
table is printed last.

Usage::

    python benchmarks/zoo.py --size small --out /tmp/zoo-small.json            # CPU, minutes
    python benchmarks/zoo.py --size full --cases ridge flights --timeout 540 \\
        --out benchmarks/results/zoo-full.json                                # GPU
    # on a machine without the zoo extra: export the real sets first, carry the files
    python benchmarks/zoo_data.py --export /tmp/zoo && KERNELKIT_ZOO_DIR=/tmp/zoo python ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import types
import warnings

import numpy as np

from _common import log, now, write_json_atomic

PARTS = ("gp", "kr", "sklearn", "gpytorch")


def _zoo():
    import zoo_data

    return zoo_data


# ---------------------------------------------------------------------- inside one process
class EvaluationLog:
    """Seconds and CG steps of each log-likelihood evaluation of a kernelkit GP fit.

    Patches, for the ``with`` block only, the objective the GP hands to
    ``_optimizer.optimize_theta`` (one call = one evaluation; the pretraining fit's included) and
    ``_lml.solve`` (the CG solves of the iterative path: ``n_iter`` each). Benchmark-only: the
    library is not changed.
    """

    def __init__(self, device):
        self.device, self.rows = device, []

    def __enter__(self):
        from kernelkit.estimators.gp import _lml, _optimizer

        self._modules = (_lml, _optimizer)
        self._originals = (_lml.solve, _optimizer.optimize_theta)
        solve, optimize_theta = self._originals
        steps = []

        def counted_solve(*args, **kwargs):
            result = solve(*args, **kwargs)
            steps.append(int(result.n_iter))
            return result

        def counted_optimize_theta(lml_at, *args, **kwargs):
            def timed(theta, eval_gradient):
                steps.clear()
                _sync(self.device)
                t0 = time.perf_counter()
                out = lml_at(theta, eval_gradient)
                _sync(self.device)
                self.rows.append(dict(s=time.perf_counter() - t0,
                                      cg_steps=max(steps) if steps else None))
                return out

            return optimize_theta(timed, *args, **kwargs)

        _lml.solve, _optimizer.optimize_theta = counted_solve, counted_optimize_theta
        return self

    def __exit__(self, *exc):
        _lml, _optimizer = self._modules
        _lml.solve, _optimizer.optimize_theta = self._originals

    def summary(self):
        seconds = [r["s"] for r in self.rows]
        steps = [r["cg_steps"] for r in self.rows if r["cg_steps"] is not None]
        return dict(evaluations=len(self.rows),
                    eval_s_max=max(seconds, default=None),
                    eval_s_median=float(np.median(seconds)) if seconds else None,
                    cg_steps_max=max(steps, default=None),
                    cg_steps_median=float(np.median(steps)) if steps else None)


def _sync(device):
    if device != "cpu":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()


def metrics(mean, std, y):
    """Test RMSE and NLPD (Gaussian, predictive std), averaged over points and targets."""
    std = std.reshape(len(std), -1) if mean.ndim > 1 else std  # one std per point, or per target
    var = np.maximum(std, 1e-12) ** 2
    rmse = float(np.sqrt(np.mean((mean - y) ** 2)))
    nlpd = float(np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var))
    return rmse, nlpd


def _timed(fn, device):
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


class FitRecords(logging.Handler):
    """The fit's ``warm_up`` and ``preconditioner_rank`` log records (their numbers)."""

    EVENTS = ("warm_up", "preconditioner_rank")

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        numbers = getattr(record, "kernelkit", None)
        if numbers and numbers.get("event") in self.EVENTS:
            self.records.append(numbers)

    def __enter__(self):
        self._logger = logging.getLogger("kernelkit")
        self._level = self._logger.level
        self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


def run_gp(case, data, device, settings=None, std=True):
    import kernelkit
    from sklearn.base import clone

    X, y, Xt, yt = data
    gp = kernelkit.GaussianProcessRegressor(clone(case.kernel), random_state=0, device=device,
                                            **(settings or {}))
    with EvaluationLog(device) as evals, FitRecords() as records:
        _, fit_s = _timed(lambda: gp.fit(X, y), device)
    if std:
        (mean, sd), predict_s = _timed(lambda: gp.predict(Xt, return_std=True), device)
        rmse, nlpd = metrics(mean, sd, yt)
    else:  # --std-max-n: the mean only
        mean, predict_s = _timed(lambda: gp.predict(Xt), device)
        rmse, nlpd = float(np.sqrt(np.mean((mean - yt) ** 2))), None
    return dict(fit_s=fit_s, predict_s=predict_s, std=bool(std), rmse=rmse, nlpd=nlpd,
                kernel=str(gp.kernel_), fit_records=records.records,
                theta=[float(t) for t in gp.kernel_.theta],
                lml=float(gp.log_marginal_likelihood_value_),
                path="exact" if gp._exact else "iterative", **evals.summary(),
                eval_seconds=[r["s"] for r in evals.rows],
                eval_cg_steps=[r["cg_steps"] for r in evals.rows])


def run_kr(case, data, device):
    import kernelkit
    from sklearn.base import clone

    X, y, Xt, yt = data
    kr = kernelkit.KernelRidge(kernel=clone(case.kernel), random_state=0, device=device)
    _, fit_s = _timed(lambda: kr.fit(X, y), device)
    pred, predict_s = _timed(lambda: kr.predict(Xt), device)
    return dict(fit_s=fit_s, predict_s=predict_s,
                rmse=float(np.sqrt(np.mean((pred - yt) ** 2))), solver=kr.solver_,
                n_components=int(kr.n_components_), cg_steps=int(kr.n_iter_),
                dense_fallback=bool(kr.dense_fallback_))


def run_sklearn(case, data, theta_ours):
    from sklearn.base import clone
    from sklearn.gaussian_process import GaussianProcessRegressor

    X, y, Xt, yt = data
    gp = GaussianProcessRegressor(clone(case.kernel), random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, fit_s = _timed(lambda: gp.fit(X, y), "cpu")
    mean, std = gp.predict(Xt, return_std=True)
    rmse, nlpd = metrics(mean, std, yt)
    row = dict(fit_s=fit_s, rmse=rmse, nlpd=nlpd, kernel=str(gp.kernel_),
               lml=float(gp.log_marginal_likelihood_value_),
               warnings=sorted({str(w.message)[:160] for w in caught}))
    if theta_ours is not None:
        row["lml_at_ours"] = float(gp.log_marginal_likelihood(np.asarray(theta_ours)))
    return row


def run_gpytorch(case, data, device):
    import torch

    from gp import run_gpytorch as gp_run_gpytorch

    X, y, Xt, yt = data
    if y.ndim > 1:
        return dict(skipped="multi-target y: the GPyTorch baseline fits one target")
    device = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    args = types.SimpleNamespace(dtype="auto", gpytorch_steps=50)
    return gp_run_gpytorch(X, y, Xt, yt, args, device)


def child(spec):
    """One part of one case (run in its own process by :func:`main`); returns its row."""
    case = _zoo().CASES[spec["case"]]
    data = case.load(n=spec["n"], seed=0)
    part, device = spec["part"], spec["device"]
    if part == "gp":
        return run_gp(case, data, device, spec.get("gp_settings"),
                      std=spec.get("std_max_n") is None or spec["n"] <= spec["std_max_n"])
    if part == "kr":
        return run_kr(case, data, device)
    if part == "sklearn":
        return run_sklearn(case, data, spec.get("theta_ours"))
    return run_gpytorch(case, data, device)


# ------------------------------------------------------------------------------ the driver
def run_part(spec, timeout):
    """Run one part in a fresh process; its row, or ``{"status": "timeout" | "error", ...}``."""
    fd, path = tempfile.mkstemp(prefix=".zoo-part-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec),
           "--child-out", path]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            return dict(status="error", wall_s=wall, error=(res.stderr or res.stdout)[-2000:])
        with open(path) as f:
            return dict(status="ok", wall_s=wall, **json.load(f))
    except subprocess.TimeoutExpired:
        return dict(status="timeout", wall_s=time.perf_counter() - t0, limit_s=timeout)
    finally:
        os.unlink(path)


def _fmt(value, spec):
    return "" if value is None else format(value, spec)


def table(record):
    """The markdown table of a report: one line per case."""
    head = ("| case | kind | n | d | GP fit s | GP RMSE | GP NLPD | evals | eval s max/median "
            "| CG steps max/median | KR s | KR RMSE | sklearn fit s | sklearn RMSE | sklearn NLPD "
            "| LML ours - sklearn | GPyTorch fit s | GPyTorch NLPD |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in record["cases"]:
        gp, kr, sk, gt = (row.get(part, {}) for part in PARTS)

        def ok(r, key, spec=".3g"):
            if r.get("status") in ("timeout", "error", "skipped"):
                return r["status"]
            return _fmt(r.get(key), spec)

        gap = (sk["lml_at_ours"] - sk["lml"] if sk.get("lml_at_ours") is not None else None)
        evals_s = (f"{_fmt(gp.get('eval_s_max'), '.3g')} / {_fmt(gp.get('eval_s_median'), '.3g')}"
                   if gp.get("evaluations") else ok(gp, "evaluations"))
        steps = (f"{gp['cg_steps_max']} / {_fmt(gp['cg_steps_median'], '.0f')}"
                 if gp.get("cg_steps_max") is not None else "")
        lines.append(" | ".join([
            f"| {row['case']}", row["kind"], str(row["n"]), str(row["d"]), ok(gp, "fit_s"),
            ok(gp, "rmse", ".4g"), ok(gp, "nlpd", ".3f"), ok(gp, "evaluations", "d"), evals_s,
            steps, ok(kr, "fit_s"), ok(kr, "rmse", ".4g"), ok(sk, "fit_s"), ok(sk, "rmse", ".4g"),
            ok(sk, "nlpd", ".3f"), _fmt(gap, "+.3f"), ok(gt, "fit_s"), ok(gt, "nlpd", ".3f")])
            + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=["small", "full"], default="small")
    p.add_argument("--n", type=int, help="training rows for every case (instead of --size)")
    p.add_argument("--cases", nargs="+", help="only these cases (default: all)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--timeout", type=float, default=540.0,
                   help="seconds one part of one case may take")
    p.add_argument("--gp-settings", type=json.loads, default={},
                   help='JSON of GP settings instead of the defaults, e.g. \'{"exact_max_n": 0}\'')
    p.add_argument("--std-max-n", type=int, default=None,
                   help="above this n the GP predicts the mean only (no NLPD)")
    p.add_argument("--sklearn-max-n", type=int, default=10_000)
    p.add_argument("--gpytorch-max-n", type=int, default=100_000)
    p.add_argument("--out", help="JSON result path (required unless --child)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        row = child(json.loads(args.child))
        write_json_atomic(args.child_out, row)
        return row
    if not args.out:
        p.error("--out is required")
    zoo_data = _zoo()
    unknown = sorted(set(args.cases or ()) - set(zoo_data.CASES))
    if unknown:
        p.error(f"unknown cases {unknown}; known: {sorted(zoo_data.CASES)}")
    names = args.cases or list(zoo_data.CASES)

    import sklearn
    import torch

    record = dict(benchmark="zoo", started=now(), args=vars(args),
                  device=args.device, cuda=torch.cuda.is_available(),
                  device_name=torch.cuda.get_device_name(0) if torch.cuda.is_available()
                  else "cpu",
                  zoo_dir=os.environ.get(zoo_data.ZOO_DIR_ENV),
                  versions=dict(torch=torch.__version__, sklearn=sklearn.__version__),
                  cases=[])
    try:
        import gpytorch

        record["versions"]["gpytorch"] = gpytorch.__version__
    except Exception as exc:  # any import failure is recorded, not fatal
        record["gpytorch_skipped"] = f"gpytorch did not import: {type(exc).__name__}: {exc}"
    for name in names:
        case = zoo_data.CASES[name]
        n = args.n or (case.small_n if args.size == "small" else case.full_n)
        X, y, _, _ = case.load(n=n)
        row = dict(case=name, kind=case.kind, n=n, d=X.shape[1],
                   targets=1 if y.ndim == 1 else y.shape[1], n_test=case.test_size(n))
        record["cases"].append(row)
        for part in args.parts:
            if part == "sklearn" and n > args.sklearn_max_n:
                row[part] = dict(status="skipped", reason="n > --sklearn-max-n")
            elif part == "gpytorch" and "gpytorch_skipped" in record:
                row[part] = dict(status="skipped", reason=record["gpytorch_skipped"])
            elif part == "gpytorch" and n > args.gpytorch_max_n:
                row[part] = dict(status="skipped", reason="n > --gpytorch-max-n")
            else:
                spec = dict(case=name, n=n, part=part, device=args.device,
                            gp_settings=args.gp_settings, std_max_n=args.std_max_n,
                            theta_ours=row.get("gp", {}).get("theta"))
                log(f"{name} n={n} {part} ...")
                row[part] = run_part(spec, args.timeout)
                log("  ", {k: v for k, v in row[part].items()
                           if k not in ("eval_seconds", "eval_cg_steps", "error")},
                    row[part].get("error", "")[-500:])
            write_json_atomic(args.out, record)
    record["finished"] = now()
    write_json_atomic(args.out, record)
    log("\n" + table(record))
    return record


if __name__ == "__main__":
    main()
