"""Gated / decayed linear attention (issue 42): kernelkit against flash-linear-attention.

    python benchmarks/attention_gated.py [--out PATH] [--smoke]

flash-linear-attention (``fla``) is the baseline: ``chunk_simple_gla`` (one log-gate per head
and step) and ``chunk_retention`` (RetNet's fixed decays). The GPU image has no registry
access: install its wheels first from a directory carried with the checkout, e.g.
``pip download --no-deps fla-core==0.6.0 einops -d vendor_wheels`` here, then on the GPU
machine ``pip install --no-deps vendor_wheels/*.whl``. Without fla the baseline rows say so.

Parts, one JSON:

* correctness (float32 and bfloat16, B1 H4 T1000 D64): kernelkit's Triton forward
  (``backend="triton"``), its PyTorch path and fla against the float64 reference
  (:mod:`kernelkit_math.gated_attention`) on the same rounded inputs: max error over max |ref|;
* timings (bfloat16, scale 1 / sqrt(D)): forward and forward + backward, median ms of
  ``do_bench``, at B1 H16 T16384 D128 (issue 42's floor shape) and B8 H16 T2048 D128, for the
  scalar gate and for RetNet's decays.

``--smoke`` runs tiny shapes on the CPU under ``TRITON_INTERPRET=1`` (timings meaningless). A
short table is printed last.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import torch
from _common import (check_mode, default_out, device_facts, log, median_ms, now, versions,
                     write_json_atomic)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernelkit.attention import gated_linear_attention  # noqa: E402
from kernelkit_math import gated_attention as ref  # noqa: E402

SHAPES = [dict(B=1, H=16, T=16384, D=128), dict(B=8, H=16, T=2048, D=128)]
SMOKE_SHAPES = [dict(B=1, H=2, T=40, D=16)]


def _fla():
    """fla's (chunk_simple_gla, chunk_retention), or the reason they are missing."""
    try:
        from fla.ops.retention import chunk_retention
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        return None, f"{type(exc).__name__}: {exc}"
    return (chunk_simple_gla, chunk_retention), None


def retnet_decays(H):
    """RetNet's per-head decays 1 - 2^(-5 - h)."""
    return [1.0 - 2.0 ** (-5 - h) for h in range(H)]


def inputs(shape, dtype, dev, seed=0):
    """(q, k, v) (B, T, H, D) in ``dtype``, log-gates (B, T, H) float32 (Mamba2-like: minus a
    softplus, mostly in (-1, 0)); q and k unit rows over sqrt(D) so outputs stay O(1)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    B, H, T, D = shape["B"], shape["H"], shape["T"], shape["D"]
    q, k, v = (torch.randn(B, T, H, D, device=dev, generator=g) for _ in range(3))
    q, k = (x / x.norm(dim=-1, keepdim=True) for x in (q, k))
    gate = -torch.nn.functional.softplus(torch.randn(B, T, H, device=dev, generator=g) - 2.0)
    return [x.to(dtype) for x in (q, k, v)] + [gate]


def methods(fla, scale, mode):
    """{name: fn(q, k, v, g)} of the methods compared, in layout (B, T, H, D)."""
    out = {}
    if mode == "gate":
        out["kernelkit_triton"] = lambda q, k, v, g: gated_linear_attention(
            q, k, v, g, scale=scale, layout="bthd", backend="triton")
        out["kernelkit_torch"] = lambda q, k, v, g: gated_linear_attention(
            q, k, v, g, scale=scale, layout="bthd", backend="torch")
        if fla is not None:
            out["fla_chunk_simple_gla"] = lambda q, k, v, g: fla[0](q, k, v, g=g, scale=scale)[0]
    else:
        def decays(q):
            return retnet_decays(q.shape[2])

        out["kernelkit_triton"] = lambda q, k, v, g: gated_linear_attention(
            q, k, v, decay=decays(q), scale=scale, layout="bthd", backend="triton")
        out["kernelkit_torch"] = lambda q, k, v, g: gated_linear_attention(
            q, k, v, decay=decays(q), scale=scale, layout="bthd", backend="torch")
        if fla is not None:
            out["fla_chunk_retention"] = lambda q, k, v, g: fla[1](q, k, v, scale=scale)[0]
    return out


def correctness(fla, dev, smoke):
    shape = dict(B=1, H=2, T=40, D=16) if smoke else dict(B=1, H=4, T=1000, D=64)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v, g = inputs(shape, dtype, dev, seed=1)
        scale = 1.0 / math.sqrt(shape["D"])
        qn, kn, vn = (x.double().cpu().numpy().transpose(0, 2, 1, 3) for x in (q, k, v))
        gn = g.double().cpu().numpy().transpose(0, 2, 1)
        for mode in ("gate", "retention"):
            want = ref.gated_linear_attention(
                qn, kn, vn, gn if mode == "gate" else None, scale=scale,
                decay=None if mode == "gate" else retnet_decays(shape["H"]))
            for name, fn in methods(fla, scale, mode).items():
                try:
                    got = fn(q, k, v, g).double().cpu().numpy().transpose(0, 2, 1, 3)
                    err = float(np.abs(got - want).max() / np.abs(want).max())
                except Exception as exc:  # noqa: BLE001 - recorded per method
                    err = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(dict(dtype=str(dtype), mode=mode, method=name, max_err_rel=err))
                log(f"  correctness {dtype} {mode} {name}: {err}")
    return rows


def timings(fla, dev, smoke):
    rows = []
    for shape in SMOKE_SHAPES if smoke else SHAPES:
        q, k, v, g = inputs(shape, torch.bfloat16, dev)
        scale = 1.0 / math.sqrt(shape["D"])
        for mode in ("gate", "retention"):
            for name, fn in methods(fla, scale, mode).items():
                row = dict(shape=shape, mode=mode, method=name)
                try:
                    row["fwd_ms"] = median_ms(lambda: fn(q, k, v, g), dev)
                    qs, ks, vs = (x.detach().requires_grad_(True) for x in (q, k, v))
                    gs = g.detach().requires_grad_(mode == "gate")

                    def step():
                        fn(qs, ks, vs, gs).float().sum().backward()

                    row["fwd_bwd_ms"] = median_ms(step, dev, grad_to_none=[qs, ks, vs, gs])
                except Exception as exc:  # noqa: BLE001 - recorded per method
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(row)
                log(f"  {shape} {mode} {name}: {row}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/...)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    args = ap.parse_args(argv)
    dev = check_mode("attention_gated.py", args.smoke)
    facts = device_facts(dev)
    fla, fla_missing = _fla()
    result = dict(benchmark="attention_gated", date=now(), device=facts, versions=versions(),
                  smoke=args.smoke, fla=fla_missing or "imported")
    log(f"fla: {result['fla']}")
    result["correctness"] = correctness(fla, dev, args.smoke)
    result["timings"] = timings(fla, dev, args.smoke)
    out = args.out or default_out("attention-gated", facts["name"])
    write_json_atomic(out, result)
    log(f"\nwrote {out}")
    log(f"{'shape':<24} {'mode':<10} {'method':<22} {'fwd ms':>9} {'fwd+bwd ms':>11}")
    for r in result["timings"]:
        s = r["shape"]
        tag = f"B{s['B']} H{s['H']} T{s['T']} D{s['D']}"
        fwd = f"{r['fwd_ms']:.3f}" if "fwd_ms" in r else "-"
        both = f"{r['fwd_bwd_ms']:.3f}" if "fwd_bwd_ms" in r else r.get("error", "-")[:40]
        log(f"{tag:<24} {r['mode']:<10} {r['method']:<22} {fwd:>9} {both:>11}")


if __name__ == "__main__":
    main()
