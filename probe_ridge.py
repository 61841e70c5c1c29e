"""Scratch probe (not committed): per-evaluation trace of default GP fits on the ridge-function
data of issue 39 and on benchmarks/gp.py's data."""
import json, os, sys, time, warnings
sys.path.insert(0, "benchmarks")
import numpy as np
from gp import Trace, metrics, sync, make_data
import torch
import kernelkit
from sklearn.gaussian_process.kernels import ConstantKernel as C, WhiteKernel as W

def ridge(n, n_test, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n + n_test, 8))
    ls = np.linspace(0.5, 3, 8)
    y = np.sin((X / ls).sum(1)) + 0.1 * rng.standard_normal(n + n_test)
    return X[:n], y[:n], X[n:], y[n:]

case, n = sys.argv[1], int(sys.argv[2])
extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
X, y, Xt, yt = (ridge if case == "ridge" else (lambda n, t: make_data(n, t, 8)))(n, 10000)
gp = kernelkit.GaussianProcessRegressor(C(1.0) * kernelkit.RBF(np.ones(8)) + W(0.1), device="cuda", random_state=0, **extra)
rows = []
out = dict(case=case, n=n, extra=extra, trace=rows)
path = os.path.join(os.environ.get("OUT", "/tmp"), f"probe-{case}-{n}-{len(extra)}.json")
def after(row):
    rows.append(row)
    json.dump(out, open(path, "w"), indent=1, default=str)
    print(f"eval {len(rows)} n={row['n']} s={row['s']:.2f} steps={[s['steps'] for s in row['solves']]} lml={row['lml']:.1f}", flush=True)
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Trace("cuda", after=after):
            sync("cuda"); t0 = time.perf_counter(); gp.fit(X, y); sync("cuda"); out["fit_s"] = time.perf_counter() - t0
        json.dump(out, open(path, "w"), indent=1, default=str)
        print("fit", out["fit_s"], gp.kernel_, [str(w.message)[:150] for w in caught], flush=True)
        sync("cuda"); t0 = time.perf_counter()
        mean, std = gp.predict(Xt, return_std=True)
        sync("cuda"); out["predict_s"] = time.perf_counter() - t0
        out["rmse"], out["nlpd"] = metrics(mean, std, yt)
        out["kernel"] = str(gp.kernel_)
        th = gp.kernel_.theta
        gp.log_marginal_likelihood(th, eval_gradient=True)
        ts = []
        for _ in range(3):
            sync("cuda"); t0 = time.perf_counter(); gp.log_marginal_likelihood(th, eval_gradient=True); sync("cuda"); ts.append(time.perf_counter() - t0)
        out["eval_fitted_s"] = sorted(ts)[1]
        out["warnings"] = sorted({str(w.message)[:200] for w in caught})
finally:
    json.dump(out, open(path, "w"), indent=1, default=str)
print({k: v for k, v in out.items() if k != "trace"})
