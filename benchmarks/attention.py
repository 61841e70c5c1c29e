"""Benchmark: softmax and linear attention side by side, and the length where linear wins.

Run on the GPU machine, in one call or in two (each part takes about 4-5 minutes on an H200)::

    python benchmarks/attention.py [--parts softmax,linear] [--into RESULT.json] [--out PATH]
    python benchmarks/attention.py --markdown RESULT.json     # README tables from a result

Part ``softmax`` (``attention_softmax.py``): kernelkit's flash attention against torch SDPA's
flash, cuDNN and efficient backends, forward and forward + backward, TFLOP/s and peak memory.
Part ``linear`` (``attention_linear.py``): kernelkit's causal / non-causal linear attention (elu+1,
normalised) against flash-linear-attention (``fla-core``, carried as a wheel; head dim 128 only,
its first call per head dim autotunes for about two minutes) and the memory floor.
Both at bfloat16, H = 16, B * T = 65536 tokens, D in {64, 128}, T from 512 to 65536, causal and
non-causal. With both parts present (``--into`` adds a part to an earlier result) the crossover
is computed: for each D, mask and pass (forward, forward + backward), the smallest swept T from
which kernelkit's linear attention is faster than softmax attention (kernelkit's and the fastest
SDPA backend's) at every longer swept T.
"""

from __future__ import annotations

import argparse
import json
import math

import attention_linear
import attention_softmax
from _common import default_out, log, write_json_atomic

LENGTHS = (65536, 32768, 16384, 8192, 4096, 2048, 1024, 512)
PARTS = ("softmax", "linear")


def _linear_ms(row, causal, mode):
    return row.get(f"ours_{'causal' if causal else 'full'}_{mode}_ms")


def _softmax_ms(rows, impl, d, t, causal, mode):
    """Milliseconds of one softmax implementation ("sdpa_best": the fastest SDPA backend)."""
    found = [r[f"{mode}_ms"] for r in rows
             if r["D"] == d and r["T"] == t and r["causal"] == causal and f"{mode}_ms" in r
             and (r["impl"] == impl or (impl == "sdpa_best" and r["impl"].startswith("sdpa")))]
    return min(found) if found else None


def crossover(softmax_rows, linear_rows):
    """Rows {D, causal, mode, against, T_crossover, ratios} for every swept combination."""
    out = []
    for d in sorted({r["D"] for r in linear_rows}):
        for causal in (True, False):
            for mode in ("fwd", "fwd_bwd"):
                for against in ("kernelkit", "sdpa_best"):
                    pairs = []
                    for r in sorted((r for r in linear_rows if r["D"] == d), key=lambda r: r["T"]):
                        lin = _linear_ms(r, causal, mode)
                        soft = _softmax_ms(softmax_rows, against, d, r["T"], causal, mode)
                        if lin is not None and soft is not None:
                            pairs.append((r["T"], soft / lin))
                    t_cross = None
                    for i, (t, _) in enumerate(pairs):
                        if all(ratio > 1.0 for _, ratio in pairs[i:]):
                            t_cross = t
                            break
                    out.append(dict(D=d, causal=causal, mode=mode, against=against,
                                    T_crossover=t_cross,
                                    softmax_over_linear={str(t): ratio for t, ratio in pairs}))
    return out


def markdown(result):
    """README tables: forward and forward + backward times, memory and the crossover."""
    soft = result.get("softmax", {}).get("timings", [])
    lin = result.get("linear", {}).get("timings", [])
    dev = result.get("device", {}).get("name", "?")
    ver = result.get("versions", {})
    lines = [f"Device: {dev}; torch {ver.get('torch')}, triton {ver.get('triton')}; bfloat16, "
             "H = 16, B·T = 65 536 tokens; median ms of `triton.testing.do_bench`; peak = memory "
             "above the inputs; linear = elu+1, normalised.", ""]

    def fmt(x, digits=3):
        return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

    for d in sorted({r["D"] for r in soft} | {r["D"] for r in lin}):
        for causal in (False, True):
            mask = "causal" if causal else "non-causal"
            lines += [f"**D = {d}, {mask}** (ms; fwd / fwd+bwd)", "",
                      "| T | kernelkit softmax | SDPA flash | SDPA cuDNN | kernelkit linear "
                      "| fla chunk | softmax peak MiB | linear peak MiB |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for t in sorted({r["T"] for r in soft if r["D"] == d} | {r["T"] for r in lin if r["D"] == d}):
                cells = []
                for impl in ("kernelkit", "sdpa_flash", "sdpa_cudnn"):
                    cells.append(" / ".join(fmt(_softmax_ms(soft, impl, d, t, causal, m))
                                            for m in ("fwd", "fwd_bwd")))
                lr = next((r for r in lin if r["D"] == d and r["T"] == t), {})
                cells.append(" / ".join(fmt(_linear_ms(lr, causal, m)) for m in ("fwd", "fwd_bwd")))
                cells.append(" / ".join(fmt(lr.get(f"fla_chunk_norm_{m}_ms")) for m in ("fwd", "fwd_bwd"))
                             if causal else "–")
                sr = next((r for r in soft if r["D"] == d and r["T"] == t and r["causal"] == causal
                           and r["impl"] == "kernelkit"), {})
                cells.append(fmt(sr.get("fwd_bwd_peak_mib"), 0))
                cells.append(fmt(lr.get(f"ours_{'causal' if causal else 'full'}_fwd_bwd_peak_mib"), 0))
                lines.append(f"| {t} | " + " | ".join(cells) + " |")
            lines.append("")
    cross = result.get("crossover", [])
    if cross:
        lines += ["**Crossover**: smallest T from which linear attention is faster at every longer T",
                  "", "| D | mask | pass | vs kernelkit softmax | vs fastest SDPA |",
                  "|---:|---|---|---:|---:|"]
        keyed = {(c["D"], c["causal"], c["mode"], c["against"]): c for c in cross}

        def cell(c):
            if c is None or not c["softmax_over_linear"]:
                return "–"
            longest = max(c["softmax_over_linear"], key=int)
            return str(c["T_crossover"]) if c["T_crossover"] else f"not within {longest}"

        for d, causal, mode in sorted({(c["D"], c["causal"], c["mode"]) for c in cross}):
            cells = [cell(keyed.get((d, causal, mode, a))) for a in ("kernelkit", "sdpa_best")]
            lines.append(f"| {d} | {'causal' if causal else 'non-causal'} | "
                         f"{mode.replace('_', '+')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help="softmax, linear or both (default)")
    ap.add_argument("--into", default=None, help="an earlier result JSON to add the parts to")
    ap.add_argument("--out", default=None,
                    help="JSON path (default: --into, else benchmarks/results/attention-<gpu>-<date>.json)")
    ap.add_argument("--quick", action="store_true", help="two lengths per part")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds after which the linear part starts no new shape (default 420)")
    ap.add_argument("--dims", default=None, help="head dims, e.g. 64,128 (default: both)")
    ap.add_argument("--lengths", default=None, help="sequence lengths, e.g. 65536,512")
    ap.add_argument("--fla-dims", default="128",
                    help="head dims at which fla is timed (default 128; '' for none)")
    ap.add_argument("--markdown", metavar="RESULT.json", default=None,
                    help="print the README tables of a result and exit")
    args = ap.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            print(markdown(json.load(f)))
        return None
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"--parts: unknown {unknown}; choose from {PARTS}")
    result = {}
    if args.into:
        with open(args.into) as f:
            result = json.load(f)
    lengths = (65536, 4096) if args.quick else LENGTHS
    if args.lengths:
        lengths = tuple(int(t) for t in args.lengths.split(","))
    dims = tuple(int(d) for d in args.dims.split(",")) if args.dims else None
    fla_dims = tuple(int(d) for d in args.fla_dims.split(",") if d.strip()) + (32,)
    out = args.out or args.into
    for part in parts:
        if part == "softmax":
            result["softmax"] = attention_softmax.run(args.quick, args.smoke, lengths)
            result["softmax"]["timings"].sort(key=lambda r: (r["D"], r["causal"], r["T"]))
        else:
            result["linear"] = attention_linear.run(args.quick, args.smoke, args.budget, lengths,
                                                    fla_dims=fla_dims, dims=dims)
        for key in ("device", "versions"):
            result.setdefault(key, result[part][key])
        out = out or default_out("attention", result["device"]["name"])
        if "softmax" in result and "linear" in result:
            result["crossover"] = crossover(result["softmax"]["timings"], result["linear"]["timings"])
        write_json_atomic(out, result)  # after every part: a run cut short keeps what it measured
    log(markdown(result))
    log(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
