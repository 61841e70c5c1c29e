"""kernelkit over torch.distributed: the same workloads on 1 GPU and on a torchrun group.

Run it twice in one device call, one process and then two (one per GPU), and compare::

    python benchmarks/distributed.py --out R1.json
    torchrun --standalone --nproc_per_node 2 benchmarks/distributed.py --out R2.json
    python benchmarks/distributed.py --compare R1.json R2.json

Parts (``--parts``; every timing is the median of ``--repeats`` runs after a warm-up, each
between barriers, so it is the slowest rank's time):

- ``matvec``: Gaussian K(X, Y) @ v, N = M = ``--matvec-n`` (2e6), D = 3, float32, "accurate";
  every rank passes the whole X, Y, v (:func:`kernelkit_gpu.kernel_matvec` shards the rows).
  With a group also the streamed form (each rank holds its rows of X, Y and v only:
  ``kernelkit_gpu.pairwise.matvec_streamed``). Checked: ``--check-rows`` sampled rows against
  float64 (torch on the GPU, in chunks).
- ``ridge``: KernelRidge, solver "nystrom", n = ``--ridge-n`` (2e6), d = 20
  (``make_friedman1``, as benchmarks/kernel_ridge.py), M = ``--ridge-m`` (2e4) landmarks,
  alpha = 1e-6 n, gamma 0.1, tol 1e-4; fit time (after a warm-up fit on 5e4 points),
  CG iterations, test RMSE (1e4 test points).
- ``ridge_iter`` (only when named): one Nyström iteration's kernel work, K_nM^T (K_nM v), as the
  fit computes it (float32 Gram row blocks of the ``--ridge-n`` points against ``--ridge-m`` of
  them, two GEMVs each; rows sharded over the group, results all-reduced); median of
  ``--repeats``. Issue 22's
  strong-scaling run: ``--parts ridge_iter,ridge --ridge-data higgs --ridge-n 10000000
  --ridge-m 50000``.
- ``--ridge-data higgs``: both ridge parts on HIGGS-shaped synthetic data (d = 28, labels +-1,
  ``kernel_ridge.higgs_like``) instead of friedman1; the fit also records the test error rate.
- ``gram``: :func:`kernelkit.gram` of N = ``--gram-n`` (131072) points, D = 64, float32, RBF,
  written to ``--scratch`` (a local disk: 64 GiB at the default size; the file is deleted
  afterwards); time, GB/s written, and ``--check-rows`` sampled rows against float64. The disk
  may bound this part; the figure is recorded as it is.
- ``gp``: :class:`kernelkit.GaussianProcessRegressor`, iterative path (``exact_max_n=0``),
  n = ``--gp-n`` (2e5), d = 8 (uniform on [-2, 2]^8), ARD RBF (length scales 3 to 6) times a
  constant plus white noise (0.1), float32, preconditioner rank 100, 16 probes: one log
  marginal likelihood + gradient evaluation at the fixed initial theta (``fit`` with
  ``optimizer=None`` first: it draws the probes and is the warm-up). Recorded: the LML, its
  gradient (compare the two runs), and the float64 residual |K alpha - y| / |y| on
  ``--check-rows`` sampled rows of the fitted alpha_ (CG tolerance 1e-3).

Rank 0 writes the JSON (``--out``, atomically) and prints a table; ``--compare`` prints the
ratios of two such files (speed-up = one-process time / group time). ``--smoke`` runs tiny sizes
on the CPU (gloo, Triton interpreter) to prove the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import device_facts, log, now, versions, write_json_atomic  # noqa: E402

PARTS = ("matvec", "ridge", "gram", "gp")
#: Parts run only when named in ``--parts``.
EXTRA_PARTS = ("ridge_iter",)


def _group():
    """``(rank, world)``; sets up the group under torchrun (NCCL on GPUs, gloo for --smoke)."""
    import torch

    from kernelkit import distributed

    distributed.init_from_env("cpu" if ARGS.smoke else "cuda")
    if torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _sync():
    import torch

    if not ARGS.smoke:
        torch.cuda.synchronize()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def timed(fn, repeats, warmup=True):
    """``(median seconds, last result)`` of ``repeats`` calls (after one warm-up call)."""
    result = fn() if warmup else None
    times = []
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        result = fn()
        _sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), result


def part_matvec(dev, rank, world):
    import torch

    import kernelkit_gpu
    from kernelkit_gpu import distributed as D

    n, gamma = ARGS.matvec_n, 0.5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g).to(dev)
    y = torch.randn(n, 3, generator=g).to(dev)
    v = torch.randn(n, generator=g).to(dev)
    seconds, out = timed(lambda: kernelkit_gpu.kernel_matvec(x, y, v, "rbf", gamma=gamma),
                         ARGS.repeats)
    rows = torch.from_numpy(np.random.default_rng(1).choice(n, ARGS.check_rows, replace=False))
    x64, y64, v64 = x.double(), y.double(), v.double()
    want = torch.zeros(len(rows), dtype=torch.float64, device=dev)
    scale = torch.zeros_like(want)  # (|K| |v|) per row: the float32 sum's error scale
    for c0 in range(0, n, 1 << 20):
        d2 = torch.cdist(x64[rows.to(dev)], y64[c0:c0 + (1 << 20)]) ** 2
        want += torch.exp(-gamma * d2) @ v64[c0:c0 + (1 << 20)]
        scale += torch.exp(-gamma * d2) @ v64[c0:c0 + (1 << 20)].abs()
    got = out[rows.to(dev)].double()
    err = float((got - want).abs().max() / want.abs().max())
    row = dict(n=n, m=n, d=3, seconds=seconds, pairs_per_s=n * n / seconds,
               max_rel_err_sampled=err,
               max_err_over_abs_sum_sampled=float(((got - want).abs() / scale).max()))
    if world > 1:
        lo, hi = D.shard(n)
        from kernelkit_gpu.pairwise.matvec_streamed import kernel_matvec_streamed

        s2, part = timed(lambda: kernel_matvec_streamed(x[lo:hi], y[lo:hi], v[lo:hi], "rbf",
                                                        gamma=gamma), ARGS.repeats)
        full = D.all_gather_rows(part, n)
        row["streamed_seconds"] = s2
        row["streamed_max_rel_err_sampled"] = float(
            (full[rows.to(dev)] - want).abs().max() / want.abs().max())
    return row


def _ridge_data():
    """(X, y, X_test, y_test, d) of ``--ridge-data``: friedman1 (d = 20) or higgs (d = 28)."""
    from kernel_ridge import dataset, higgs_like

    n = ARGS.ridge_n
    if ARGS.ridge_data == "higgs":
        X, y, Xt, yt = higgs_like(n, ARGS.n_test, seed=0)
    else:
        X, y, Xt, yt = dataset(n, ARGS.n_test, 20, seed=0)
    return X.astype(np.float32), y, Xt.astype(np.float32), yt, X.shape[1]


def part_ridge(dev, rank, world):
    from kernelkit import KernelRidge

    n, m = ARGS.ridge_n, ARGS.ridge_m
    X, y, Xt, yt, d = _ridge_data()

    def fit(rows=n, landmarks=m):
        return KernelRidge(alpha=1e-6 * rows, gamma=0.1, solver="nystrom",
                           n_components=landmarks, tol=1e-4, max_iter=500, random_state=0,
                           device="cpu" if ARGS.smoke else "cuda").fit(X[:rows], y[:rows])

    fit(min(n, 50_000), min(m, 1000))  # warm-up: compiles the kernels at a small size
    seconds, model = timed(fit, ARGS.ridge_repeats, warmup=False)
    pred = model.predict(Xt)
    rmse = float(np.sqrt(np.mean((pred - yt) ** 2)))
    out = dict(n=n, d=d, m=m, data=ARGS.ridge_data, seconds=seconds,
               n_iter=int(model.n_iter_), residual=float(model.residuals_[-1]), test_rmse=rmse)
    if ARGS.ridge_data == "higgs":
        out["test_error_rate"] = float(np.mean(np.sign(pred) != yt))
    return out


def part_ridge_iter(dev, rank, world):
    """One Nystrom KernelRidge iteration's kernel work, K_Mn (K_nM v), exactly as the fit runs it
    (:func:`kernelkit.linalg.falkon.normal_product`: float32 Gram row blocks of the
    ``--ridge-data`` points against M of them, two GEMVs each); in a group each rank takes its
    rows and the (M,) results are all-reduced, as ``ShardedFalkonSystem``; median of
    ``--repeats``."""
    import torch

    from kernelkit.operators import kernel_operator
    from kernelkit.estimators import _ridge_memory
    from kernelkit.linalg.falkon import normal_product
    from kernelkit_gpu import distributed as D

    X, _, _, _, d = _ridge_data()
    device = "cpu" if ARGS.smoke else "cuda"
    Xd = torch.from_numpy(X).to(device)
    Z = Xd[torch.from_numpy(np.random.default_rng(4).choice(len(X), ARGS.ridge_m,
                                                              replace=False)).to(device)]
    v = torch.from_numpy(np.random.default_rng(5).standard_normal((ARGS.ridge_m, 1))).to(device)
    op = kernel_operator.KernelOperator("rbf", {"gamma": 0.1}, device)
    if device == "cuda":  # the block size of a fit with memory to spare
        op.block_bytes = _ridge_memory.GPU_BLOCK_BYTES_MAX
    lo, hi = D.shard(len(X)) if world > 1 else (0, len(X))

    def iteration():
        part = normal_product(op, Xd[lo:hi], Z, v)
        return D.all_reduce(part) if world > 1 else part

    seconds, out = timed(iteration, ARGS.repeats)
    return dict(n=len(X), d=d, m=ARGS.ridge_m, data=ARGS.ridge_data, seconds=seconds,
                result_norm=float(torch.linalg.vector_norm(out)))


def part_gram(dev, rank, world):
    import torch

    import kernelkit
    from kernelkit_math.registry import get_kernel

    n, gamma = ARGS.gram_n, 1.0 / 64
    X = np.random.default_rng(2).normal(size=(n, 64)).astype(np.float32)
    os.makedirs(ARGS.scratch, exist_ok=True)
    path = os.path.join(ARGS.scratch, f"K-{world}.npy")
    _sync()
    t = time.perf_counter()
    kernelkit.gram(X, kernel="rbf", gamma=gamma, out=path, device="cpu" if ARGS.smoke else "cuda")
    _sync()
    seconds = time.perf_counter() - t
    K = np.load(path, mmap_mode="r")
    rows = np.sort(np.random.default_rng(3).choice(n, min(ARGS.check_rows, n), replace=False))
    want = get_kernel("rbf").value(X[rows].astype(np.float64), X.astype(np.float64), gamma=gamma)
    err = float(np.abs(K[rows].astype(np.float64) - want).max())
    symmetric = bool(np.array_equal(K[rows][:, rows], K[rows][:, rows].T))
    del K
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if rank == 0 and not ARGS.keep:
        os.remove(path)
    nbytes = n * n * 4
    return dict(n=n, d=64, seconds=seconds, GB_per_s_written=nbytes / seconds / 1e9,
                file_GB=nbytes / 1e9, max_abs_err_sampled=err, sampled_block_symmetric=symmetric,
                scratch=os.path.abspath(ARGS.scratch))


def part_gp(dev, rank, world):
    import torch
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    from kernelkit import GaussianProcessRegressor
    from kernelkit.operators.kernel_tree import parse_kernel

    n, d = ARGS.gp_n, 8
    rng = np.random.default_rng(4)
    X = rng.uniform(-2.0, 2.0, size=(n, d))
    y = np.sin(X).sum(1) + 0.1 * rng.normal(size=n)
    # CG iterations grow about as sqrt(n) here (CPU, n = 4e3: 12); length scales 1..3 and
    # noise 0.05 would need about 4x as many
    kernel = C(1.0) * RBF(np.linspace(3.0, 6.0, d)) + WhiteKernel(0.1)
    model = GaussianProcessRegressor(kernel=kernel, optimizer=None, exact_max_n=0,
                                     dtype="float32", random_state=0,
                                     device="cpu" if ARGS.smoke else "cuda")
    _sync()
    t = time.perf_counter()
    model.fit(X, y)  # LML without gradient, alpha_ (and the warm-up)
    _sync()
    fit_seconds = time.perf_counter() - t
    theta = model.kernel_.theta
    # a dense K (this rank's rows, when they fit half the free memory) would make the ranks'
    # speed-up more than the sharding: recorded
    dense = bool(model._operator(parse_kernel(model.kernel_, d)).dense)
    seconds, (lml, grad) = timed(lambda: model.log_marginal_likelihood(theta, True),
                                 ARGS.gp_repeats, warmup=False)
    # the fitted alpha_ against float64 kernel rows (sampled)
    rows = np.sort(rng.choice(n, min(ARGS.check_rows, n), replace=False))
    X64 = torch.as_tensor(X, device=dev)
    ls = torch.as_tensor(np.exp(theta[1:1 + d]), device=dev)
    d2 = torch.cdist(X64[rows] / ls, X64 / ls) ** 2
    Krows = float(np.exp(theta[0])) * torch.exp(-0.5 * d2)
    alpha = torch.as_tensor(model.alpha_.ravel(), device=dev)
    noise = float(np.exp(theta[-1])) + float(model.alpha)
    resid = (Krows @ alpha + noise * alpha[rows] - torch.as_tensor(y[rows], device=dev)).cpu()
    return dict(n=n, d=d, seconds=seconds, fit_seconds=fit_seconds, dense_K=dense, lml=float(lml),
                grad=[float(g) for g in grad],
                sampled_rel_residual=float(np.linalg.norm(resid) / np.linalg.norm(y[rows])))


def compare(one, two):
    a, b = (json.load(open(p)) for p in (one, two))
    print(f"{'part':<16}{'1 process (s)':>15}{b['world']:>3} ranks (s){'speed-up':>10}  check")
    for part in PARTS + EXTRA_PARTS:
        if part not in a["results"] or part not in b["results"]:
            continue
        ra, rb = a["results"][part], b["results"][part]
        note = {"matvec": lambda r: f"err {r['max_rel_err_sampled']:.1e}",
                "ridge": lambda r: f"rmse {r['test_rmse']:.6f} it {r['n_iter']}",
                "ridge_iter": lambda r: f"|K_nM^T K_nM v| {r['result_norm']:.7g}",
                "gram": lambda r: f"err {r['max_abs_err_sampled']:.1e} "
                                  f"{r['GB_per_s_written']:.2f} GB/s",
                "gp": lambda r: f"lml {r['lml']:.6g} resid {r['sampled_rel_residual']:.1e} "
                                f"dense {r['dense_K']}"}[part]
        print(f"{part:<16}{ra['seconds']:>15.3f}{rb['seconds']:>12.3f}"
              f"{ra['seconds'] / rb['seconds']:>10.2f}  {note(ra)} | {note(rb)}")
        if part == "matvec" and "streamed_seconds" in rb:
            print(f"{'matvec streamed':<16}{ra['seconds']:>15.3f}{rb['streamed_seconds']:>12.3f}"
                  f"{ra['seconds'] / rb['streamed_seconds']:>10.2f}")
        if part == "ridge":
            print(f"{'':<16}test RMSE difference {abs(ra['test_rmse'] - rb['test_rmse']):.2e}")
        if part == "gp":
            ga, gb = np.array(ra["grad"]), np.array(rb["grad"])
            print(f"{'':<16}LML rel. difference {abs(ra['lml'] - rb['lml']) / abs(ra['lml']):.2e}"
                  f", gradient max rel. difference "
                  f"{np.max(np.abs(ga - gb)) / max(np.max(np.abs(ga)), 1e-300):.2e}")


def main():
    if ARGS.compare:
        return compare(*ARGS.compare)
    import torch

    if not ARGS.smoke and os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the benchmark times compiled kernels")
    rank, world = _group()
    dev = "cpu" if ARGS.smoke else "cuda"
    data = dict(benchmark="distributed", date=now(), world=world, versions=versions(),
                device=device_facts(dev), argv=sys.argv, results={}, errors={},
                nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"))
    for part in ARGS.parts.split(","):
        try:
            data["results"][part] = globals()[f"part_{part}"](dev, rank, world)
        except Exception as exc:  # noqa: BLE001 - recorded; the other parts still run
            data["errors"][part] = f"{type(exc).__name__}: {exc}"
            if ARGS.smoke:
                raise
        if rank == 0:
            log(part, json.dumps(data["results"].get(part, data["errors"].get(part))))
            write_json_atomic(ARGS.out, data)
    if rank == 0:
        for part, row in data["results"].items():
            log(f"{part:<8} world {world}: {row['seconds']:.3f} s")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--matvec-n", type=int, default=2_000_000)
    p.add_argument("--ridge-n", type=int, default=2_000_000)
    p.add_argument("--ridge-m", type=int, default=20_000)
    p.add_argument("--ridge-data", choices=("friedman1", "higgs"), default="friedman1",
                   help="friedman1 (d = 20) or HIGGS-shaped synthetic data (d = 28, labels +-1)")
    p.add_argument("--n-test", type=int, default=10_000)
    p.add_argument("--gram-n", type=int, default=131_072)
    p.add_argument("--gp-n", type=int, default=200_000)
    p.add_argument("--gp-repeats", type=int, default=1)
    p.add_argument("--check-rows", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ridge-repeats", type=int, default=1)
    p.add_argument("--scratch", default="/var/tmp/kernelkit-distributed-gram",
                   help="directory on a local disk for the Gram file")
    p.add_argument("--keep", action="store_true", help="keep the Gram file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (interpreter)")
    p.add_argument("--compare", nargs=2, metavar=("ONE.json", "GROUP.json"))
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                 "distributed.json"))
    args = p.parse_args(argv)
    unknown = set(args.parts.split(",")) - set(PARTS + EXTRA_PARTS)
    if unknown:
        p.error(f"--parts: unknown {sorted(unknown)}; choose from {PARTS + EXTRA_PARTS}")
    if args.smoke:
        args.matvec_n, args.ridge_n, args.ridge_m, args.n_test = 200, 300, 30, 50
        args.gram_n, args.check_rows, args.repeats = 40, 8, 1
        args.gp_n = 300
    return args


if __name__ == "__main__":
    ARGS = parse()
    main()
