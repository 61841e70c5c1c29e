"""kernelkit_gpu.kernel_matvec by feature count: K(X, Z) @ v and K(X, Z).T @ u, N = 1e6 points
against M = 5e4 of them, against an eager PyTorch product (chunked float32 expansion GEMM,
TF32 off, exp, GEMV), on the data of the Nyström KernelRidge benchmarks.

Data (``--n``, M = ``--m`` rows drawn from them): HIGGS-shaped (d = 28,
``kernel_ridge.higgs_like``), friedman1 (d = 20), and N(0, 1) with d = 3, 16, 64. RBF with
gamma 0.1 (HIGGS, friedman1), 0.5 (d = 3), 0.05 (d = 16), 1/64 (d = 64). Recorded per data set:
seconds of the forward product (R = 1, "accurate" and "fast"; R = 16), of the transposed one
(R = 1), of the torch baseline, pairs per second, and the largest error of sampled rows
(``--check-rows``) against a float64 product, relative to sum |K| |v|.

    python benchmarks/matvec_dims.py --out benchmarks/results/matvec-dims.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import device_facts, log, now, versions, wall_s, write_json_atomic  # noqa: E402


def datasets(n):
    from kernel_ridge import dataset, higgs_like

    g = np.random.default_rng(0)
    return {
        "higgs28": (higgs_like(n, 10, seed=0)[0], 0.1),
        "friedman20": (dataset(n, 10, 20, seed=0)[0], 0.1),
        "normal3": (g.standard_normal((n, 3)), 0.5),
        "normal16": (g.standard_normal((n, 16)), 0.05),
        "normal64": (g.standard_normal((n, 64)), 1.0 / 64),
    }


def torch_product(X, Z, v, gamma, chunk=1 << 16):
    """Eager PyTorch K(X, Z) @ v: float32 expansion GEMM per row chunk, exp, GEMV."""
    import torch

    out = torch.empty(X.shape[0], device=X.device)
    zn = (Z * Z).sum(1)
    for c in range(0, X.shape[0], chunk):
        xc = X[c:c + chunk]
        d2 = (xc * xc).sum(1)[:, None] + zn[None, :] - 2.0 * (xc @ Z.T)
        out[c:c + chunk] = torch.exp(-gamma * d2.clamp_min(0.0)) @ v
    return out


def run_one(name, Xn, gamma, args, dev):
    import torch

    import kernelkit_gpu

    torch.backends.cuda.matmul.allow_tf32 = False
    X = torch.tensor(Xn, dtype=torch.float32, device=dev)
    n = X.shape[0]
    Z = X[torch.from_numpy(np.random.default_rng(4).choice(n, args.m, replace=False)).to(dev)]
    g = torch.Generator(device="cpu").manual_seed(5)
    v = torch.randn(args.m, generator=g).to(dev)
    u = torch.randn(n, generator=g).to(dev)
    V16 = torch.randn(args.m, 16, generator=g).to(dev)

    def mv(*a, **k):
        return kernelkit_gpu.kernel_matvec(*a, "rbf", gamma=gamma, **k)

    row = dict(data=name, n=n, m=args.m, d=X.shape[1], gamma=gamma)
    for key, fn in {"forward_s": lambda: mv(X, Z, v),
                    "forward_fast_s": lambda: mv(X, Z, v, precision="fast"),
                    "forward_r16_s": lambda: mv(X, Z, V16),
                    "transpose_s": lambda: mv(X, Z, u, transpose=True),
                    "torch_forward_s": lambda: torch_product(X, Z, v, gamma)}.items():
        fn()  # compile / warm up
        row[key] = wall_s(fn, dev, runs=args.repeats)
    row["pairs_per_s"] = n * args.m / row["forward_s"]
    row["speedup_vs_torch"] = row["torch_forward_s"] / row["forward_s"]
    rows = torch.from_numpy(np.random.default_rng(6).choice(n, args.check_rows, replace=False))
    Xr, Z64 = X[rows.to(dev)].double(), Z.double()
    K = torch.exp(-gamma * torch.cdist(Xr, Z64) ** 2)
    got = mv(X, Z, v)[rows.to(dev)].double()
    row["max_err_over_abs_sum"] = float(((got - K @ v.double()).abs()
                                         / (K @ v.double().abs())).max())
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--m", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check-rows", type=int, default=64)
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (interpreter)")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "matvec-dims.json"))
    args = p.parse_args(argv)
    if args.smoke:
        args.n, args.m, args.repeats, args.check_rows = 300, 40, 1, 8
    dev = "cpu" if args.smoke else "cuda"
    data = dict(benchmark="matvec_dims", date=now(), versions=versions(),
                device=device_facts(dev), argv=sys.argv, results=[])
    for name, (Xn, gamma) in datasets(args.n).items():
        data["results"].append(run_one(name, Xn, gamma, args, dev))
        log(json.dumps(data["results"][-1]))
        write_json_atomic(args.out, data)
    log(f"{'data':<12}{'d':>4}{'fwd s':>9}{'fast s':>9}{'T s':>9}{'torch s':>9}{'x torch':>9}"
        f"{'err':>10}")
    for r in data["results"]:
        log(f"{r['data']:<12}{r['d']:>4}{r['forward_s']:>9.3f}{r['forward_fast_s']:>9.3f}"
            f"{r['transpose_s']:>9.3f}{r['torch_forward_s']:>9.3f}{r['speedup_vs_torch']:>9.1f}"
            f"{r['max_err_over_abs_sum']:>10.1e}")


if __name__ == "__main__":
    main()
