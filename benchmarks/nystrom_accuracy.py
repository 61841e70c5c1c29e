"""Accuracy of Nyström attention vs FAVOR+ at equal feature budget M, diffuse to peaky heads.

Runs :func:`kernelkit.attention.compare` (float64 metrics, no timing) on synthetic heads of three
kinds, each at several temperatures (the spread of the scaled scores):

- ``iid``: q, k with i.i.d. N(0, temperature) entries
  (``kernelkit.attention.comparison.qkv.synthetic_qkv``);
- ``clustered``: keys in 16 clusters, each query near the centre of a random cluster (tokens of a
  few kinds, a query looking for one kind);
- ``offset``: queries share a common direction (every query looks for the same feature, as heads
  with an attention sink or a positional bias), keys i.i.d.

For each case and M it prints the output relative error (mean ± std over seeds) of
``favor+:M``, ``favor+orth:M`` and ``nystrom:M``, the SVD floor of rank M and the uniform
baseline, and writes everything to ``benchmarks/results/nystrom-accuracy.json``.

Run on the CPU (about two minutes on 2 cores): ``python benchmarks/nystrom_accuracy.py``
(``--quick`` for a smaller grid).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from kernelkit.attention.comparison import compare  # noqa: E402
from kernelkit.attention.comparison.qkv import synthetic_qkv  # noqa: E402
from kernelkit._util.atomic import write_text_atomic  # noqa: E402
from kernelkit.attention.comparison.report import _encode  # noqa: E402


def clustered_qkv(heads, T, d, temperature, seed, clusters=16, spread=0.3):
    """Keys in ``clusters`` groups; each query close to the centre of one group."""
    rng = np.random.default_rng(seed)
    sd = np.sqrt(temperature)
    centres = rng.standard_normal((heads, clusters, d))
    pick = lambda: np.take_along_axis(  # noqa: E731
        centres, rng.integers(clusters, size=(heads, T))[..., None], axis=1)
    k = sd * (pick() + spread * rng.standard_normal((heads, T, d)))
    q = sd * (pick() + spread * rng.standard_normal((heads, T, d)))
    return q[None], k[None], rng.standard_normal((1, heads, T, d))


def offset_qkv(heads, T, d, temperature, seed, offset=3.0):
    """i.i.d. keys; queries i.i.d. plus one shared direction of norm ``offset`` D^(1/4)."""
    rng = np.random.default_rng(seed)
    sd = np.sqrt(temperature)
    mu = rng.standard_normal((heads, 1, d))
    mu *= offset * d**0.25 / np.linalg.norm(mu, axis=-1, keepdims=True)
    q = sd * (rng.standard_normal((heads, T, d)) + mu)
    k = sd * rng.standard_normal((heads, T, d))
    return q[None], k[None], rng.standard_normal((1, heads, T, d))


def iid_qkv(heads, T, d, temperature, seed):
    q, k, v = synthetic_qkv(1, heads, T, d, temperature=temperature, seed=seed,
                            dtype=np.float64)
    return q, k, v


KINDS = {"iid": iid_qkv, "clustered": clustered_qkv, "offset": offset_qkv}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="T=256, two temperatures")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                      "nystrom-accuracy.json"))
    args = parser.parse_args(argv)
    T, d, heads = (256, 64, 2) if args.quick else (512, 64, 4)
    temperatures = (1.0, 4.0) if args.quick else (0.5, 1.0, 2.0, 4.0, 8.0)
    budgets = (16, 64) if args.quick else (16, 64, 256)
    seeds = (0, 1, 2)
    methods = [f"{name}:{m}" for m in budgets for name in ("favor+", "favor+orth", "nystrom")]
    results = []
    print(f"T=S={T} D={d} H={heads} causal={args.causal}; output rel. error, mean ± std over "
          f"seeds {seeds}")
    print("| kind | temp | entropy/log S | peakiness | M | favor+ | favor+orth | nystrom | "
          "SVD floor | uniform |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, make in KINDS.items():
        for temp in temperatures:
            q, k, v = make(heads, T, d, temp, seed=17)
            rep = compare(q, k, v, methods, is_causal=args.causal, seeds=seeds, ranks=budgets,
                          measure=False)
            rows = {r["method"]: r for r in rep.rows}
            floor = {f["rank"]: f for f in rep.context["svd_floor"]}
            ctx = rep.context
            for m in budgets:
                cells = [f"{rows[f'{n}:{m}']['output_rel_error']:.3f} ± "
                         f"{rows[f'{n}:{m}']['output_rel_error_std']:.3f}"
                         for n in ("favor+", "favor+orth", "nystrom")]
                print(f"| {kind} | {temp:g} | {ctx['entropy_normalized']:.2f} | "
                      f"{ctx['peakiness']:.2f} | {m} | {' | '.join(cells)} | "
                      f"{floor[m]['output_rel_error']:.3f} | "
                      f"{ctx['uniform']['output_rel_error']:.3f} |", flush=True)
            results.append({"kind": kind, "temperature": temp, "rows": rep.rows,
                            "context": rep.context, "meta": rep.meta})
    doc = {"T": T, "d": d, "heads": heads, "causal": args.causal, "seeds": list(seeds),
           "results": results}
    write_text_atomic(args.out, json.dumps(_encode(doc), allow_nan=False, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
