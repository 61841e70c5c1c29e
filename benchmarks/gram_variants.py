"""Tuning runs for the Gram kernels: every launch config checked against float64, then timed, in one call.

Run on the GPU machine (about 3-5 minutes on an H100)::

    PYTHONPATH=. python3 benchmarks/gram_variants.py --out $OUT/variants.json [--parts a,b,...]

Parts (default: all):

* ``mma``: the tensor-core Gram kernel (rbf, K(X, X)) at D = 64 and 512, N = 32768 (and 16384):
  block / warps / stages candidates, fast vs accurate;
* ``direct``: the direct-difference kernel (laplacian D = 64, rbf D = 3): tile shapes;
* ``warps``: sixteen warps per tile;
* ``small``: host overhead at N = 4096 and N = 256 (wall time per call vs GPU time);
* ``first``: first call (compile included) in a fresh process with an empty Triton cache, and
  whether a new N recompiles;
* ``matvec``: the matrix-free product at N = M = 2e5, D = 3, R = 1;
* ``ncu``: Nsight Compute (speed of light, occupancy, warp states) on the default rbf and
  laplacian kernels at N = 16384, D = 64 (runs this script's ``ncu_target`` part under ncu);
* ``tests``: the GPU test files on cuda, in parallel shards (``--test-timeout`` each).

Correctness first: every variant is run at N = 4096 on fresh random data (and data offset by
1000, and near-duplicates) and compared with float64 (``rel_fro``); a variant that fails is not
timed. Timings: ``triton.testing.do_bench`` median after warm-up, inputs rotated. A short table
is printed last; the JSON holds everything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402


import kernelkit_gpu  # noqa: E402
from kernelkit_gpu import _prepare as P  # noqa: E402
from kernelkit_gpu.pairwise.naive import gram_naive  # noqa: E402
from kernelkit_gpu.pairwise.gram_configs import GramConfig  # noqa: E402

from kernelkit_gpu.pairwise import gram_fused as G  # noqa: E402
DEV = "cuda"


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------- helpers
def params_for(name, d):
    if name in ("rbf", "laplacian"):
        return dict(gamma=1.0 / d)
    if name == "matern":
        return dict(nu=1.5, length_scale=math.sqrt(d))
    return {}


def sync():
    torch.cuda.synchronize()


def median_ms(fn, warmup=10, rep=60):
    return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def copy_TBps():
    n = 1 << 28
    a = torch.empty(n, dtype=torch.float32, device=DEV).normal_()
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a))
    del a, b
    return 2 * n * 4 / (ms * 1e-3) / 1e12


class Spy:
    """Wraps a Triton kernel object to record the compiled kernels' registers and spills."""

    def __init__(self, real):
        self.real, self.seen = real, []

    def __getitem__(self, grid):
        launch = self.real[grid]

        def run(*a, **k):
            ck = launch(*a, **k)
            try:
                self.seen.append((int(ck.n_regs), int(ck.n_spills)))
            except Exception:  # noqa: BLE001
                pass
            return ck

        return run


def install_spies():
    spies = {}
    for name in ("_gram_mma_kernel", "_gram_direct_kernel", "_gram_fix_kernel", "_gram_prep_kernel"):
        spies[name] = Spy(getattr(G, name))
        setattr(G, name, spies[name])
    return spies


def rel_fro64(K, ref):
    K = K.to(torch.float64)
    return float(torch.linalg.norm(K - ref) / torch.linalg.norm(ref)), float((K - ref).abs().max())


def ref64(name, x, p):
    return gram_naive(x.to(torch.float64), None, name, **p)


def near_dups(n, d, g):
    base = torch.randn(n // 2, d, device=DEV, generator=g, dtype=torch.float64)
    shift = torch.randn(n // 2, d, device=DEV, generator=g, dtype=torch.float64) * 1e-6
    return torch.cat([base, base + shift]).float()


# ----------------------------------------------------------------------------------- parts
def run_variant(spec, g, sizes, spies, results, check_n=4096):
    """spec: dict(name, kernel, d, precision, config). Check, then time at sizes."""
    name, kern, d = spec["name"], spec["kernel"], spec["d"]
    p = params_for(kern, d)
    prec = spec.get("precision", "accurate")
    cfg = spec.get("config")
    plan = P.kernel_plan(kern, d, p)
    row = dict(name=name, kernel=kern, d=d, precision=prec, config=None if cfg is None else vars(cfg))

    def call(x, out):
        return G.gram_fwd(x, None, plan, out, prec, True, config=cfg)

    try:
        # compile (first call) at a small N, then correctness at check_n on three data sets
        for s in spies.values():
            s.seen.clear()
        x0 = torch.randn(256, d, device=DEV, generator=g)
        t0 = time.perf_counter()
        call(x0, torch.empty((256, 256), device=DEV))
        sync()
        row["compile_s"] = time.perf_counter() - t0
        row["regs_spills"] = {k: s.seen[:1] for k, s in spies.items() if s.seen}
        errs = {}
        for data in ("random", "offset1000", "near_dup"):
            if data == "random":
                x = torch.randn(check_n, d, device=DEV, generator=g)
                pp = p
            elif data == "offset1000":
                x = 1000.0 + 0.05 * torch.randn(check_n, d, device=DEV, generator=g)
                pp = dict(p)
                if "gamma" in pp:
                    pp["gamma"] = pp["gamma"] / (0.05 ** 2 if kern == "rbf" else 0.05)
            else:
                x = near_dups(check_n, d, g)
                pp = p
            if pp is not p:
                plan_c = P.kernel_plan(kern, d, pp)
                out = torch.full((check_n, check_n), float("nan"), device=DEV)
                G.gram_fwd(x, None, plan_c, out, prec, True, config=cfg)
            else:
                out = torch.full((check_n, check_n), float("nan"), device=DEV)
                call(x, out)
            sync()
            ref = ref64(kern, x, pp)
            errs[data] = rel_fro64(out, ref)[0]
            errs[data + "_symmetric"] = bool(torch.equal(out, out.T))
            errs[data + "_finite"] = bool(torch.isfinite(out).all())
            del out, ref
        row["errors"] = errs
        limit = 2e-3 if prec == "fast" else 2e-6
        ok = all(errs[k] <= limit for k in ("random", "offset1000", "near_dup") if not (
            prec == "fast" and k == "near_dup")) and all(
            v for k, v in errs.items() if k.endswith("_finite") or k.endswith("_symmetric"))
        row["correct"] = bool(ok)
        row["times_ms"] = {}
        if ok:
            for n in sizes:
                xs = [torch.randn(n, d, device=DEV, generator=g) for _ in range(2)]
                out = torch.empty((n, n), device=DEV)
                it = [0]

                def f():
                    it[0] ^= 1
                    call(xs[it[0]], out)

                row["times_ms"][str(n)] = median_ms(f)
                del out, xs
                torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001 - record and continue with the next variant
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    log(f"  {name:44s} ok={row.get('correct')} compile={row.get('compile_s', float('nan')):.2f}s "
        f"err={row.get('errors', {}).get('random', float('nan')):.1e}/"
        f"{row.get('errors', {}).get('offset1000', float('nan')):.1e}/"
        f"{row.get('errors', {}).get('near_dup', float('nan')):.1e} "
        + " ".join(f"N={k}:{v:.3f}ms" for k, v in row.get("times_ms", {}).items())
        + (f" ERROR {row['error'][:200]}" if "error" in row else "")
        + f" regs={row.get('regs_spills')}")
    results.append(row)


def C(block, bk, w, st, maxnreg=0):
    return GramConfig(block, bk, w, st, maxnreg)


def part_mma(g, spies, results, quick):
    big = [32768] if quick else [32768, 16384]
    specs = [
        dict(name="rbf64 acc default", kernel="rbf", d=64),
        dict(name="rbf64 acc 128/k32/w8/s2", kernel="rbf", d=64, config=C(128, 32, 8, 2)),
        dict(name="rbf64 acc 128/k16/w8/s2 nreg128", kernel="rbf", d=64, config=C(128, 16, 8, 2, 128)),
        dict(name="rbf64 acc 128/k16/w8/s3", kernel="rbf", d=64, config=C(128, 16, 8, 3)),
        dict(name="rbf64 acc 64/k32/w4/s2", kernel="rbf", d=64, config=C(64, 32, 4, 2)),
        dict(name="rbf64 fast default", kernel="rbf", d=64, precision="fast"),
        dict(name="rbf64 fast 128/k64/w8/s2", kernel="rbf", d=64, precision="fast", config=C(128, 64, 8, 2)),
        dict(name="rbf512 acc default", kernel="rbf", d=512),
        dict(name="rbf512 acc 128/k32/w8/s3", kernel="rbf", d=512, config=C(128, 32, 8, 3)),
        dict(name="rbf512 fast default", kernel="rbf", d=512, precision="fast"),
        dict(name="matern64 acc default", kernel="matern", d=64),
    ]
    for s in specs:
        run_variant(s, g, big if s["d"] == 64 else [32768], spies, results)


def part_direct(g, spies, results, quick):
    big = [32768] if quick else [32768, 16384]
    specs = [
        dict(name="lap64 default", kernel="laplacian", d=64),
        dict(name="lap64 64/w2", kernel="laplacian", d=64, config=C(64, 16, 2, 1)),
        dict(name="lap64 128/w8", kernel="laplacian", d=64, config=C(128, 16, 8, 1)),
        dict(name="rbf3 default", kernel="rbf", d=3),
        dict(name="rbf3 64/w4", kernel="rbf", d=3, config=C(64, 16, 4, 1)),
    ]
    for s in specs:
        run_variant(s, g, big, spies, results)


def part_warps(g, spies, results, quick):
    """Sixteen warps per 128 x 128 tile (four per scheduler; 128 registers, no spills)."""
    specs = [
        dict(name="rbf64 acc default", kernel="rbf", d=64),
        dict(name="rbf64 acc 128/w16/k32/s2", kernel="rbf", d=64, config=C(128, 32, 16, 2)),
        dict(name="rbf64 acc 128/w16/k16/s3", kernel="rbf", d=64, config=C(128, 16, 16, 3)),
        dict(name="rbf64 fast default", kernel="rbf", d=64, precision="fast"),
        dict(name="rbf64 fast 128/w16/k64/s2", kernel="rbf", d=64, precision="fast", config=C(128, 64, 16, 2)),
        dict(name="rbf512 acc 128/w16/k32/s3", kernel="rbf", d=512, config=C(128, 32, 16, 3)),
        dict(name="lap64 default", kernel="laplacian", d=64),
        dict(name="lap64 128/w16", kernel="laplacian", d=64, config=C(128, 16, 16, 1)),
        dict(name="lap64 64/w4 nreg72", kernel="laplacian", d=64, config=C(64, 16, 4, 1, 72)),
    ]
    for s in specs:
        run_variant(s, g, [32768], spies, results)


def part_small(g, results):
    rows = []
    for n, d in ((4096, 64), (256, 64), (4096, 3)):
        x = torch.randn(n, d, device=DEV, generator=g)
        out = torch.empty((n, n), device=DEV)
        kernelkit_gpu.gram(x, kernel="rbf", out=out)
        sync()
        gpu_ms = median_ms(lambda: kernelkit_gpu.gram(x, kernel="rbf", out=out))
        reps = 200
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            kernelkit_gpu.gram(x, kernel="rbf", out=out)
        sync()
        wall_ms = (time.perf_counter() - t) / reps * 1e3
        t = time.perf_counter()
        for _ in range(reps):
            P.kernel_plan("rbf", d, {})
        plan_ms = (time.perf_counter() - t) / reps * 1e3
        torch.backends.cuda.matmul.allow_tf32 = False

        def eager():
            n2 = (x * x).sum(1)
            return torch.addmm(n2[:, None] + n2[None, :], x, x.T, alpha=-2.0).clamp_min_(0).mul_(-1.0 / d).exp_()

        eager_ms = median_ms(eager)
        r = dict(n=n, d=d, do_bench_ms=gpu_ms, wall_ms_per_call=wall_ms, kernel_plan_ms=plan_ms,
                 eager_ms=eager_ms)
        rows.append(r)
        log(f"  small N={n} D={d}: do_bench {gpu_ms:.3f} ms, wall/call {wall_ms:.3f} ms, "
            f"kernel_plan {plan_ms:.3f} ms, eager {eager_ms:.3f} ms")
    results.append(dict(name="small", rows=rows))


FIRST_CALL_CODE = r"""
import time, torch, sys
sys.path.insert(0, %r)
t0 = time.perf_counter()
import kernelkit_gpu
t_import = time.perf_counter() - t0
x = torch.randn(%d, %d, device="cuda")
torch.cuda.synchronize()
t = time.perf_counter(); kernelkit_gpu.gram(x, kernel=%r); torch.cuda.synchronize(); first = time.perf_counter() - t
t = time.perf_counter(); kernelkit_gpu.gram(x, kernel=%r); torch.cuda.synchronize(); second = time.perf_counter() - t
x2 = torch.randn(%d, %d, device="cuda")
t = time.perf_counter(); kernelkit_gpu.gram(x2, kernel=%r); torch.cuda.synchronize(); new_n = time.perf_counter() - t
t = time.perf_counter(); kernelkit_gpu.gram(x2, kernel=%r); torch.cuda.synchronize(); new_n2 = time.perf_counter() - t
print("RESULT", t_import, first, second, new_n, new_n2)
"""


def part_first(results):
    rows = []
    for kern, d, n, n2 in (("rbf", 64, 8192, 12288), ("laplacian", 64, 8192, 12288), ("rbf", 3, 8192, 12288)):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            env.pop("KERNELKIT_GPU_AUTOTUNE", None)
            code = FIRST_CALL_CODE % (ROOT, n, d, kern, kern, n2, d, kern, kern)
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
            total = time.perf_counter() - t
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")]
        if line:
            t_import, first, second, new_n, new_n2 = map(float, line[0].split()[1:])
            r = dict(kernel=kern, d=d, n=n, import_s=t_import, first_call_s=first, second_call_s=second,
                     new_n_first_s=new_n, new_n_second_s=new_n2, process_s=total,
                     recompiled_for_new_n=new_n > new_n2 + 0.05)
        else:
            r = dict(kernel=kern, d=d, error=res.stderr[-1500:])
        rows.append(r)
        log(f"  first call {kern} D={d}: {r.get('first_call_s', float('nan')):.2f} s "
            f"(import {r.get('import_s', float('nan')):.2f} s), new N recompiled: "
            f"{r.get('recompiled_for_new_n')} {r.get('error', '')[-300:]}")
    results.append(dict(name="first_call", rows=rows))


def part_matvec(g, results):
    n = 200_000
    x = torch.randn(n, 3, device=DEV, generator=g)
    y = torch.randn(n, 3, device=DEV, generator=g)
    v = torch.randn(n, device=DEV, generator=g)
    kernelkit_gpu.kernel_matvec(x, y, v, "rbf", gamma=0.5)
    sync()
    ms = median_ms(lambda: kernelkit_gpu.kernel_matvec(x, y, v, "rbf", gamma=0.5), warmup=3, rep=20)
    sub = 2048
    ref = (torch.exp(-0.5 * torch.cdist(x[:sub].double(), y.double()) ** 2) @ v.double())
    got = kernelkit_gpu.kernel_matvec(x[:sub], y, v, "rbf", gamma=0.5).double()
    err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
    r = dict(name="matvec", n=n, m=n, d=3, r=1, ms=ms, Tpairs_per_s=n * n / (ms * 1e-3) / 1e12,
             est_1e6_s=ms * 1e-3 * 25, rel_err=err)
    log(f"  matvec N=M={n}: {ms:.2f} ms ({r['Tpairs_per_s']:.2f} Tpairs/s; 1e6 est {r['est_1e6_s']:.3f} s), "
        f"rel err {err:.1e}")
    results.append(r)


NCU_KEYS = ("Duration", "Compute (SM) Throughput", "DRAM Throughput", "L2 Cache Throughput",
            "Achieved Occupancy", "Registers Per Thread", "Warp Cycles Per Issued Instruction",
            "Issue Slots Busy", "No Eligible", "Issued Warp Per Scheduler", "Stall")


def part_ncu(results, timeout=120):
    """Nsight Compute on one launch each of the default rbf (tensor cores) and laplacian (direct)
    kernels at N = 16384, D = 64 (``--clock-control none``: the card's clocks as found)."""
    import glob
    import shutil

    ncu = shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))), None)
    if ncu is None:
        results.append(dict(name="ncu", error="ncu not found"))
        return
    cmd = [ncu, "--clock-control", "none", "-k", "regex:_gram_mma_kernel|_gram_direct_kernel", "-c", "2",
           "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "WarpStateStats",
           "--section", "SchedulerStats", sys.executable, os.path.abspath(__file__), "--parts", "ncu_target",
           "--out", os.path.join(tempfile.gettempdir(), "ncu_target.json")]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        text = res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    lines = [ln.rstrip() for ln in text.splitlines()
             if "_gram_" in ln or any(k in ln for k in NCU_KEYS)]
    results.append(dict(name="ncu", lines=lines, raw_tail=text[-20000:]))
    for ln in lines[:60]:
        log("  " + ln.strip()[:150])


TEST_SHARDS = [
    ("tests/test_gpu_gram.py", "float32_matches"),
    ("tests/test_gpu_gram.py", "symmetric_exact"),
    ("tests/test_gpu_gram.py", "other_dtypes"),
    ("tests/test_gpu_gram.py", "not (float32_matches or symmetric_exact or other_dtypes)"),
    ("tests/test_gpu_matvec.py", "float32_matches"),
    ("tests/test_gpu_matvec.py", "other_dtypes"),
    ("tests/test_gpu_matvec.py", "not (float32_matches or other_dtypes)"),
    ("tests/test_gpu_kernel_attention.py", "gradients"),
    ("tests/test_gpu_kernel_attention.py", "not gradients"),
    ("tests/test_dispatch.py", ""),
]


def part_tests(results, timeout, outdir):
    """The GPU test files on cuda in parallel shards (compilation dominates: one process per
    shard uses the machine's cores); each shard ends itself after ``timeout`` seconds."""
    procs = []
    outdir = tempfile.mkdtemp(prefix="kk-test-shards-")  # not under --out's folder: few files come back
    for i, (path, expr) in enumerate(TEST_SHARDS):
        logf = open(os.path.join(outdir, f"shard{i}.log"), "w")
        cmd = ["timeout", str(timeout), sys.executable, "-m", "pytest", path, "--device", "cuda", "-q",
               "--tb=short", "-p", "no:cacheprovider"] + (["-k", expr] if expr else [])
        procs.append((i, path, expr, subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT), logf))
    rows = []
    for i, path, expr, pr, logf in procs:
        rc = pr.wait()
        logf.close()
        text = open(os.path.join(outdir, f"shard{i}.log")).read()
        summ = [ln for ln in text.splitlines() if " passed" in ln or " failed" in ln or " error" in ln]
        fails = [ln for ln in text.splitlines() if ln.startswith("FAILED") or ln.startswith("ERROR")]
        rows.append(dict(shard=i, path=path, k=expr, rc=rc, summary=summ[-1:] if summ else [], failed=fails[:20],
                         tail=text[-3000:] if (rc != 0 or fails) else ""))
        log(f"  shard {i} {path} -k {expr!r}: rc={rc} {summ[-1] if summ else '(no summary: timed out?)'}")
        for f in fails[:10]:
            log("     " + f[:200])
    results.append(dict(name="tests", rows=rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="mma,direct,small,first,matvec")
    ap.add_argument("--quick", action="store_true", help="N = 32768 only")
    ap.add_argument("--test-timeout", type=int, default=280, help="seconds per test shard (part tests)")
    args = ap.parse_args()
    os.environ.setdefault("KERNELKIT_GPU_AUTOTUNE", "0")
    parts = args.parts.split(",")
    props = torch.cuda.get_device_properties(0)
    result = dict(device=props.name, sm=props.multi_processor_count, torch=torch.__version__,
                  triton=triton.__version__, date=time.strftime("%Y-%m-%dT%H:%M:%S"), rows=[])
    result["copy_TBps"] = bw = copy_TBps()
    log(f"== {props.name}: copy {bw:.2f} TB/s; write floor N=32768: {32768**2 * 4 / (bw * 1e12) * 1e3:.3f} ms, "
        f"N=16384: {16384**2 * 4 / (bw * 1e12) * 1e3:.3f} ms")
    g = torch.Generator(device=DEV).manual_seed(0)
    spies = install_spies()
    rows = result["rows"]
    t_start = time.perf_counter()
    try:
        for part in parts:
            log(f"== {part}")
            if part == "mma":
                part_mma(g, spies, rows, args.quick)
            elif part == "direct":
                part_direct(g, spies, rows, args.quick)
            elif part == "warps":
                part_warps(g, spies, rows, args.quick)
            elif part == "small":
                part_small(g, rows)
            elif part == "first":
                part_first(rows)
            elif part == "matvec":
                part_matvec(g, rows)
            elif part == "ncu":
                part_ncu(rows)
            elif part == "tests":
                part_tests(rows, args.test_timeout, None)
            elif part == "ncu_target":  # one launch each, for: ncu -k regex:_gram_ ... (see notes)
                for kern in ("rbf", "laplacian"):
                    x = torch.randn(16384, 64, device=DEV, generator=g)
                    kernelkit_gpu.gram(x, kernel=kern)
                    sync()
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1, default=str)
    finally:
        result["seconds"] = time.perf_counter() - t_start
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    # short table last
    fl = {n: n * n * 4 / (bw * 1e12) * 1e3 for n in (16384, 32768)}
    log("")
    log(f"{'variant':44s} {'ok':>5s} {'N=32768 ms':>10s} {'x floor':>7s} {'N=16384 ms':>10s} {'err rand':>9s}")
    for r in rows:
        if "times_ms" not in r and "error" not in r:
            continue
        t32 = r.get("times_ms", {}).get("32768", float("nan"))
        t16 = r.get("times_ms", {}).get("16384", float("nan"))
        log(f"{r['name']:44s} {str(r.get('correct')):>5s} {t32:10.3f} {t32 / fl[32768]:7.2f} {t16:10.3f} "
            f"{r.get('errors', {}).get('random', float('nan')):9.1e}" + (" ERR" if "error" in r else ""))


if __name__ == "__main__":
    main()
