"""GP gradient contractions: kernel_contractions vs dense autograd and GPyTorch's way, same run.

For ARD RBF, d = 8, t = 11 probe / solve pairs (1 solve + 10 probes), float32: the vector
c_j = sum_i u_i^T (dK / dlog gamma_j) w_i and K @ W, as one BBMM gradient step needs them.

* ``ours``: :func:`kernelkit_gpu.pairwise.contract_fused.kernel_contractions` (one Triton pass),
  in both float32 dot precisions (``DOT_PREC_F32``: "tf32x3", the default, and "ieee");
* ``dense_autograd``: K formed densely in float32 torch (centred data, ``cdist``), then
  ``autograd.grad`` of sum(U o (K W)) w.r.t. log gamma, plus K @ W (where n^2 fits);
* ``gpytorch``: GPyTorch's ARD ``RBFKernel`` evaluated densely (what its exact MLL's backward
  differentiates through above ``max_cholesky_size`` without KeOps), the same backward and
  matmul (where gpytorch is importable and n^2 fits).

Errors are against ``kernel_contractions`` on float64 input (cross-checked at the smaller n with
the float64 torch twin, whose derivatives come from forward-mode AD): max_j |c_j - ref_j| /
max_j |ref_j| and max |KW - ref| / max |ref|.

GPU: ``python benchmarks/gp_contractions.py --out benchmarks/results/gp-contractions.json``;
``--smoke`` (with ``TRITON_INTERPRET=1``) runs n = 300 on the CPU to prove the code path.
"""

from __future__ import annotations

import argparse
import math

from _common import (check_mode, default_out, device_facts, log, median_ms, now, peak_mib,
                     versions, write_json_atomic)


def rel_err(a, ref):
    a, ref = a.detach().double().cpu(), ref.detach().double().cpu()
    return float((a - ref).abs().max() / ref.abs().max())


def dense_autograd(x, u, w, gamma):
    """Plain torch: dense float32 K on centred data, autograd w.r.t. log gamma, and K @ W."""
    import torch

    log_g = torch.log(gamma).clone().requires_grad_(True)
    xc = x - x.mean(dim=0)
    xs = xc * torch.exp(0.5 * log_g)
    K = torch.exp(-torch.cdist(xs, xs).square())
    kw = K @ w
    grad, = torch.autograd.grad((u * kw).sum(), log_g)
    return grad, kw


def gpytorch_way(x, u, w, gamma):
    """GPyTorch's ARD RBF evaluated densely, backward of sum(U o (K W)) and K @ W; the raw
    (softplus) length-scale gradient converted to dlog gamma = -(1/2) dlog l."""
    import gpytorch
    import torch

    kern = gpytorch.kernels.RBFKernel(ard_num_dims=x.shape[1]).to(device=x.device, dtype=x.dtype)
    kern.lengthscale = (1.0 / torch.sqrt(2.0 * gamma)).reshape(1, -1)
    K = kern(x).to_dense()
    kw = K @ w
    graw, = torch.autograd.grad((u * kw).sum(), kern.raw_lengthscale)
    raw = kern.raw_lengthscale.detach()
    dlog_l = graw / torch.sigmoid(raw) * kern.lengthscale.detach()
    return (-0.5 * dlog_l).reshape(-1), kw.detach()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,200000")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--probes", type=int, default=11, help="t: 1 solve + 10 probes")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, n = 300")
    p.add_argument("--out", "--json", dest="out", default=None)
    args = p.parse_args(argv)
    dev = check_mode(__file__, args.smoke)
    sizes = [300] if args.smoke else [int(s) for s in args.sizes.split(",")]

    import torch

    from kernelkit_gpu.pairwise import contract_fused
    from kernelkit_gpu.pairwise.contract_fused import kernel_contractions
    from kernelkit_gpu.pairwise.contract_naive import kernel_contractions_naive

    try:
        import gpytorch
        has_gpytorch = True
    except ImportError:
        has_gpytorch = False
    facts = device_facts(dev)
    out = args.out or default_out("gp-contractions", facts["name"])
    record = dict(date=now(), device=facts, versions=versions(), d=args.features,
                  t=args.probes, kernel="rbf (ARD gamma)", rows=[])
    if has_gpytorch:
        record["versions"]["gpytorch"] = gpytorch.__version__
    d, t = args.features, args.probes
    free = torch.cuda.mem_get_info()[0] if dev == "cuda" else 8 << 30
    for n in sizes:
        gen = torch.Generator(device="cpu").manual_seed(n)
        x64 = (torch.rand(n, d, generator=gen, dtype=torch.float64) * 6.0 - 3.0).to(dev)
        u64 = torch.randn(n, t, generator=gen, dtype=torch.float64).to(dev)
        w64 = torch.randn(n, t, generator=gen, dtype=torch.float64).to(dev)
        ls = torch.linspace(0.8, 2.5, d, dtype=torch.float64)
        g64 = (0.5 / ls**2).to(dev)
        x, u, w, g = (a.float() for a in (x64, u64, w64, g64))
        row = dict(n=n)

        ref = kernel_contractions(x64, u64, w64, "rbf", v=w64, gamma=g64.cpu().numpy())
        if n <= 20000:
            twin = kernel_contractions_naive(x64, u64, w64, "rbf", v=w64, gamma=g64.cpu().numpy())
            row["ref_fused64_vs_twin64"] = rel_err(ref.grad, twin.grad)

        def ours():
            return kernel_contractions(x, u, w, "rbf", v=w, gamma=g.cpu().numpy())

        # variants: the float32 dot precision of G and K @ V (contract_fused.DOT_PREC_F32)
        default = contract_fused.DOT_PREC_F32
        for variant in ("tf32x3", "ieee"):
            contract_fused.DOT_PREC_F32 = variant
            try:
                res = ours()
                row[f"ours_{variant}_ms"] = median_ms(ours, dev)
                row[f"ours_{variant}_grad_err"] = rel_err(res.grad, ref.grad)
                row[f"ours_{variant}_kw_err"] = rel_err(res.kv, ref.kv)
            finally:
                contract_fused.DOT_PREC_F32 = default
        row["ours_ms"] = row[f"ours_{default}_ms"]
        row["ours_grad_err"] = row[f"ours_{default}_grad_err"]
        row["ours_kw_err"] = row[f"ours_{default}_kw_err"]
        row["ours_peak_MiB"] = peak_mib(ours, dev)
        fits = 6 * 4 * n * n < 0.8 * free  # K, its autograd temporaries and gradients
        if fits:
            grad, kw = dense_autograd(x, u, w, g)
            row["dense_autograd_ms"] = median_ms(lambda: dense_autograd(x, u, w, g), dev)
            row["dense_autograd_grad_err"] = rel_err(grad, ref.grad)
            row["dense_autograd_kw_err"] = rel_err(kw, ref.kv)
            row["ratio_dense_over_ours"] = row["dense_autograd_ms"] / row["ours_ms"]
        else:
            row["dense_autograd_ms"] = None
            row["dense_autograd_note"] = f"n^2 float32 K ({4 * n * n / 2**30:.0f} GiB) does not fit"
        if has_gpytorch and fits:
            try:
                grad, kw = gpytorch_way(x, u, w, g)
                row["gpytorch_ms"] = median_ms(lambda: gpytorch_way(x, u, w, g), dev)
                row["gpytorch_grad_err"] = rel_err(grad, ref.grad)
                row["gpytorch_kw_err"] = rel_err(kw, ref.kv)
                row["ratio_gpytorch_over_ours"] = row["gpytorch_ms"] / row["ours_ms"]
            except Exception as exc:  # report, do not hide: the other columns still count
                row["gpytorch_note"] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            row["gpytorch_ms"] = None
            row["gpytorch_note"] = ("gpytorch not importable" if not has_gpytorch
                                    else "n^2 does not fit")
        # pairs per second: n^2 pairs, each with d features, t-long G and t-long K @ W
        row["ours_Gpairs_per_s"] = n * n / (row["ours_ms"] * 1e-3) / 1e9
        log(row)
        record["rows"].append(row)
        write_json_atomic(out, record)

    def fmt(v, spec):
        width = int(spec.split(".")[0])
        return "-".rjust(width) if v is None or (isinstance(v, float) and math.isnan(v)) \
            else format(v, spec)

    print(f"\n{facts['name']}  d={d} t={t} float32  (errors vs float64; ratio = baseline / ours)")
    print(f"{'n':>8} {'ours ms':>9} {'err':>8} {'ieee ms':>9} {'err':>8} "
          f"{'dense ms':>9} {'err':>8} "
          f"{'ratio':>6} {'gpyt ms':>9} {'err':>8} {'ratio':>6}")
    cols = [("ours_ms", "9.2f"), ("ours_grad_err", "8.1e"), ("ours_ieee_ms", "9.2f"),
            ("ours_ieee_grad_err", "8.1e"), ("dense_autograd_ms", "9.2f"),
            ("dense_autograd_grad_err", "8.1e"), ("ratio_dense_over_ours", "6.1f"),
            ("gpytorch_ms", "9.2f"), ("gpytorch_grad_err", "8.1e"),
            ("ratio_gpytorch_over_ours", "6.1f")]
    for r in record["rows"]:
        print(f"{r['n']:>8} " + " ".join(fmt(r.get(key), spec) for key, spec in cols))
    print(f"JSON: {out}")


if __name__ == "__main__":
    main()
