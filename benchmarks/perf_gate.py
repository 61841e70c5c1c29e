"""Performance regression gate: times the headline kernels and compares them with the last run.

Run on the GPU before every submission that touches a kernel (estimated at one to two minutes
with a cold Triton cache, compilation and autotuning included; not yet measured)::

    python benchmarks/perf_gate.py [--baseline PATH] [--out PATH] [--record]

The headline cases (:func:`headline_cases`): the RBF Gram matrix (``kernelkit_gpu.gram``), the
matrix-free K·V (``kernelkit_gpu.kernel_matvec``), softmax attention and linear attention
(elu+1, normalised), each non-causal and causal, forward and forward + backward. Each case is
called once (compilation, autotuning: ``first_call_s``), then timed in :data:`ROUNDS` rounds that
visit the cases in turn (a drift of the clocks reaches every case alike); a round is the median
of ``triton.testing.do_bench``. A case records the median of its rounds, their spread (max - min)
and the achieved rate (TFLOP/s, GB/s or pairs per second).

Comparison with the baseline, by case name (:func:`verdict`): SLOWER when the median is more than
:data:`THRESHOLD` (5 %) above the baseline's *and* the gap exceeds the wider of the two spreads;
faster, symmetrically; ``new`` for a case the baseline lacks, ``changed`` when its shape or dtype
differ, ``gone`` for a baseline case no longer measured. SLOWER cases are measured again once
(transient noise) and only the second measurement counts. The baseline is ``--baseline`` or the
most recent ``perf-gate-*.json`` (by its recorded date) in ``benchmarks/results/`` recorded on a
GPU of the same name; files from other devices are skipped and named. Without a baseline of this
device the run is recorded and the exit code is 0.

The JSON (device, torch and triton versions, git commit) is written atomically to ``--out``
(default ``benchmarks/results/perf-gate-<gpu>-<date>.json``) unless a case is SLOWER: a slow run
does not become the next baseline unless ``--record`` says so. A short table is printed last.
Exit code 1 when a case is SLOWER, else 0.

``--smoke`` runs tiny shapes on the CPU under ``TRITON_INTERPRET=1`` to exercise the script's
logic (its results folder is the system's temporary directory): those timings are meaningless.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from _common import (ROOT, check_mode, default_out, device_facts, log, median_ms, now, versions,
                     wall_s, write_json_atomic)

SCRIPT = "benchmarks/perf_gate.py"
#: Where baselines are looked for and runs are written by default (``--smoke``: the temporary
#: directory).
RESULTS = os.path.join(ROOT, "benchmarks", "results")
#: A case is SLOWER when its median exceeds the baseline's by more than this fraction.
THRESHOLD = 0.05
#: Timed rounds per case (GPU; one wall-clock call each under ``--smoke``).
ROUNDS = 7
SMOKE_ROUNDS = 2
#: ``do_bench`` milliseconds of warm-up and of repetitions per round.
WARMUP_MS = 10
REP_MS = 100
#: Units of a case's rate and the work per second each stands for.
UNITS = {"TFLOP/s": 1e12, "GB/s": 1e9, "Tpair/s": 1e12}


# ------------------------------------------------------------------------------------ cases
@dataclass(frozen=True)
class Case:
    """One timed call: ``setup()`` returns ``(fn, grad_to_none)`` on the device."""

    name: str
    shape: dict
    dtype: str
    work: float
    unit: str
    setup: Callable


def _attention_call(attn, shape, dtype, dev, backward, **kw):
    """Setup of an attention case: q, k, v (B, H, T, D) ~ N(0, 1); fwd without autograd, or
    fwd + bwd with a fixed output gradient (``grad_to_none`` clears the input gradients)."""

    def setup():
        import torch

        torch.manual_seed(0)
        dt = getattr(torch, dtype)
        dims = (shape["B"], shape["H"], shape["T"], shape["D"])
        q, k, v = (torch.randn(dims, device=dev, dtype=dt) for _ in range(3))
        if not backward:
            def fwd():
                with torch.no_grad():
                    attn(q, k, v, **kw)
            return fwd, None
        leaves = [t.requires_grad_() for t in (q, k, v)]
        dout = torch.randn(dims, device=dev, dtype=dt)

        def fwd_bwd():
            attn(*leaves, **kw).backward(dout)
        return fwd_bwd, leaves

    return setup


def headline_cases(smoke, dev=None):
    """The gate's cases, in timing order, on ``dev`` (default: "cpu" with ``smoke``, else
    "cuda"); tiny shapes with ``smoke``.

    Shapes: the README's Gram figure (N = 32768, D = 64); K·V as the solvers run it (16 columns,
    D = 8); softmax attention at B4 H16 T4096 D128 bf16; linear attention at B1 H16 T65536 D128
    bf16, where its causal regression was seen. Rates: the Gram's output bytes, K·V's pairs,
    softmax's FLOPs (4 B H T S D forward, half when causal, 3.5x that forward + backward), linear
    attention's memory floor (q, k, v, o forward; q, k, v, o, dout, o, dq, dk, dv forward +
    backward, as ``benchmarks/attention_linear.py``).
    """
    dev = dev or ("cpu" if smoke else "cuda")
    n_gram, d_gram = (100, 8) if smoke else (32768, 64)
    n_kv, d_kv, r_kv = (100, 8, 4) if smoke else (65536, 8, 16)
    soft = dict(B=1, H=2, T=64, D=32) if smoke else dict(B=4, H=16, T=4096, D=128)
    lin = dict(B=1, H=2, T=64, D=32) if smoke else dict(B=1, H=16, T=65536, D=128)

    def gram_setup():
        import torch

        import kernelkit_gpu

        torch.manual_seed(0)
        x = torch.randn(n_gram, d_gram, device=dev)
        return (lambda: kernelkit_gpu.gram(x, kernel="rbf", gamma=1.0 / d_gram)), None

    def kv_setup():
        import torch

        import kernelkit_gpu

        torch.manual_seed(0)
        x = torch.randn(n_kv, d_kv, device=dev)
        v = torch.randn(n_kv, r_kv, device=dev)
        return (lambda: kernelkit_gpu.kernel_matvec(x, x, v, "rbf", gamma=1.0 / d_kv)), None

    def softmax(q, k, v, **kw):
        from kernelkit_gpu import softmax_attention

        return softmax_attention(q, k, v, **kw)

    def linear(q, k, v, **kw):
        from kernelkit_gpu import linear_attention

        return linear_attention(q, k, v, feature_map="elu+1", normalize=True, **kw)

    cases = [
        Case("gram_rbf", dict(N=n_gram, M=n_gram, D=d_gram), "float32", n_gram * n_gram * 4,
             "GB/s", gram_setup),
        Case("kv_rbf", dict(N=n_kv, M=n_kv, D=d_kv, R=r_kv), "float32", n_kv * n_kv, "Tpair/s",
             kv_setup),
    ]
    soft_fwd = 4.0 * soft["B"] * soft["H"] * soft["T"] ** 2 * soft["D"]
    n_lin = lin["B"] * lin["H"] * lin["T"] * lin["D"] * 2  # bytes of one bfloat16 tensor
    for causal in (False, True):
        mask = "causal" if causal else "full"
        flops = soft_fwd / 2 if causal else soft_fwd
        for backward, tag, factor in ((False, "fwd", 1.0), (True, "fwd_bwd", 3.5)):
            cases.append(Case(f"softmax_{mask}_{tag}", soft, "bfloat16", factor * flops,
                              "TFLOP/s", _attention_call(softmax, soft, "bfloat16", dev, backward,
                                                         is_causal=causal)))
    for causal in (False, True):
        mask = "causal" if causal else "full"
        for backward, tag, tensors in ((False, "fwd", 4), (True, "fwd_bwd", 12)):
            cases.append(Case(f"linear_{mask}_{tag}", lin, "bfloat16", tensors * n_lin, "GB/s",
                              _attention_call(linear, lin, "bfloat16", dev, backward,
                                              is_causal=causal)))
    return cases


# ---------------------------------------------------------------------------------- timing
def summarize(case, rounds_ms, first_call_s):
    """The JSON record of a case: median of its rounds, spread (max - min), rate."""
    med = statistics.median(rounds_ms)
    return dict(shape=case.shape, dtype=case.dtype, median_ms=med,
                spread_ms=max(rounds_ms) - min(rounds_ms), rounds_ms=list(rounds_ms),
                first_call_s=first_call_s, rate=case.work / (med * 1e-3) / UNITS[case.unit],
                rate_unit=case.unit)


def measure(cases, dev, rounds):
    """Time ``cases``: one first call each, then ``rounds`` rounds visiting every case in turn.

    Returns ``{name: record}`` (:func:`summarize`).
    """
    ready = []
    for case in cases:
        fn, grads = case.setup()
        first = wall_s(fn, dev)
        log(f"  {case.name}: first call {first:.2f} s")
        ready.append((case, fn, grads, first))
    times = {case.name: [] for case in cases}
    for _ in range(rounds):
        for case, fn, grads, _first in ready:
            times[case.name].append(median_ms(fn, dev, warmup=WARMUP_MS, rep=REP_MS,
                                              grad_to_none=grads))
    out = {}
    for case, _fn, _grads, first in ready:
        out[case.name] = summarize(case, times[case.name], first)
        r = out[case.name]
        log(f"  {case.name}: {r['median_ms']:.4f} ms (spread {r['spread_ms']:.4f}), "
            f"{r['rate']:.3g} {case.unit}")
    return out


# ------------------------------------------------------------------------------ comparison
def load_baseline(path):
    """The perf-gate JSON at ``path``; ValueError naming the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"baseline {path}: cannot be read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"baseline {path}: not JSON ({e})") from None
    if (not isinstance(data, dict) or data.get("benchmark") != SCRIPT
            or not isinstance(data.get("device"), dict) or "name" not in data["device"]
            or not isinstance(data.get("cases"), dict)):
        raise ValueError(f"baseline {path}: not a {SCRIPT} result (expected 'benchmark', "
                         "'device' with a 'name', and 'cases')")
    for name, case in data["cases"].items():
        ok = isinstance(case, dict) and all(
            isinstance(case.get(key), (int, float)) and case[key] >= 0
            for key in ("median_ms", "spread_ms"))
        if not ok or case["median_ms"] == 0:
            raise ValueError(f"baseline {path}: case {name!r} needs a positive 'median_ms' and "
                             "a non-negative 'spread_ms'")
    return data


def find_baseline(folder, device_name):
    """The most recent (by recorded date) perf-gate JSON in ``folder`` from ``device_name``.

    Returns ``(path, data)``, ``(None, None)`` when there is none, and the notes on the files
    skipped (other device, unreadable).
    """
    best, notes = (None, None), []
    for path in sorted(glob.glob(os.path.join(folder, "perf-gate-*.json"))):
        try:
            data = load_baseline(path)
        except ValueError as e:
            notes.append(f"skipped {e}")
            continue
        if data["device"]["name"] != device_name:
            notes.append(f"skipped baseline {path}: recorded on {data['device']['name']!r}, "
                         f"this is {device_name!r}")
        elif best[1] is None or str(data.get("date")) > str(best[1].get("date")):
            best = (path, data)
    return best, notes


def verdict(now_case, base_case, threshold=THRESHOLD):
    """``ok``, ``SLOWER``, ``faster``, ``new`` (no baseline) or ``changed`` (shape / dtype).

    SLOWER (faster) needs both: the median more than ``threshold`` above (below) the baseline's,
    and the gap between the medians wider than the larger of the two spreads.
    """
    if base_case is None:
        return "new"
    if (now_case["shape"], now_case["dtype"]) != (base_case.get("shape"), base_case.get("dtype")):
        return "changed"
    gap = now_case["median_ms"] - base_case["median_ms"]
    noise = max(now_case["spread_ms"], base_case["spread_ms"])
    if abs(gap) > threshold * base_case["median_ms"] and abs(gap) > noise:
        return "SLOWER" if gap > 0 else "faster"
    return "ok"


def compare(measured, baseline_cases, threshold=THRESHOLD):
    """One row per case (measured ones in order, then the baseline's ``gone`` ones):
    ``case``, ``baseline_ms``, ``now_ms``, ``spread_ms``, ``ratio``, ``verdict``."""
    baseline_cases = baseline_cases or {}
    rows = []
    for name, case in measured.items():
        base = baseline_cases.get(name)
        v = verdict(case, base, threshold)
        base_ms = base["median_ms"] if v not in ("new", "changed") else None
        rows.append(dict(case=name, baseline_ms=base_ms, now_ms=case["median_ms"],
                         spread_ms=case["spread_ms"],
                         ratio=case["median_ms"] / base_ms if base_ms else None, verdict=v))
    for name, base in baseline_cases.items():
        if name not in measured:
            rows.append(dict(case=name, baseline_ms=base["median_ms"], now_ms=None,
                             spread_ms=None, ratio=None, verdict="gone"))
    return rows


def slower(rows):
    """Names of the SLOWER cases."""
    return [r["case"] for r in rows if r["verdict"] == "SLOWER"]


def gate(measured, baseline_cases, remeasure, threshold=THRESHOLD):
    """Compare; measure the SLOWER cases again once (``remeasure(names) -> {name: record}``)
    and compare with the new records, which replace the first ones in ``measured`` (their
    first median kept as ``first_median_ms``). Returns the rows of :func:`compare`."""
    rows = compare(measured, baseline_cases, threshold)
    flagged = slower(rows)
    if not flagged:
        return rows
    log(f"== measuring again (more than {threshold:.0%} slower): {', '.join(flagged)}")
    for name, record in remeasure(flagged).items():
        record["first_median_ms"] = measured[name]["median_ms"]
        measured[name] = record
    return compare(measured, baseline_cases, threshold)


def format_table(rows):
    """The short table: case, baseline ms, now ms, spread ms, ratio, verdict."""
    def num(x, width, digits):
        return f"{'-':>{width}s}" if x is None else f"{x:{width}.{digits}f}"

    lines = [f"{'case':24s} {'baseline ms':>11s} {'now ms':>10s} {'spread ms':>9s} "
             f"{'ratio':>6s}  verdict"]
    for r in rows:
        lines.append(f"{r['case']:24s} {num(r['baseline_ms'], 11, 4)} {num(r['now_ms'], 10, 4)} "
                     f"{num(r['spread_ms'], 9, 4)} {num(r['ratio'], 6, 3)}  {r['verdict']}")
    return "\n".join(lines)


def git_commit():
    """``{"commit": sha or None, "dirty": bool or None}`` of the working tree at ROOT."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        return dict(commit=git("rev-parse", "HEAD"), dirty=bool(git("status", "--porcelain")))
    except (OSError, subprocess.CalledProcessError):
        return dict(commit=None, dirty=None)


# ------------------------------------------------------------------------------------- main
def smoke_device():
    """``--smoke``'s device: the CPU under the Triton interpreter (TRITON_INTERPRET=1), else the
    GPU (where the interpreter cannot run: triton 3.6's with NumPy >= 2.4)."""
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return check_mode(SCRIPT, True)
    return "cuda"


def main(argv=None):
    """Run the gate; returns the exit code (1 when a case is SLOWER)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=None,
                    help="perf-gate JSON to compare with (default: the most recent one of this "
                         "GPU in benchmarks/results/)")
    ap.add_argument("--out", default=None,
                    help="JSON path (default benchmarks/results/perf-gate-<gpu>-<date>.json)")
    ap.add_argument("--record", action="store_true",
                    help="write the JSON (the next baseline) even when a case is SLOWER")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes (timings meaningless): on the CPU under TRITON_INTERPRET=1, "
                         "else on the GPU")
    args = ap.parse_args(argv)
    dev = smoke_device() if args.smoke else check_mode(SCRIPT, False)
    t_start = time.perf_counter()
    device = device_facts(dev)
    folder = tempfile.gettempdir() if args.smoke else RESULTS
    if args.baseline:
        try:
            base_path, base = args.baseline, load_baseline(args.baseline)
        except ValueError as e:
            ap.error(str(e))
        notes = []
    else:
        (base_path, base), notes = find_baseline(folder, device["name"])
    if base is not None and base["device"]["name"] != device["name"]:
        notes.append(f"baseline {base_path} was recorded on {base['device']['name']!r}, this is "
                     f"{device['name']!r}: not compared")
        base_path, base = None, None
    if base is None and not notes:
        notes.append(f"no baseline of {device['name']!r} in {folder}: this run is recorded, "
                     "nothing compared")
    elif base is None:
        notes.append("no baseline to compare with: this run is recorded, nothing compared")
    else:
        notes.append(f"baseline {base_path} ({base.get('date')}, commit "
                     f"{base.get('git', {}).get('commit')}, versions {base.get('versions')})")
    if args.smoke:
        notes.append(f"--smoke: tiny shapes on {dev}; the timings are meaningless, only the "
                     "script's logic runs")
    for note in notes:
        log(note)

    cases = headline_cases(args.smoke, dev)
    rounds = SMOKE_ROUNDS if args.smoke else ROUNDS
    log(f"== timing {len(cases)} cases, {rounds} rounds ({device['name']})")
    measured = measure(cases, dev, rounds)
    rows = gate(measured, base["cases"] if base else None,
                lambda names: measure([c for c in cases if c.name in names], dev, rounds))
    flagged = slower(rows)
    result = dict(
        benchmark=SCRIPT, date=now(), device=device, versions=versions(), git=git_commit(),
        smoke=args.smoke, threshold=THRESHOLD, rounds=rounds,
        notes=notes + ["median_ms: median of the rounds, each a do_bench median (one wall-clock "
                       "call under --smoke); spread_ms: max - min of the rounds"],
        baseline=base_path, cases=measured, comparison=rows, slower=flagged,
        total_seconds=time.perf_counter() - t_start,
    )
    out = args.out or os.path.join(folder, os.path.basename(default_out("perf-gate",
                                                                        device["name"])))
    log("")
    log(format_table(rows))
    if flagged and not args.record:
        log(f"SLOWER by more than {THRESHOLD:.0%}: {', '.join(flagged)}; not recorded "
            "(--record makes this run the baseline)")
    else:
        write_json_atomic(out, result)
        if flagged:
            log(f"SLOWER by more than {THRESHOLD:.0%}: {', '.join(flagged)}; recorded anyway "
                "(--record)")
        log(f"wrote {out} ({result['total_seconds']:.0f} s)")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
