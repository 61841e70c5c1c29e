"""Benchmark: kernelkit's Triton flash attention against torch SDPA (flash, cuDNN, efficient).

Run on the GPU machine (about 3 minutes on an H200, estimated; ``--quick`` for about one)::

    python benchmarks/attention_softmax.py [--quick] [--out PATH]

Order of work, all in one process so that every ratio compares numbers from the same run:

0. tuning: one forward + backward per (D, causal) at the headline shape (T = 16384, B = 4), so
   the autotuner (keyed on D, causal and dtype, not on T) picks its configs on long sequences;
   the time of that first call (compilation + autotuning) is recorded;
1. correctness first, with the tuned configs (exactly what is timed): output and dq, dk, dv of
   kernelkit and of SDPA flash against float64 torch on the same bfloat16 inputs (the
   FlashAttention rule: ours <= 2x flash's error + a floor), causal and not, T = S = 1024 and a
   ragged T = 1000, S = 777 with GQA;
2. timings (``triton.testing.do_bench``, median): bfloat16, H = 16, D in {64, 128}, B * T = 65536
   tokens with T in {512, 1024, 4096, 16384} (and T = 65536 causal unless ``--quick``), causal and
   not, forward and forward + backward, for kernelkit and every SDPA backend that accepts the
   shape (a backend that raises is skipped and recorded); TFLOP/s with forward FLOPs
   4 B H T S D (half when causal) and backward 2.5x forward; peak memory of one call
   (``torch.cuda.max_memory_allocated`` above the inputs);
3. the autotuner's choices per key, and the anchors of ``shared/anchors`` for comparison.

The JSON goes to ``--out`` (default
``benchmarks/results/attention_softmax-<gpu>-<date>.json``), written atomically; a short table is
printed last. ``--smoke`` runs tiny shapes on the CPU under the Triton interpreter (code paths only).

``--window`` runs the sliding-window part instead (about 2 minutes on an H200, estimated;
JSON ``attention_softmax_window-<gpu>-<date>.json``): causal attention with ``window_size=(1024,
0)``, bfloat16, D = 128, H = 16, at B = 1, T = 65536 and at FlashAttention's benchmark shape
B = 2, T = 8192 (16k tokens, model dim 2048), forward and forward + backward, against
kernelkit's dense causal call at the same shape (the window's kernels visit ~T (1024 + BLOCK_M)
/ BLOCK_N key tiles instead of ~T^2 / 2) and torch SDPA with the window as an explicit boolean
(T, T) mask on each backend that takes one (skipped, with the reason, where it does not fit in
memory); TFLOP/s count the visible (query, key) pairs exactly. A correctness check first: output
and dq, dk, dv of kernelkit's window and of the masked SDPA against float64 on the same bfloat16
inputs (T = 2048, window (256, 0)).
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import time

import torch
import torch.nn.functional as F
from _common import (ROOT, check_mode, default_out, device_facts, log, median_ms, now, peak_mib,
                     versions, write_json_atomic)

from kernelkit_gpu.attention.naive import softmax_attention_naive  # noqa: E402

# the module (the package exports a function of the same name)
sa_mod = importlib.import_module("kernelkit_gpu.attention.softmax")
sa_bwd = importlib.import_module("kernelkit_gpu.attention.softmax_bwd")

TOKENS = 65536
HEADS = 16
DTYPE = torch.bfloat16
TARGET_TFLOPS = 400.0  # H200, bf16, D 128, T 16384, non-causal forward (SDPA flash: 355)


# ------------------------------------------------------------------------------- helpers
def sdpa_impls():
    """name -> context manager factory (None: ours)."""
    impls = {"kernelkit": None}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - old torch
        return impls
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            impls["sdpa_" + name.split("_")[0].lower()] = (lambda b=backend: sdpa_kernel(b))
    return impls


def run_impl(name, ctx, q, k, v, causal, gqa=False):
    if ctx is None:
        return sa_mod.softmax_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    with ctx():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def fwd_flops(b, h, t, s, d, causal):
    f = 4.0 * b * h * t * s * d
    return f / 2 if causal else f


def max_abs(a, b):
    return float((a.detach().double() - b.detach().double()).abs().max())


# ---------------------------------------------------------------------------------- tuning
def _dims(quick, smoke):
    if smoke:
        return (32,)
    return (128,) if quick else (64, 128)


def tune(dev, quick, smoke):
    """First forward + backward per (D, causal) at the headline shape: compilation + autotuning."""
    log("== tuning (first call per autotuner key, at T = 16384 B = 4)")
    t, b, heads = (64, 1, 2) if smoke else (16384, 4, HEADS)
    rows = []
    for d in _dims(quick, smoke):
        for causal in (False, True):
            q, k, v = (torch.randn(b, heads, t, d, device=dev, dtype=DTYPE).requires_grad_(True)
                       for _ in range(3))
            t0 = time.perf_counter()
            out = sa_mod.softmax_attention(q, k, v, is_causal=causal)
            out.backward(torch.ones_like(out))
            if dev == "cuda":
                torch.cuda.synchronize()
            row = dict(D=d, causal=causal, T=t, B=b, first_call_s=round(time.perf_counter() - t0, 2))
            log("  ", row)
            rows.append(row)
            del q, k, v, out
    return rows


# ---------------------------------------------------------------------------- correctness
def correctness(dev, quick, smoke):
    """Errors against float64 on the same bf16 inputs; verdict per case by the 2x rule."""
    log("== correctness (bfloat16 inputs; errors against float64 torch on the same inputs)")
    gen = torch.Generator(device="cpu").manual_seed(0)
    if smoke:
        shapes = [(1, 2, 2, 40, 33, 32)]
    else:
        shapes = [(2, 16, 16, 1024, 1024, 64), (2, 16, 16, 1024, 1024, 128),
                  (2, 16, 4, 1000, 777, 128)]
        if quick:
            shapes = shapes[1:]
    impls = sdpa_impls()
    flash = impls.get("sdpa_flash")
    rows = []
    for (b, h, hkv, t, s, d) in shapes:
        for causal in (False, True):
            q = torch.randn(b, h, t, d, generator=gen).to(dev, DTYPE).requires_grad_(True)
            k = torch.randn(b, hkv, s, d, generator=gen).to(dev, DTYPE).requires_grad_(True)
            v = torch.randn(b, hkv, s, d, generator=gen).to(dev, DTYPE).requires_grad_(True)
            g = torch.randn(b, h, t, d, generator=gen).to(dev, DTYPE)
            gqa = hkv != h
            q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
            o64 = softmax_attention_naive(q64, k64, v64, is_causal=causal, enable_gqa=gqa)
            r64 = torch.autograd.grad(o64, (q64, k64, v64), g.double())
            row = dict(B=b, H=h, H_kv=hkv, T=t, S=s, D=d, causal=causal)
            errs = {}
            for name, ctx in (("kernelkit", None), ("sdpa_flash", flash)):
                if name != "kernelkit" and (ctx is None or dev != "cuda"):
                    continue
                try:
                    out = run_impl(name, ctx, q, k, v, causal, gqa)
                    grads = torch.autograd.grad(out, (q, k, v), g)
                except Exception as e:  # a backend that refuses the shape
                    row[name] = f"skipped: {type(e).__name__}: {str(e)[:120]}"
                    continue
                errs[name] = dict(out=max_abs(out, o64), **{
                    gn: max_abs(a, r) for gn, a, r in zip(("dq", "dk", "dv"), grads, r64)})
                row[name] = errs[name]
            if "sdpa_flash" in errs:
                u = 2.0**-8
                ok = all(errs["kernelkit"][key] <= 2 * errs["sdpa_flash"][key]
                         + 8 * u * max(1.0, float(ref.abs().max()))
                         for key, ref in zip(("out", "dq", "dk", "dv"), (o64,) + tuple(r64)))
                row["rule_2x_flash"] = bool(ok)
            log("  ", {k_: (v_ if not isinstance(v_, dict) else {a: f"{c:.2e}" for a, c in v_.items()})
                       for k_, v_ in row.items()})
            rows.append(row)
            del q, k, v, g, q64, k64, v64, o64, r64
    return rows


# -------------------------------------------------------------------------------- timings
def _time_case(dev, impls, d, causal, t, b, heads, rep):
    """Forward and forward + backward of every implementation on one shape (rows of the JSON)."""
    q, k, v, g = (torch.randn(b, heads, t, d, device=dev, dtype=DTYPE) for _ in range(4))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    ff = fwd_flops(b, heads, t, t, d, causal)
    rows = []
    for name, ctx in impls.items():
        row = dict(impl=name, D=d, T=t, B=b, H=heads, causal=causal)

        def fwd():
            with torch.no_grad():
                return run_impl(name, ctx, q, k, v, causal)

        def fwd_bwd():
            run_impl(name, ctx, qg, kg, vg, causal).backward(g)

        try:
            t0 = time.perf_counter()
            fwd()
            fwd_bwd()
            if dev == "cuda":
                torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 3)
            ms_f = median_ms(fwd, dev, rep=rep)
            ms_fb = median_ms(fwd_bwd, dev, grad_to_none=[qg, kg, vg], rep=rep)
            row.update(
                fwd_ms=ms_f, fwd_tflops=ff / ms_f * 1e-9,
                fwd_bwd_ms=ms_fb, fwd_bwd_tflops=3.5 * ff / ms_fb * 1e-9,
                bwd_ms_est=ms_fb - ms_f,
                bwd_tflops_est=2.5 * ff / max(ms_fb - ms_f, 1e-9) * 1e-9,
                fwd_peak_mib=peak_mib(fwd, dev), fwd_bwd_peak_mib=peak_mib(fwd_bwd, dev),
            )
        except Exception as e:  # a backend that refuses the shape or runs out of memory
            row["skipped"] = f"{type(e).__name__}: {str(e)[:160]}"
        for x in (qg, kg, vg):
            x.grad = None
        rows.append(row)
        where = f"  D{d} T{t:6d} {'causal' if causal else 'full  '} {name:16s}"
        if "skipped" in row:
            log(f"{where} skipped: {row['skipped'][:80]}")
        else:
            log(f"{where} fwd {row['fwd_ms']:8.3f} ms {row['fwd_tflops']:6.1f} TF/s | "
                f"fwd+bwd {row['fwd_bwd_ms']:8.3f} ms {row['fwd_bwd_tflops']:6.1f} TF/s")
    return rows


def timings(dev, quick, smoke, lengths=None):
    """Every (D, causal, T) case; ``lengths`` overrides the default T list (longest first)."""
    log("== timings (bfloat16, H = 16, B * T = 65536 tokens, median ms of do_bench)")
    dims = _dims(quick, smoke)
    if smoke:
        lengths, tokens, heads = (64,), 128, 2
    else:
        lengths = lengths or ((16384, 1024) if quick else (16384, 4096, 1024, 512))
        tokens, heads = TOKENS, HEADS
    impls = sdpa_impls() if dev == "cuda" else {"kernelkit": None}
    rep = 50 if quick else 100
    rows = []
    cases = [(d, causal, t) for d in dims for causal in (False, True) for t in lengths]
    if not quick and not smoke and 65536 not in lengths:
        cases += [(128, True, 65536)]
    for d, causal, t in cases:
        rows += _time_case(dev, impls, d, causal, t, max(1, tokens // t), heads, rep)
        if dev == "cuda":
            torch.cuda.empty_cache()
    # ratios against SDPA flash in the same run
    index = {(r["impl"], r["D"], r["T"], r["causal"]): r for r in rows}
    for r in rows:
        base = index.get(("sdpa_flash", r["D"], r["T"], r["causal"]))
        if base and "skipped" not in base and "skipped" not in r:
            r["fwd_speedup_vs_flash"] = base["fwd_ms"] / r["fwd_ms"]
            r["fwd_bwd_speedup_vs_flash"] = base["fwd_bwd_ms"] / r["fwd_bwd_ms"]
    return rows


# -------------------------------------------------------------------------- sliding window
#: (name, B, H, T, D, window_size) of the window part; causal, bfloat16.
WINDOW_SHAPES = [
    ("T65536", 1, 16, 65536, 128, (1024, 0)),
    ("flash_standard_T8192", 2, 16, 8192, 128, (1024, 0)),
]
WINDOW_SMOKE = [("smoke", 1, 2, 160, 32, (40, 0))]


def visible_pairs(t, window):
    """(query, key) pairs a causal window (left, 0) leaves visible (T = S, top-left): the exact
    FLOP count's sum of min(i, left) + 1 over the rows."""
    left = window[0]
    i = torch.arange(t, dtype=torch.float64)
    return float((torch.clamp(i, max=left if left >= 0 else t) + 1).sum())


def window_mask(t, window, dev):
    """The (T, T) bool mask of a causal window (left, 0), built in row blocks (no (T, T) int
    temporaries): key j visible to query i iff i - left <= j <= i."""
    mask = torch.empty((t, t), dtype=torch.bool, device=dev)
    j = torch.arange(t, device=dev)[None, :]
    for r0 in range(0, t, 4096):
        i = torch.arange(r0, min(t, r0 + 4096), device=dev)[:, None]
        mask[r0:r0 + 4096] = (j <= i) & (j >= i - window[0])
    return mask


def _free_bytes(dev):
    return torch.cuda.mem_get_info()[0] if dev == "cuda" else float("inf")


def _masked_sdpa_bytes(name, b, h, t):
    """Rough extra memory of SDPA with a (T, T) bool mask: the mask and its bfloat16 bias; the
    math backend also holds the (B, H, T, T) scores and probabilities (float32 and bfloat16)."""
    bias = t * t * 3
    return bias + (b * h * t * t * 6 if name == "sdpa_math" else 0)


def window_impls(dev):
    """name -> (kind, context manager factory or None): kernelkit's window and dense causal
    calls, and SDPA with an explicit mask on each backend that takes one (the CPU, for
    ``--smoke``: the math backend)."""
    impls = {"kernelkit_window": ("window", None), "kernelkit_causal": ("causal", None)}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH") if dev == "cuda" else ("MATH",)
    for name in backends:
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            impls["sdpa_masked_" + name.split("_")[0].lower()] = (
                "masked", lambda b=backend: sdpa_kernel(b))
    return impls


def run_window_impl(kind, ctx, q, k, v, window, mask):
    if kind == "window":
        return sa_mod.softmax_attention(q, k, v, is_causal=True, window_size=window)
    if kind == "causal":
        return sa_mod.softmax_attention(q, k, v, is_causal=True)
    with ctx():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def window_correctness(dev, smoke):
    """Errors of kernelkit's window and of the masked SDPA backends against float64, on the same
    bfloat16 inputs."""
    log("== window correctness (bfloat16 inputs; errors against float64 torch on the same inputs)")
    b, h, t, d, window = (1, 2, 96, 32, (24, 0)) if smoke else (1, 16, 2048, 128, (256, 0))
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, g = (torch.randn(b, h, t, d, generator=gen).to(dev, DTYPE) for _ in range(4))
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    o64 = softmax_attention_naive(q64, k64, v64, is_causal=True, window_size=window)
    r64 = torch.autograd.grad(o64, (q64, k64, v64), g.double())
    mask = window_mask(t, window, dev)
    row = dict(B=b, H=h, T=t, D=d, window=list(window), causal=True)
    for name, (kind, ctx) in window_impls(dev).items():
        if kind == "causal":
            continue
        try:
            out = run_window_impl(kind, ctx, q, k, v, window, mask)
            grads = torch.autograd.grad(out, (q, k, v), g)
        except Exception as e:  # a backend that refuses the mask or the shape
            row[name] = f"skipped: {type(e).__name__}: {str(e)[:120]}"
            continue
        row[name] = dict(out=max_abs(out, o64), **{
            gn: max_abs(a, r) for gn, a, r in zip(("dq", "dk", "dv"), grads, r64)})
    log("  ", {k_: (v_ if not isinstance(v_, dict) else {a: f"{c:.2e}" for a, c in v_.items()})
               for k_, v_ in row.items()})
    return [row]


def _time_window_shape(dev, shape, b, h, t, d, window):
    """Rows of every window implementation on one shape (its tensors freed on return)."""
    q, k, v, g = (torch.randn(b, h, t, d, device=dev, dtype=DTYPE) for _ in range(4))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    mask = None
    rows = []
    for name, (kind, ctx) in window_impls(dev).items():
        row = dict(impl=name, shape=shape, B=b, H=h, T=t, D=d, causal=True,
                   window=list(window) if kind != "causal" else None)
        n_pairs = visible_pairs(t, window) if kind != "causal" else t * (t + 1) / 2
        ff = 4.0 * b * h * d * n_pairs
        if kind == "masked":
            need, free = _masked_sdpa_bytes(name, b, h, t), _free_bytes(dev)
            if need > 0.8 * free:
                what = "mask and scores" if name == "sdpa_masked_math" else "mask"
                row["skipped"] = (f"does not fit: needs ~{need / 2**30:.1f} GiB for the (T, T) "
                                  f"{what}, {free / 2**30:.1f} GiB free")
                rows.append(row)
                log(f"  {shape:22s} {name:22s} skipped: {row['skipped']}")
                continue
            if mask is None:
                mask = window_mask(t, window, dev)

        def fwd(kind=kind, ctx=ctx):
            with torch.no_grad():
                return run_window_impl(kind, ctx, q, k, v, window, mask)

        def fwd_bwd(kind=kind, ctx=ctx):
            run_window_impl(kind, ctx, qg, kg, vg, window, mask).backward(g)

        try:
            t0 = time.perf_counter()
            fwd()
            fwd_bwd()
            if dev == "cuda":
                torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 3)
            rep = 20 if t >= 32768 else 100
            ms_f = median_ms(fwd, dev, rep=rep)
            ms_fb = median_ms(fwd_bwd, dev, grad_to_none=[qg, kg, vg], rep=rep)
            row.update(fwd_ms=ms_f, fwd_tflops=ff / ms_f * 1e-9, fwd_bwd_ms=ms_fb,
                       fwd_bwd_tflops=3.5 * ff / ms_fb * 1e-9,
                       fwd_peak_mib=peak_mib(fwd, dev), fwd_bwd_peak_mib=peak_mib(fwd_bwd, dev))
        except Exception as e:  # a backend that refuses the mask or runs out of memory
            row["skipped"] = f"{type(e).__name__}: {str(e)[:160]}"
        for x in (qg, kg, vg):
            x.grad = None
        rows.append(row)
        if "skipped" in row:
            log(f"  {shape:22s} {name:22s} skipped: {row['skipped'][:80]}")
        else:
            log(f"  {shape:22s} {name:22s} fwd {row['fwd_ms']:9.3f} ms "
                f"{row['fwd_tflops']:6.1f} TF/s | fwd+bwd {row['fwd_bwd_ms']:9.3f} ms "
                f"{row['fwd_bwd_tflops']:6.1f} TF/s")
    return rows


def window_timings(dev, smoke):
    """Forward and forward + backward of each window implementation at each window shape."""
    log("== window timings (causal, bfloat16, median ms of do_bench)")
    rows = []
    for shape in (WINDOW_SMOKE if smoke else WINDOW_SHAPES):
        rows += _time_window_shape(dev, *shape)
        if dev == "cuda":
            torch.cuda.empty_cache()
    index = {(r["impl"], r["shape"]): r for r in rows}
    for r in rows:  # speedups of the window over each other implementation, same shape
        ours = index.get(("kernelkit_window", r["shape"]))
        if r["impl"] != "kernelkit_window" and ours and "fwd_ms" in ours and "fwd_ms" in r:
            r["window_fwd_speedup"] = r["fwd_ms"] / ours["fwd_ms"]
            r["window_fwd_bwd_speedup"] = r["fwd_bwd_ms"] / ours["fwd_bwd_ms"]
    return rows


def run_window(smoke):
    """The sliding-window part (``--window``): correctness, then timings; the JSON's dict."""
    dev = check_mode("benchmarks/attention_softmax.py --window", smoke)
    device = device_facts(dev)
    t_start = time.time()
    ver = versions()
    log(f"device {device['name']}; torch {ver['torch']}; triton {ver['triton']}")
    correct = window_correctness(dev, smoke)
    rows = window_timings(dev, smoke)
    return dict(
        benchmark="attention_softmax_window", date=now(), device=device, versions=ver,
        smoke=smoke, dtype="bfloat16", causal=True,
        flops="fwd 4 B H D x (visible (query, key) pairs); fwd+bwd 3.5x fwd",
        correctness=correct, timings=rows, autotune=autotune_choices(),
        wall_s=round(time.time() - t_start, 1),
    )


def window_summary(rows):
    lines = ["", "== window summary (causal, bf16): ms fwd | fwd+bwd; window speedup over it"]
    for r in rows:
        if "fwd_ms" not in r:
            lines.append(f"{r['shape']:22s} {r['impl']:22s} {r.get('skipped', '')[:70]}")
            continue
        speed = ""
        if "window_fwd_speedup" in r:
            speed = f"   window {r['window_fwd_speedup']:.1f}x | {r['window_fwd_bwd_speedup']:.1f}x"
        lines.append(f"{r['shape']:22s} {r['impl']:22s} {r['fwd_ms']:9.3f} | {r['fwd_bwd_ms']:9.3f}"
                     + speed)
    return "\n".join(lines)


def autotune_choices():
    out = {}
    for mod, name in ((sa_mod, "_attn_fwd_kernel"), (sa_bwd, "_attn_bwd_dkdv_kernel"),
                      (sa_bwd, "_attn_bwd_dq_kernel")):
        kern = getattr(mod, name)
        cache = getattr(kern, "cache", {}) or {}
        out[name] = {str(k): str(v) for k, v in cache.items()}
    return out


def anchors():
    found = {}
    for base in (os.path.join(ROOT, "shared", "anchors"), os.path.join(ROOT, "..", "shared", "anchors")):
        for path in sorted(glob.glob(os.path.join(base, "*.json"))):
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            found[os.path.basename(path)] = {k: v for k, v in data.items()
                                             if k.startswith("sdpa") or k in ("gpu", "torch", "triton")}
        if found:
            break
    return found


def summary(rows, correct):
    lines = ["", "== summary (bf16, H 16, tokens 65536): TFLOP/s, fwd | fwd+bwd; speedup vs SDPA flash"]
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    keys = sorted({(r["D"], r["causal"], r["T"]) for r in rows})
    head = f"{'D':>4} {'mask':>6} {'T':>6} | " + " | ".join(f"{i:>19s}" for i in impls) + " | ours/flash"
    lines.append(head)
    idx = {(r["impl"], r["D"], r["causal"], r["T"]): r for r in rows}
    for (d, causal, t) in keys:
        cells = []
        for i in impls:
            r = idx.get((i, d, causal, t))
            if r is None or "skipped" in r:
                cells.append(f"{'-':>19s}")
            else:
                cells.append(f"{r['fwd_tflops']:8.1f} |{r['fwd_bwd_tflops']:8.1f}  ")
        ours = idx.get(("kernelkit", d, causal, t), {})
        ratio = ""
        if "fwd_speedup_vs_flash" in ours:
            ratio = f"{ours['fwd_speedup_vs_flash']:.2f}x | {ours['fwd_bwd_speedup_vs_flash']:.2f}x"
        lines.append(f"{d:>4} {'causal' if causal else 'full':>6} {t:>6} | " + " | ".join(cells)
                     + f" | {ratio}")
    verdicts = [r.get("rule_2x_flash") for r in correct if "rule_2x_flash" in r]
    if verdicts:
        lines.append(f"correctness (ours <= 2x SDPA-flash error + floor): "
                     f"{sum(verdicts)}/{len(verdicts)} cases pass")
    head_row = idx.get(("kernelkit", 128, False, 16384))
    if head_row and "fwd_tflops" in head_row:
        lines.append(f"headline D128 T16384 full fwd: {head_row['fwd_tflops']:.1f} TFLOP/s "
                     f"(target >= {TARGET_TFLOPS:.0f})")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="D 128, T 16384 and 1024 only (about a minute)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter (code paths)")
    ap.add_argument("--window", action="store_true",
                    help="the sliding-window part only (causal, window 1024; module docstring)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    if args.window:
        result = run_window(args.smoke)
        out = args.out or default_out("attention_softmax_window", result["device"]["name"])
        write_json_atomic(out, result)
        log(f"wrote {out} ({result['wall_s']} s)")
        log(window_summary(result["timings"]))
        return
    result = run(args.quick, args.smoke)
    out = args.out or default_out("attention_softmax", result["device"]["name"])
    write_json_atomic(out, result)
    log(f"wrote {out} ({result['wall_s']} s)")
    log(summary(result["timings"], result["correctness"]))


def run(quick, smoke, lengths=None):
    """Tuning, correctness and timings in one process; the result dict of the JSON file."""
    dev = check_mode("benchmarks/attention_softmax.py", smoke)
    device = device_facts(dev)
    t_start = time.time()
    ver = versions()
    log(f"device {device['name']}; torch {ver['torch']}; triton {ver['triton']}")
    tuning = tune(dev, quick, smoke)
    correct = correctness(dev, quick, smoke)
    rows = timings(dev, quick, smoke, lengths)
    return dict(
        benchmark="attention_softmax", date=now(), device=device, versions=ver,
        quick=quick, smoke=smoke, dtype="bfloat16", heads=HEADS, tokens=TOKENS if not smoke else None,
        flops="fwd 4 B H T S D (causal: half); fwd+bwd 3.5x fwd; bwd_est = fwd_bwd - fwd",
        tuning=tuning, correctness=correct, timings=rows, autotune=autotune_choices(), anchors=anchors(),
        wall_s=round(time.time() - t_start, 1),
    )


if __name__ == "__main__":
    main()
