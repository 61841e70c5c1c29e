"""Benchmark: local + summary attention (Triton forward) against kernelkit's softmax attention and
torch SDPA, bfloat16, T = 16384, D = 64 (issue 20: the forward must take <= 0.5x softmax's).

Run on the GPU machine (about a minute)::

    PYTHONPATH=. python benchmarks/attention_local.py [--out PATH]

In one process, so that every ratio compares numbers of the same run:

1. correctness: the Triton forward against the float64 twin
   (``kernelkit_gpu.attention.local_naive.local_attention_naive``) on the same bfloat16 inputs,
   T in {1000, 4096}, causal and not, each timed variant's (block, window); max error relative
   to max(1, max |reference|), verdict at 8 bfloat16 units (the tests' tolerance); and, when
   ``tests/data/real_heads.npz`` exists, the method's output error against exact float64
   softmax on those real heads computed by the bfloat16 Triton forward (the float64 reference
   gives 0.246 at block 32, window 1);
2. timings (``triton.testing.do_bench``, median, first call compiled in the warm-up): forward
   only, B = 4, H = 16, T = 16384, D = 64, bfloat16, causal and not: kernelkit softmax, SDPA
   (default backend choice), and local attention for (block, window) in ``--variants``, with
   the summaries pass (``local_summaries``, a Triton kernel) timed alone; ratio local /
   kernelkit softmax (the floor: <= 0.5).

The JSON goes to ``--out`` (default ``benchmarks/results/attention_local-<gpu>-<date>.json``),
written atomically; a short table is printed last. ``--smoke`` runs tiny shapes on the CPU under
the Triton interpreter (code paths only, no meaningful times).
"""

from __future__ import annotations

import argparse
import importlib
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from _common import (ROOT, check_mode, default_out, device_facts, log, median_ms, now, peak_mib,
                     versions, write_json_atomic)

from kernelkit_gpu.attention.local_naive import local_attention_naive  # noqa: E402
from kernelkit_math.attention_local import keys_per_row  # noqa: E402

la = importlib.import_module("kernelkit_gpu.attention.local")
sa = importlib.import_module("kernelkit_gpu.attention.softmax")

DTYPE = torch.bfloat16
TOL_BF16 = 8 * 2.0**-8  # as tests/test_gpu_local_attention.py
FLOOR = 0.5  # issue 20: local forward time <= 0.5 x kernelkit softmax forward time
REAL_HEADS = os.path.join(ROOT, "tests", "data", "real_heads.npz")


def _variants(text):
    out = []
    for item in text.split(","):
        block, _, window = item.partition(":")
        out.append((int(block), int(window or 1)))
    return out


def _rel_max(got, ref):
    ref = ref.double()
    size = max(1.0, float(ref.abs().max()))
    return float((got.double() - ref).abs().max()) / size


def correctness(dev, variants, smoke):
    log("== correctness (bfloat16 inputs; float64 twin on the same inputs)")
    gen = torch.Generator(device="cpu").manual_seed(0)
    rows = []
    lengths = (100,) if smoke else (1000, 4096)
    for t in lengths:
        for causal in (False, True):
            q, k, v = (torch.randn(1, 2, t, 64, generator=gen).to(dev, DTYPE) for _ in range(3))
            for block, window in variants:
                out = la.local_attention(q, k, v, block=block, window=window, is_causal=causal)
                ref = local_attention_naive(q.double(), k.double(), v.double(), block=block,
                                            window=window, is_causal=causal)
                err = _rel_max(out, ref)
                row = dict(T=t, causal=causal, block=block, window=window, rel_max_err=err,
                           finite=bool(torch.isfinite(out).all()),
                           ok=bool(err <= TOL_BF16 and torch.isfinite(out).all()))
                log("  ", row)
                rows.append(row)
    return rows


def real_heads(dev):
    """The method's error against exact softmax on the real heads, through the bf16 kernel."""
    if not os.path.exists(REAL_HEADS):
        log("== real heads: tests/data/real_heads.npz not found, skipped")
        return None
    from kernelkit_math.attention import softmax_attention

    data = np.load(REAL_HEADS)
    q, k, v = (data[n].astype(np.float64) for n in ("q", "k", "v"))
    scale = float(data["scale"])
    ref = softmax_attention(q, k, v, scale=scale)
    norm = np.linalg.norm(ref, axis=(-2, -1))
    rows = {}
    for dtype in (torch.float32, torch.bfloat16):
        qt, kt, vt = (torch.from_numpy(x).to(dev, dtype) for x in (q, k, v))
        out = la.local_attention(qt, kt, vt, block=32, window=1, scale=scale)
        err = np.linalg.norm(out.double().cpu().numpy() - ref, axis=(-2, -1)) / norm
        rows[str(dtype).replace("torch.", "")] = dict(mean=float(err.mean()),
                                                     max=float(err.max()))
    result = dict(block=32, window=1, keys_per_row=keys_per_row(q.shape[-2], 32, 1),
                  output_rel_error=rows)
    log("== real heads (all-MiniLM-L6-v2, 2 x 12 heads, T = 512):", result)
    return result


def timings(dev, variants, smoke, b, heads, t, d):
    log(f"== timings (forward, bfloat16, B {b} H {heads} T {t} D {d})")
    gen = torch.Generator(device="cpu").manual_seed(1)
    q, k, v = (torch.randn(b, heads, t, d, generator=gen).to(dev, DTYPE) for _ in range(3))
    rows = []
    for causal in (False, True):
        impls = {
            "kernelkit_softmax": lambda c=causal: sa.softmax_attention(q, k, v, is_causal=c),
            "sdpa": lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
        }
        for block, window in variants:
            impls[f"local:{block}:{window}"] = (
                lambda c=causal, bl=block, w=window: la.local_attention(
                    q, k, v, block=bl, window=w, is_causal=c))
            impls[f"summaries:{block}"] = (
                lambda bl=block: la.local_summaries(q, k, v, block=bl, scale=d ** -0.5))
        base = None
        for name, fn in impls.items():
            if smoke and name == "sdpa":
                continue
            ms = median_ms(fn, dev)
            base = ms if name == "kernelkit_softmax" else base
            row = dict(method=name, causal=causal, T=t, B=b, H=heads, D=d, time_ms=ms,
                       ratio_to_softmax=ms / base, peak_MiB=peak_mib(fn, dev))
            if name.startswith("local:"):
                block, window = (int(x) for x in name.split(":")[1:])
                row["keys_per_row"] = keys_per_row(t, block, window, causal)
                row["meets_floor"] = bool(ms <= FLOOR * base)
            log("  ", row)
            rows.append(row)
    return rows


def summary(rows, correct, heads_result):
    lines = ["", "method                 causal   time ms   x softmax   keys/row",
             "-" * 66]
    for r in rows:
        lines.append(f"{r['method']:<22} {str(r['causal']):<7} {r['time_ms']:>8.3f}   "
                     f"{r['ratio_to_softmax']:>9.3f}   {r.get('keys_per_row', ''):>8}")
    bad = [c for c in correct if not c["ok"]]
    lines.append(f"correctness: {len(correct) - len(bad)}/{len(correct)} within "
                 f"{TOL_BF16:.3g} of the float64 twin")
    if heads_result:
        e = heads_result["output_rel_error"]
        lines.append("real heads, local:32:1 output error vs softmax: " + ", ".join(
            f"{k} mean {v['mean']:.3f} max {v['max']:.3f}" for k, v in e.items()))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="64:1,128:1,32:1,64:2",
                    help="comma-separated block:window pairs (default %(default)s)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU interpreter (code paths)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    dev = check_mode("benchmarks/attention_local.py", args.smoke)
    variants = _variants(args.variants)
    device = device_facts(dev)
    ver = versions()
    log(f"device {device['name']}; torch {ver['torch']}; triton {ver['triton']}")
    t_start = time.time()
    correct = correctness(dev, variants, args.smoke)
    heads_result = real_heads(dev)
    shape = (1, 2, 256, 32) if args.smoke else (4, 16, 16384, 64)
    rows = timings(dev, variants, args.smoke, *shape)
    result = dict(benchmark="attention_local", date=now(), device=device, versions=ver,
                  smoke=args.smoke, dtype="bfloat16", floor=FLOOR, correctness=correct,
                  real_heads=heads_result, timings=rows, wall_s=round(time.time() - t_start, 1))
    out = args.out or default_out("attention_local", device["name"])
    if args.out is None and os.environ.get("OUT"):  # the device machine's result folder
        out = os.path.join(os.environ["OUT"], os.path.basename(out))
    write_json_atomic(out, result)
    log(f"wrote {out} ({result['wall_s']} s)")
    log(summary(rows, correct, heads_result))


if __name__ == "__main__":
    main()
