"""Benchmark: fused Triton Gram matrices and the matrix-free product against eager torch.

Run once on the GPU machine (about 3-5 minutes on an H200; ``--quick`` for about one)::

    python benchmarks/gram.py [--quick] [--sklearn] [--no-compile] [--out PATH]

Order of work, all in one process so that every ratio compares numbers from the same run:

1. device facts and the measured device-to-device copy bandwidth (the write floor of a Gram
   matrix is N * M * 4 bytes at that bandwidth, bytes read + written counted as in
   ``shared/anchors``);
2. correctness first: relative Frobenius and max errors of kernelkit (accurate and fast) and of
   the eager float32 baseline against float64 torch on the upcast inputs, on random N(0, 1) data
   and on data offset by 1000 (spread 0.05), for every benchmarked kernel and D;
3. compilation: first-call time (compilation of the heuristic config) and whether a second N
   recompiles;
4. timings (``triton.testing.do_bench``, median; inputs rotated through copies that exceed L2):
   kernelkit accurate / fast (and accurate inside ``kernelkit_gpu.assume_finite()``: no NaN /
   range check; ``checked_over_unchecked`` is the default call's time over that one, the cost of
   the check fused into the preparation, goal <= 1.05), eager torch (row norms + addmm +
   epilogue, IEEE float32, TF32 off),
   ``torch.compile`` of the same eager function (a subset: it compiles per shape), the write floor;
5. the matrix-free product K(X, Y) @ v at N = M = 10^6, D = 3, R = 1 against eager chunked torch
   (timed on a slice of rows and scaled, said so in the JSON);
6. optional: scikit-learn ``rbf_kernel`` on the CPU at N = 4096, D = 64.

The JSON goes to ``--out`` (default ``benchmarks/results/gram-<gpu>-<date>.json``), written
atomically; a short table is printed last.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from _common import (check_mode, copy_bandwidth, default_out, device_facts, log, now,
                     versions, wall_s, write_json_atomic)
from _common import median_ms as _median_ms

import kernelkit_gpu  # noqa: E402
from kernelkit_gpu.pairwise.naive import gram_naive, kernel_matvec_naive  # noqa: E402

KERNELS = ("rbf", "polynomial", "laplacian", "matern")
#: where everything runs; "cpu" only for ``--smoke`` (the interpreter: checks the script's code paths)
DEV = "cuda"
DIMS = (3, 64, 512)
SIZES = (4096, 16384, 32768, 65536)


# ----------------------------------------------------------------------------- parameters
def kernel_params(name, d):
    """Benchmark parameters: K neither ~0 nor ~1 on N(0, 1) data."""
    if name == "rbf":
        return dict(gamma=1.0 / d)
    if name == "polynomial":
        return dict(gamma=1.0 / d, degree=3, coef0=1.0)
    if name == "linear":
        return {}
    if name == "laplacian":
        return dict(gamma=1.0 / d)
    if name == "matern":
        return dict(nu=1.5, length_scale=math.sqrt(d))
    raise ValueError(name)


def offset_params(name, d, spread=0.05):
    """Parameters on the scale of the offset data (spread 0.05), so K spans (0, 1)."""
    if name == "rbf":
        return dict(gamma=1.0 / (2 * spread**2 * d))
    if name == "laplacian":
        return dict(gamma=1.0 / (1.1 * spread * d))
    if name == "matern":
        return dict(nu=1.5, length_scale=spread * math.sqrt(2 * d))
    return kernel_params(name, d)


# ------------------------------------------------------------------- eager torch baselines
def eager_gram(name, x, p):
    """K(X, X) the eager way: row norms + addmm + elementwise epilogue, in place where possible.

    Not centred and not symmetrised: what a careful user writes in plain torch.
    """
    if name == "polynomial":
        c = torch.full((x.shape[0], x.shape[0]), p["coef0"], dtype=x.dtype, device=x.device)
        return torch.addmm(c, x, x.T, alpha=p["gamma"]).pow_(p["degree"])
    if name == "linear":
        return x @ x.T
    if name == "laplacian":
        return torch.cdist(x, x, p=1.0).mul_(-p["gamma"]).exp_()
    n2 = (x * x).sum(dim=1)
    d2 = torch.addmm(n2[:, None] + n2[None, :], x, x.T, alpha=-2.0).clamp_min_(0.0)
    if name == "rbf":
        return d2.mul_(-p["gamma"]).exp_()
    if name == "matern":  # nu = 1.5: (1 + t) exp(-t), t = sqrt(3) r / l
        t = d2.sqrt_().mul_(math.sqrt(3.0) / p["length_scale"])
        return torch.exp(-t).mul_(t.add_(1.0))
    raise ValueError(name)


def reference64(name, x, p):
    """Float64 torch on the upcast inputs (centred expansion in float64: ~1e-16 relative)."""
    return gram_naive(x.to(torch.float64), None, name, **p)


def rel_err(K, ref):
    K = K.to(torch.float64)
    return float(torch.linalg.norm(K - ref) / torch.linalg.norm(ref)), float((K - ref).abs().max())


# ---------------------------------------------------------------------------------- timing
def _sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def _empty_cache():
    if DEV == "cuda":
        torch.cuda.empty_cache()


def median_ms(fn, warmup=25, rep=100):
    return _median_ms(fn, DEV, warmup=warmup, rep=rep)


def rotating(make, nbytes_each, l2_bytes, cap=8):
    """Copies of an input so that successive calls do not find it warm in L2."""
    k = 1 if nbytes_each >= 2 * l2_bytes else min(cap, math.ceil(2 * l2_bytes / max(1, nbytes_each)))
    return [make() for _ in range(k)]


class Cycle:
    def __init__(self, items):
        self.items, self.i = items, 0

    def __call__(self):
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]


def cuda_time_s(fn, runs=3):
    return wall_s(fn, DEV, runs)


# ----------------------------------------------------------------------------------- parts
class _no_tf32:
    """IEEE float32 matmuls in torch (the eager baseline of shared/anchors)."""

    def __enter__(self):
        self.m = torch.backends.cuda.matmul.allow_tf32
        self.c = torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.m
        torch.backends.cudnn.allow_tf32 = self.c


def part_tuning(dims, kernels, n):
    """First call of each (kernel, D, precision): compilation of the heuristic config (with
    KERNELKIT_GPU_AUTOTUNE=1 also the benchmarking of the candidates), at a large N."""
    rows = []
    g = torch.Generator(device=DEV).manual_seed(4)
    for d in dims:
        x = torch.randn(n, d, device=DEV, generator=g)
        for name in kernels:
            for precision in ("accurate", "fast"):
                p = kernel_params(name, d)
                t = cuda_time_s(lambda: kernelkit_gpu.gram(x, kernel=name, precision=precision, **p), runs=1)
                rows.append(dict(kernel=name, d=d, n=n, precision=precision, first_call_s=t))
                log(f"  {name:10s} D={d:3d} {precision:8s}: first call {t:6.2f} s at N={n}")
        del x
        _empty_cache()
    return rows


def part_correctness(dims, kernels, n=4096):
    rows = []
    g = torch.Generator(device=DEV).manual_seed(0)
    for d in dims:
        xr = torch.randn(n, d, device=DEV, generator=g)
        xo = 1000.0 + 0.05 * torch.randn(n, d, device=DEV, generator=g)
        for name in kernels:
            cases = (("random", xr, kernel_params(name, d)), ("offset1000", xo, offset_params(name, d)))
            for data, x, p in cases:
                ref = reference64(name, x, p)
                row = dict(kernel=name, d=d, n=n, data=data)
                for label, fn in (
                    ("accurate", lambda: kernelkit_gpu.gram(x, kernel=name, **p)),
                    ("fast", lambda: kernelkit_gpu.gram(x, kernel=name, precision="fast", **p)),
                    ("eager_fp32", lambda: eager_gram(name, x, p)),
                ):
                    with _no_tf32():
                        K = fn()
                    row[f"{label}_rel_fro"], row[f"{label}_max_abs"] = rel_err(K, ref)
                    del K
                rows.append(row)
                log(f"  {name:10s} D={d:3d} {data:10s} rel err: accurate {row['accurate_rel_fro']:.2e}  "
                    f"fast {row['fast_rel_fro']:.2e}  eager {row['eager_fp32_rel_fro']:.2e}")
                del ref
    return rows


def part_compilation(small=False):
    """First call (compilation) and whether a second N recompiles."""
    res = {}
    g = torch.Generator(device=DEV).manual_seed(1)
    name, d = "rational_quadratic", 48  # a key no other part touches
    k = 64 if small else 1
    x1 = torch.randn(4096 // k, d, device=DEV, generator=g)
    x2 = torch.randn(8192 // k, d, device=DEV, generator=g)
    x3 = torch.randn(8200 // k, d, device=DEV, generator=g)  # 8200 % 16 != 0: M's divisibility changes
    res["first_call_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x1, kernel=name), runs=1)
    res["second_call_same_n_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x1, kernel=name), runs=1)
    res["first_call_new_n_8192_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x2, kernel=name), runs=1)
    res["second_call_n_8192_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x2, kernel=name), runs=1)
    res["first_call_n_8200_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x3, kernel=name), runs=1)
    res["second_call_n_8200_s"] = cuda_time_s(lambda: kernelkit_gpu.gram(x3, kernel=name), runs=1)
    res["recompiled_for_new_n_8192"] = res["first_call_new_n_8192_s"] > res["second_call_n_8192_s"] + 0.05
    res["recompiled_for_n_8200"] = res["first_call_n_8200_s"] > res["second_call_n_8200_s"] + 0.05
    res["note"] = ("N is not specialised; M (and the output stride) are specialised on divisibility "
                   "by 16, so a size that changes whether M % 16 == 0 compiles one more variant")
    log(f"  first call {res['first_call_s']:.2f} s (compile); new N=8192: "
        f"{res['first_call_new_n_8192_s'] * 1e3:.1f} ms vs {res['second_call_n_8192_s'] * 1e3:.1f} ms "
        f"-> recompiled: {res['recompiled_for_new_n_8192']}; "
        f"N=8200 recompiled: {res['recompiled_for_n_8200']}")
    return res


def part_timings(dims, kernels, sizes, copy_Bps, l2_bytes, compile_subset, mem_bytes):
    rows = []
    g = torch.Generator(device=DEV).manual_seed(2)
    compiled = {}
    for name in kernels:
        for d in dims:
            # largest N first (with KERNELKIT_GPU_AUTOTUNE=1 the tuning happens there)
            for n in sorted(sizes, reverse=True):
                out_bytes = n * n * 4
                if 2.2 * out_bytes > 0.9 * mem_bytes:
                    log(f"  skip {name} D={d} N={n}: output does not fit twice")
                    continue
                p = kernel_params(name, d)
                xs = Cycle(rotating(lambda: torch.randn(n, d, device=DEV, generator=g), n * d * 4, l2_bytes))
                out = torch.empty((n, n), device=DEV)
                row = dict(kernel=name, d=d, n=n, m=n, output_GB=out_bytes / 1e9,
                           write_floor_ms=out_bytes / copy_Bps * 1e3)
                row["kernelkit_accurate_ms"] = median_ms(
                    lambda: kernelkit_gpu.gram(xs(), kernel=name, out=out, **p))
                row["kernelkit_fast_ms"] = median_ms(
                    lambda: kernelkit_gpu.gram(xs(), kernel=name, out=out, precision="fast", **p))
                with kernelkit_gpu.assume_finite():  # no NaN / range check, no wait per call
                    row["kernelkit_accurate_assume_finite_ms"] = median_ms(
                        lambda: kernelkit_gpu.gram(xs(), kernel=name, out=out, **p))
                row["checked_over_unchecked"] = (row["kernelkit_accurate_ms"]
                                                 / row["kernelkit_accurate_assume_finite_ms"])
                del out
                flops = 2.0 * n * n * d
                eager_expected_s = flops / 40e12 + 4 * out_bytes / copy_Bps
                # the eager chain holds up to 3 N x N temporaries (broadcast norms, addmm, exp)
                if 4.5 * out_bytes < 0.9 * mem_bytes and eager_expected_s < 2.0:
                    with _no_tf32():
                        try:
                            row["eager_ms"] = median_ms(lambda: eager_gram(name, xs(), p), warmup=5, rep=50)
                        except Exception as e:  # noqa: BLE001 - e.g. torch.cdist refusing N = 65536
                            row["eager_error"] = f"{type(e).__name__}: {e}"[:200]
                        if compile_subset(name, d, n):
                            try:
                                fn = compiled.setdefault((name, d, n), torch.compile(
                                    lambda x, _name=name, _p=p: eager_gram(_name, x, _p), dynamic=False))
                                t0 = time.perf_counter()
                                fn(xs())
                                _sync()
                                row["torch_compile_first_call_s"] = time.perf_counter() - t0
                                row["torch_compile_ms"] = median_ms(lambda: fn(xs()), warmup=5, rep=50)
                            except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                                row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:300]
                    _empty_cache()
                else:
                    row["eager_skipped"] = "expected > 2 s per call or out of memory"
                t = row["kernelkit_accurate_ms"]
                row["accurate_output_GBps"] = out_bytes / (t * 1e-3) / 1e9
                row["accurate_pct_of_write_floor"] = 100.0 * row["write_floor_ms"] / t
                if "eager_ms" in row:
                    row["speedup_accurate_vs_eager"] = row["eager_ms"] / t
                    row["speedup_fast_vs_eager"] = row["eager_ms"] / row["kernelkit_fast_ms"]
                rows.append(row)
                nan = float("nan")
                log(f"  {name:10s} D={d:3d} N={n:6d}: accurate {t:8.2f} ms  "
                    f"(assume_finite {row['kernelkit_accurate_assume_finite_ms']:8.2f} ms, "
                    f"checked/unchecked {row['checked_over_unchecked']:.3f})  "
                    f"fast {row['kernelkit_fast_ms']:8.2f} ms  eager {row.get('eager_ms', nan):8.2f} ms  "
                    f"compile {row.get('torch_compile_ms', nan):8.2f} ms  floor {row['write_floor_ms']:.2f} ms")
                del xs
                _empty_cache()
    return rows


def part_matvec(quick, n=None):
    n = m = n or (200_000 if quick else 1_000_000)
    d, name = 3, "rbf"
    g = torch.Generator(device=DEV).manual_seed(3)
    x = torch.randn(n, d, device=DEV, generator=g)
    y = torch.randn(m, d, device=DEV, generator=g)
    v = torch.randn(m, device=DEV, generator=g)
    p = dict(gamma=0.5)
    res = dict(kernel=name, n=n, m=m, d=d, r=1, params=p)
    res["first_call_s"] = cuda_time_s(lambda: kernelkit_gpu.kernel_matvec(x, y, v, name, **p), runs=1)
    res["kernelkit_s"] = cuda_time_s(lambda: kernelkit_gpu.kernel_matvec(x, y, v, name, **p), runs=3)
    res["pairs_per_s"] = n * m / res["kernelkit_s"]
    # correctness on a slice of rows against float64
    rows = min(2048, n)
    out = kernelkit_gpu.kernel_matvec(x, y, v, name, **p)[:rows].to(torch.float64)
    ref = kernel_matvec_naive(x[:rows].double(), y.double(), v.double(), name, **p)
    res["rel_err_first_rows"] = float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))
    # eager chunked torch, timed on a slice of rows and scaled to all rows
    sub = max(1, n // 16)
    with _no_tf32():
        t_sub = cuda_time_s(lambda: kernel_matvec_naive(x[:sub], y, v, name, **p), runs=1)
    res["eager_chunked_s"] = t_sub * n / sub
    res["eager_note"] = f"eager chunked torch timed on {sub} of {n} rows and scaled by {n / sub:g}"
    res["speedup_vs_eager"] = res["eager_chunked_s"] / res["kernelkit_s"]
    log(f"  matvec N=M={n} D=3 R=1: {res['kernelkit_s']:.3f} s ({res['pairs_per_s'] / 1e12:.2f} Tpairs/s), "
        f"first call {res['first_call_s']:.2f} s, eager {res['eager_chunked_s']:.1f} s (scaled), "
        f"rel err {res['rel_err_first_rows']:.1e}")
    return res


def part_sklearn():
    import numpy as np
    from sklearn.metrics.pairwise import rbf_kernel

    X = np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32)
    rbf_kernel(X[:64])
    t = time.perf_counter()
    rbf_kernel(X, gamma=1.0 / 64)
    return dict(n=4096, d=64, dtype="float32", seconds=time.perf_counter() - t, device="cpu")


# ------------------------------------------------------------------------------------ main
def print_table(result):
    log("")
    log(f"Gram benchmark on {result['device']['name']} (torch {result['versions']['torch']}, "
        f"triton {result['versions']['triton']}); copy {result['copy_TBps']:.2f} TB/s")
    hdr = f"{'kernel':10s} {'D':>4s} {'N':>6s} {'accurate ms':>11s} {'unchecked':>9s} " \
          f"{'chk/unchk':>9s} {'fast ms':>8s} {'eager ms':>9s} " \
          f"{'compile ms':>10s} {'x eager':>7s} {'GB/s out':>8s} {'% floor':>7s}"
    log(hdr)
    log("-" * len(hdr))
    for r in result["timings"]:
        nan = float("nan")
        log(f"{r['kernel']:10s} {r['d']:4d} {r['n']:6d} {r['kernelkit_accurate_ms']:11.2f} "
            f"{r['kernelkit_accurate_assume_finite_ms']:9.2f} {r['checked_over_unchecked']:9.3f} "
            f"{r['kernelkit_fast_ms']:8.2f} {r.get('eager_ms', nan):9.2f} "
            f"{r.get('torch_compile_ms', nan):10.2f} {r.get('speedup_accurate_vs_eager', nan):7.2f} "
            f"{r['accurate_output_GBps']:8.0f} {r['accurate_pct_of_write_floor']:7.1f}")
    mv = result.get("matvec")
    if mv:
        log(f"matvec rbf N=M={mv['n']} D=3 R=1: {mv['kernelkit_s'] * 1e3:.0f} ms, eager chunked "
            f"{mv['eager_chunked_s']:.1f} s (x{mv['speedup_vs_eager']:.0f}), "
            f"rel err {mv['rel_err_first_rows']:.1e}")
    worst = {}
    for r in result["correctness"]:
        for label in ("accurate", "fast", "eager_fp32"):
            key = (label, r["data"])
            worst[key] = max(worst.get(key, 0.0), r[f"{label}_rel_fro"])
    log("worst relative Frobenius error vs float64: " + ", ".join(
        f"{k[0]}/{k[1]} {v:.1e}" for k, v in sorted(worst.items())))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and kernels (about a minute)")
    ap.add_argument("--sklearn", action="store_true",
                    help="also time sklearn rbf_kernel on the CPU at N=4096, D=64")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    ap.add_argument("--kernels", default=None, help="comma-separated subset of " + ",".join(KERNELS))
    ap.add_argument("--dims", default=None, help="comma-separated feature counts (default 3,64,512)")
    ap.add_argument("--sizes", default=None, help="comma-separated N (default 4096,16384,32768,65536)")
    ap.add_argument("--matvec-n", type=int, default=None, help="N = M of the matrix-free product")
    ap.add_argument("--out", default=None,
                    help="JSON path (default benchmarks/results/gram-<gpu>-<date>.json)")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU dry run under TRITON_INTERPRET=1 with tiny sizes (checks the code paths; "
                         "numbers meaningless)")
    args = ap.parse_args(argv)
    global DEV
    DEV = check_mode("benchmarks/gram.py", args.smoke)
    t_start = time.perf_counter()
    device = device_facts(DEV)
    dev_name, total_mem = device["name"], device["total_memory_GB"] * 1e9
    l2_bytes = device["L2_MB"] * 2**20
    kernels = ("rbf", "laplacian") if args.quick or args.smoke else KERNELS
    dims = (3, 20) if args.smoke else (3, 64) if args.quick else DIMS
    sizes = (64, 96) if args.smoke else (4096, 16384) if args.quick else SIZES
    if args.kernels:
        kernels = tuple(args.kernels.split(","))
    if args.dims:
        dims = tuple(int(v) for v in args.dims.split(","))
    if args.sizes:
        sizes = tuple(int(v) for v in args.sizes.split(","))
    result = dict(
        benchmark="benchmarks/gram.py", date=now(), args=vars(args), device=device,
        versions=versions(),
        notes=["eager = row norms + addmm + epilogue in float32 with TF32 off, not centred, not symmetrised",
               "kernelkit times include its torch-side preparation (centring, norms) and write into a "
               "preallocated out=",
               "heuristic configs (KERNELKIT_GPU_AUTOTUNE unset): first calls compile one config per "
               "kernel; part 'tuning' times those first calls at the largest N"],
    )
    log("== copy bandwidth")
    result["copy_TBps"] = copy_Bps = copy_bandwidth(DEV) / 1e12
    copy_Bps *= 1e12
    log(f"  {result['copy_TBps']:.2f} TB/s (read + write)")
    log("== first calls: compilation")
    out = args.out or default_out("gram", dev_name)
    result["tuning"] = part_tuning(dims, kernels, min(32768, max(sizes)))
    write_json_atomic(out, result)  # after every part: a run cut short keeps what it measured
    log("== correctness against float64 torch")
    result["correctness"] = part_correctness(dims, kernels, n=min(4096, max(sizes)))
    write_json_atomic(out, result)
    log("== compilation")
    result["compilation"] = part_compilation(small=args.smoke)
    write_json_atomic(out, result)
    log("== Gram timings")

    def compile_subset(name, d, n):
        if args.no_compile:
            return False
        if args.quick:
            return name == "rbf" and d == 64 and n == 16384
        return name == "rbf" and d in (64, 512) and n == 32768  # torch.compile compiles per shape


    result["timings"] = part_timings(dims, kernels, sizes, copy_Bps, l2_bytes, compile_subset, total_mem)
    write_json_atomic(out, result)
    log("== matrix-free product")
    result["matvec"] = part_matvec(args.quick, n=300 if args.smoke else args.matvec_n)
    if args.sklearn:
        log("== sklearn (CPU)")
        result["sklearn_rbf_kernel"] = part_sklearn()
    result["total_seconds"] = time.perf_counter() - t_start
    write_json_atomic(out, result)
    print_table(result)
    log(f"wrote {out} ({result['total_seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
