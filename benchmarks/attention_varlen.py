"""Benchmark: softmax attention on packed variable-length batches (``cu_seqlens``) against dense calls.

Run on the GPU machine (a few minutes)::

    python benchmarks/attention_varlen.py [--out PATH] [--dims 64,128] [--seed 0]

All in one process, bfloat16, H = 16, 32768 packed tokens:

1. correctness: on a small packing (lengths 0, 1, odd, up to 1000; 2071 tokens), the varlen
   output and dq, dk, dv against a float64 per-sequence loop of the plain-PyTorch twin, with the
   FlashAttention rule (ours <= 2x the error of the same loop in bfloat16 + a floor of a few
   units in the last place); and on the timed packing, the varlen output against a
   per-sequence loop of kernelkit's dense Triton call (max abs difference);
2. timings (``triton.testing.do_bench``, median), forward and forward + backward, causal and
   not, per head dim:

   - ``varlen_random``: 8 sequences of random lengths summing to 32768 (seeded);
   - ``loop_random``: the same sequences as 8 dense kernelkit calls (the alternative a user
     has without varlen);
   - ``varlen_equal``: 8 sequences of 4096 as one varlen call;
   - ``dense_equal``: the same tokens as one dense call, B = 8, T = 4096: **the floor of
     issue 20** compares ``varlen_equal`` with it (same work, ratio <= 1.1);
   - ``dense_one``: one dense call of B = 1, T = 32768 (8x the work of ``dense_equal``).

   TFLOP/s count 4 H D sum(L_i^2) forward FLOPs (half when causal), 3.5x that for
   forward + backward, so ``varlen_random`` and ``dense_equal`` compare as throughput.

The JSON goes to ``--out`` (default ``benchmarks/results/attention_varlen-<gpu>-<date>.json``,
written atomically); a short table is printed last. ``--smoke`` runs tiny shapes on the CPU under
the Triton interpreter (code paths only).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _common import (check_mode, default_out, device_facts, log, median_ms, now, peak_mib,
                     versions, write_json_atomic)

from kernelkit.attention import softmax_attention  # noqa: E402
from kernelkit_gpu.attention.naive import softmax_attention_naive  # noqa: E402

HEADS = 16
TOKENS = 32768
N_SEQS = 8
DTYPE = torch.bfloat16
UNIT_BF16 = 2.0 ** -8


def random_lengths(total, n, rng):
    """n lengths >= 1 summing to total: sorted distinct cut points."""
    cuts = np.sort(rng.choice(np.arange(1, total), size=n - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [total]])).astype(int).tolist()


def cu_of(lengths, dev):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=dev)


def bounds(lengths):
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    return list(zip(cu[:-1].tolist(), cu[1:].tolist()))


def dense_view(x, s, e):
    return x[s:e].transpose(0, 1).unsqueeze(0)


def loop(fn, q, k, v, lengths, causal):
    """Per-sequence loop of a dense attention ``fn`` over packed tensors -> (total, H, Dv)."""
    outs = [fn(dense_view(q, s, e), dense_view(k, s, e), dense_view(v, s, e), causal)[0]
            .transpose(0, 1) for s, e in bounds(lengths)]
    return torch.cat(outs, 0)


def ours_dense(q, k, v, causal):
    return softmax_attention(q, k, v, is_causal=causal)


def naive_dense(q, k, v, causal):
    return softmax_attention_naive(q, k, v, is_causal=causal)


def fwd_flops(lengths, h, d, causal):
    return sum(4.0 * h * d * L * L * (0.5 if causal else 1.0) for L in lengths)


def max_err(a, b):
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


# ----------------------------------------------------------------------------- correctness
def correctness(dev, dims, smoke, rng):
    log("== correctness (bfloat16; FlashAttention rule against a float64 per-sequence loop)")
    lengths = [0, 1, 37, 0, 5] if smoke else [0, 1, 37, 0, 263, 5, 130, 1000, 0, 511, 121]
    total = sum(lengths)
    heads = 2 if smoke else HEADS
    rows = []
    for d in dims:
        for causal in (False, True):
            gen = torch.Generator(device="cpu").manual_seed(int(rng.integers(1 << 31)))
            q, k, v, g = (torch.randn(total, heads, d, generator=gen).to(dev, DTYPE)
                          for _ in range(4))
            leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
            cu = cu_of(lengths, dev)
            out = softmax_attention(*leaves, cu_seqlens=cu, is_causal=causal)
            grads = torch.autograd.grad(out, leaves, g)
            eager = [x.clone().requires_grad_(True) for x in (q, k, v)]
            n_out = loop(naive_dense, *eager, lengths, causal)
            n_grads = torch.autograd.grad(n_out, eager, g)
            ref = [x.double().requires_grad_(True) for x in (q, k, v)]
            r_out = loop(naive_dense, *ref, lengths, causal)
            r_grads = torch.autograd.grad(r_out, ref, g.double())
            row = dict(D=d, causal=causal, lengths=lengths, ok=True)
            for name, a, n, r, floor in [("out", out, n_out, r_out, 2.0)] + [
                    (f"d{c}", a, n, r, 8.0) for c, a, n, r in zip("qkv", grads, n_grads, r_grads)]:
                e_ours, e_eager = max_err(a, r), max_err(n, r)
                scale = max(1.0, float(r.abs().max()))
                bound = 2.0 * e_eager + floor * UNIT_BF16 * scale
                row[f"{name}_err"], row[f"{name}_eager_err"] = e_ours, e_eager
                row["ok"] &= bool(e_ours <= bound and torch.isfinite(a).all())
            rows.append(row)
            log(f"  D{d} {'causal' if causal else 'full  '} out err {row['out_err']:.2e} "
                f"(eager {row['out_eager_err']:.2e}) dq {row['dq_err']:.2e} "
                f"(eager {row['dq_eager_err']:.2e}) {'ok' if row['ok'] else 'FAIL'}")
    return rows


# ---------------------------------------------------------------------------------- timings
def _time(fn, dev, leaves, rep):
    fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    return median_ms(fn, dev, rep=rep, grad_to_none=leaves)


def timings(dev, dims, smoke, rng):
    tokens, n, heads = (64, 4, 2) if smoke else (TOKENS, N_SEQS, HEADS)
    rand = random_lengths(tokens, n, rng)
    equal = [tokens // n] * n
    log(f"== timings (bfloat16, H = {heads}, {tokens} tokens; random lengths {rand})")
    rep = 1 if smoke else 100
    rows = []
    for d in dims:
        for causal in (False, True):
            gen = torch.Generator(device="cpu").manual_seed(1)
            q, k, v, g = (torch.randn(tokens, heads, d, generator=gen).to(dev, DTYPE)
                          for _ in range(4))
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
            cu_r, cu_e = cu_of(rand, dev), cu_of(equal, dev)
            b8 = [x.view(n, tokens // n, heads, d).transpose(1, 2) for x in (q, k, v, g)]
            b8g = [x.clone().requires_grad_(True) for x in b8[:3]]
            one = [x.unsqueeze(0).transpose(1, 2) for x in (q, k, v, g)]
            oneg = [x.clone().requires_grad_(True) for x in one[:3]]
            cases = {
                "varlen_random": (rand, lambda a, b, c: softmax_attention(
                    a, b, c, cu_seqlens=cu_r, is_causal=causal), (qg, kg, vg), g),
                "loop_random": (rand, lambda a, b, c: loop(ours_dense, a, b, c, rand, causal),
                                (qg, kg, vg), g),
                "varlen_equal": (equal, lambda a, b, c: softmax_attention(
                    a, b, c, cu_seqlens=cu_e, is_causal=causal), (qg, kg, vg), g),
                "dense_equal": (equal, lambda a, b, c: softmax_attention(a, b, c, is_causal=causal),
                                tuple(b8g), b8[3]),
                "dense_one": ([tokens], lambda a, b, c: softmax_attention(
                    a, b, c, is_causal=causal), tuple(oneg), one[3]),
            }
            if not smoke:  # agreement on the timed packing: varlen vs the dense loop
                with torch.no_grad():
                    diff = max_err(softmax_attention(q, k, v, cu_seqlens=cu_r, is_causal=causal),
                                   loop(ours_dense, q, k, v, rand, causal))
            else:
                diff = None
            for name, (lens, fn, leaves, grad) in cases.items():
                ff = fwd_flops(lens, heads, d, causal)
                detached = tuple(x.detach() for x in leaves)

                def fwd():
                    with torch.no_grad():
                        return fn(*detached)

                def fwd_bwd():
                    fn(*leaves).backward(grad)

                ms_f = _time(fwd, dev, None, rep)
                ms_fb = _time(fwd_bwd, dev, list(leaves), rep)
                rows.append(dict(impl=name, D=d, causal=causal, lengths=lens, fwd_ms=ms_f,
                                 fwd_tflops=ff / ms_f * 1e-9, fwd_bwd_ms=ms_fb,
                                 fwd_bwd_tflops=3.5 * ff / ms_fb * 1e-9,
                                 fwd_peak_mib=peak_mib(fwd, dev),
                                 max_abs_diff_vs_loop=diff if name == "varlen_random" else None))
                for x in leaves:
                    x.grad = None
                log(f"  D{d} {'causal' if causal else 'full  '} {name:14s} fwd {ms_f:8.3f} ms "
                    f"{rows[-1]['fwd_tflops']:6.1f} TF/s | fwd+bwd {ms_fb:8.3f} ms "
                    f"{rows[-1]['fwd_bwd_tflops']:6.1f} TF/s")
            if dev == "cuda":
                torch.cuda.empty_cache()
    index = {(r["impl"], r["D"], r["causal"]): r for r in rows}
    for r in rows:
        base = index[("dense_equal", r["D"], r["causal"])]
        r["fwd_ratio_vs_dense_equal"] = r["fwd_ms"] / base["fwd_ms"]
        r["fwd_bwd_ratio_vs_dense_equal"] = r["fwd_bwd_ms"] / base["fwd_bwd_ms"]
    return rows


def summary(rows, correct):
    lines = ["", f"correctness: {sum(r['ok'] for r in correct)}/{len(correct)} cases within the "
                 "FlashAttention rule",
             "floor (issue 20): varlen_equal / dense_equal <= 1.1 (same tokens, same work)",
             f"{'D':>4} {'mask':6} {'impl':14} {'fwd ms':>9} {'TF/s':>6} {'x dense':>8} "
             f"{'f+b ms':>9} {'TF/s':>6} {'x dense':>8}"]
    for r in rows:
        lines.append(f"{r['D']:>4} {'causal' if r['causal'] else 'full':6} {r['impl']:14} "
                     f"{r['fwd_ms']:9.3f} {r['fwd_tflops']:6.1f} {r['fwd_ratio_vs_dense_equal']:8.3f} "
                     f"{r['fwd_bwd_ms']:9.3f} {r['fwd_bwd_tflops']:6.1f} "
                     f"{r['fwd_bwd_ratio_vs_dense_equal']:8.3f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="64,128", help="head dims, comma-separated")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random lengths and data")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    dev = check_mode("benchmarks/attention_varlen.py", args.smoke)
    dims = [int(x) for x in args.dims.split(",")]
    if args.smoke:
        dims = [16]
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    device, ver = device_facts(dev), versions()
    log(f"device {device['name']}; torch {ver['torch']}; triton {ver['triton']}")
    correct = correctness(dev, dims, args.smoke, rng)
    rows = timings(dev, dims, args.smoke, rng)
    result = dict(benchmark="attention_varlen", date=now(), device=device, versions=ver,
                  smoke=args.smoke, dtype="bfloat16", heads=HEADS, seed=args.seed,
                  flops="fwd 4 H D sum(L^2) (causal: half); fwd+bwd 3.5x fwd",
                  correctness=correct, timings=rows, wall_s=round(time.time() - t0, 1))
    out = args.out or default_out("attention_varlen", device["name"])
    write_json_atomic(out, result)
    log(f"wrote {out} ({result['wall_s']} s)")
    log(summary(rows, correct))
    if not all(r["ok"] for r in correct):
        raise SystemExit("correctness check failed (see the table)")


if __name__ == "__main__":
    main()
