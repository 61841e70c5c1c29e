"""``kernelkit attention compare`` and ``kernelkit attention sweep``.

Registered by :mod:`kernelkit.cli.entry` through :func:`add_attention_parser`; :func:`cmd_attention`
runs the chosen subcommand. The comparison tools (and torch, matplotlib) load only when one runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kernelkit.cli._errors import CLIError

__all__ = ["add_attention_parser", "cmd_attention", "parse_lengths"]

_FORMATS = ("png", "svg", "pdf")
#: Every file the attention commands write into --out. A run removes those of an earlier run
#: before it writes, so a new report never sits beside an old plot; other files are left alone.
OUTPUT_FILES = ("report.md", "report.json", "heatmaps.npz") + tuple(
    f"{stem}.{fmt}" for stem in ("heatmaps", "error_vs_features", "sweep") for fmt in _FORMATS)
#: A compare run whose context step is estimated to take longer than this says so first.
_SLOW_SECONDS = 60
_SYNTHETIC = {"batch": 1, "heads": 4, "length": 256, "dim": 64, "temperature": 1.0,
              "clusters": None, "seed": 0}

_ATTENTION_EPILOG = """\
Run 'kernelkit attention COMMAND --help' for the options of one command."""


def _method_help():
    """The --method forms, the feature maps' lines from their registry."""
    from kernelkit_math.random_features import FEATURE_MAPS

    def line(form, text):
        return f"  {form:<28} {text}"

    maps = [line(spec.form, spec.summary) for spec in FEATURE_MAPS.values()]
    return "\n".join([
        "methods (--method SPEC, repeatable):",
        line("softmax", "exact softmax attention (the reference itself)"),
        "  linear attention with a feature map (M: number of random features):", *maps,
        line("kernel:NAME[(p=v,...)]", "exact kernel attention with a registry kernel (or its"),
        line("", "class name, any case), e.g. kernel:rbf(gamma=0.5), kernel:RBF"),
        line("nystrom:M", "Nystrom attention: M landmarks on the exponential (softmax)"),
        line("", "kernel, training-free"),
        line("local:B, local:B:W", "local + summary attention: exact softmax over blocks of B"),
        line("", "positions (own and W on each side, default 1), one summary key"),
        line("", "per other block; training-free")])


_COMPARE_EPILOG = _method_help() + """

input files (--qkv FILE) hold arrays named q, k, v, all of shape (B, H, T, D), (H, T, D) or
(T, D); k and v share every axis but the last; q shares (B, H) and D with k:
  .npz          np.savez("qkv.npz", q=q, k=k, v=v)
  .pt / .pth    torch.save({"q": q, "k": k, "v": v}, "qkv.pt")
  .safetensors  safetensors.torch.save_file({"q": q, "k": k, "v": v}, "qkv.safetensors")
Without --qkv, q and k are Gaussian with scaled scores of standard deviation --temperature:
about 0.5 gives diffuse attention, 4 or more peaky attention. With --clusters C they gather
around C random centres, so each query attends to the keys of its cluster.

output (--out DIR, created with its parents if missing): report.md (tables), report.json
(every number; NaN as null), heatmaps.npz (the attention weights shown in the heatmaps, one
array per method), and heatmaps.{png,svg} and error_vs_features.{png,svg}. Files of these
names left by an earlier run are removed first (other files stay), so no old plot sits beside
a new report.

memory and time: the sizes are checked against the available memory (and ulimit -v) before
q, k, v are read or drawn; a run that needs more is refused. The context step takes one SVD
per (batch, head), O(T^3): a run estimated to take more than a minute says so first, and
Ctrl-C stops it at any step.

examples:
  kernelkit attention compare --qkv qkv.npz --method softmax --method elu+1 \\
      --method favor+:256 --out cmp/
  kernelkit attention compare --length 1024 --temperature 4 --causal --seeds 5 \\
      --method favor+:64 --method favor+:256 --out peaky/
  kernelkit attention compare --length 512 --temperature 2 --clusters 16 \\
      --method softmax --method favor+:64 --method nystrom:64 --out clustered/
  python -c "import json; print(json.load(open('cmp/report.json'))['rows'][0])\""""

_SWEEP_EPILOG = _method_help() + """

lengths (--lengths): comma-separated (512,1024,4096) or a doubling range (512..65536).
Default: 512..65536 on a GPU, 128..2048 on the CPU.

output (--out DIR, created with its parents if missing): report.md (time and memory tables,
crossover), report.json and sweep.{png,svg} (time and memory vs T, log-log, crossover
marked); files of these names left by an earlier run are removed first.

timings: each cell is the median of --repeat calls with their min-max range; a crossover
where the method's and softmax's ranges overlap is marked noisy (busy machines swap the order
between runs: repeat the sweep, or raise --repeat). softmax is the reference of the
crossover: sweep it with other methods. Memory is planned first: lengths whose inputs do not
fit are refused before anything is drawn, and a method that would not fit at a length is
skipped there with the reason; a sweep in which nothing ran is an error that gives the reasons.

time and Ctrl-C: softmax on the CPU is O(T^2) in plain PyTorch: a CPU sweep estimated to take
more than a minute says so first. Progress goes to stderr: a bar on a terminal, one line per
finished method and length when stderr is a pipe or a file. Ctrl-C stops the sweep at once:
the runs finished before it are written to report.md and report.json (no plots), exit code 130.

examples:
  kernelkit attention sweep --method softmax --method elu+1 --out sweep/   # CPU: T = 128..2048
  kernelkit attention sweep --method softmax --method elu+1 --lengths 512..65536 --out sweep/
                                       (sized for a GPU: on a CPU it takes many minutes)
  kernelkit attention sweep --method softmax --method favor+:128 --backward --tokens 65536 \\
      --dim 128 --heads 16 --out sweep-bwd/"""


# ------------------------------------------------------------------------------------ parser
def _add_output_options(p, progress_help):
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for report.md, report.json and the plots (created with its "
                        "parents if missing; the files an earlier run wrote there are replaced "
                        "or removed, other files are left alone)")
    p.add_argument("--format", action="append", choices=_FORMATS, dest="formats",
                   help="plot format (repeatable; default: png and svg)")
    p.add_argument("--no-plot", action="store_true", help="write the reports without plots")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=progress_help)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where the methods run and are timed (default: auto, the GPU if present)")


def add_attention_parser(subparsers, formatter_class):
    """Add the ``attention`` command, with ``compare`` and ``sweep``, to ``subparsers``."""
    fmt = formatter_class
    att = subparsers.add_parser(
        "attention", formatter_class=fmt, epilog=_ATTENTION_EPILOG,
        help="compare linear and softmax attention: errors, speed, memory, plots",
        description=(
            "How far linear or kernel attention is from softmax attention on given q, k, v, and\n"
            "from which sequence length it is faster."
        ),
    )
    sub = att.add_subparsers(dest="attention_command", metavar="COMMAND", title="commands")

    c = sub.add_parser(
        "compare", formatter_class=fmt, epilog=_COMPARE_EPILOG,
        help="error of linear / kernel attention against softmax on your q, k, v (or "
             "synthetic ones), with time, peak memory, context rows and plots",
        description=(
            "Compare attention methods with float64 softmax attention on q, k, v from a file or\n"
            "synthetic ones: output error, total variation and KL divergence of the weights,\n"
            "non-positive denominators, spread over seeds, context (uniform attention, entropy,\n"
            "truncated-SVD floor), time and peak memory. Writes report.md, report.json, plots."
        ),
    )
    c.add_argument("--qkv", metavar="FILE", help=".npz, .pt or .safetensors file with q, k, v")
    synth = c.add_argument_group("synthetic inputs (without --qkv)")
    synth.add_argument("--batch", type=int, metavar="B",
                       help=f"batch size (default {_SYNTHETIC['batch']})")
    synth.add_argument("--heads", type=int, metavar="H",
                       help=f"heads (default {_SYNTHETIC['heads']})")
    synth.add_argument("--length", type=int, metavar="T",
                       help=f"sequence length (default {_SYNTHETIC['length']})")
    synth.add_argument("--dim", type=int, metavar="D",
                       help=f"head dimension (default {_SYNTHETIC['dim']})")
    synth.add_argument("--temperature", type=float, metavar="X",
                       help="spread of the scaled scores: 0.5 diffuse, 4 peaky (default 1)")
    synth.add_argument("--clusters", type=int, metavar="C",
                       help="queries and keys gather around C random centres (structured, "
                            "near rank-C attention; default: independent entries)")
    synth.add_argument("--seed", type=int, metavar="S", help="seed of the inputs (default 0)")
    c.add_argument("--method", action="append", metavar="SPEC", dest="methods",
                   help="a method (repeatable; default: softmax, elu+1, favor+:256); see below")
    c.add_argument("--causal", action="store_true",
                   help="causal attention (query i sees keys j <= i)")
    c.add_argument("--seeds", type=int, default=3, metavar="N",
                   help="seeds 0..N-1 of the random feature maps (default 3)")
    c.add_argument("--plot-index", default="0,0", metavar="B,H",
                   help="batch and head shown in the heatmaps (default 0,0)")
    c.add_argument("--no-measure", action="store_true",
                   help="skip the time and peak-memory measurements")
    _add_output_options(c, "show a progress bar on stderr (default: when stderr is a terminal)")

    s = sub.add_parser(
        "sweep", formatter_class=fmt, epilog=_SWEEP_EPILOG,
        help="time and peak memory over sequence length, and the crossover length from "
             "which a method is faster than softmax",
        description=(
            "Time and peak memory of attention methods on synthetic inputs over sequence length\n"
            "(forward, or forward + backward), and the length from which each method is faster\n"
            "than softmax. Writes report.md, report.json and sweep.png / sweep.svg."
        ),
    )
    s.add_argument("--method", action="append", metavar="SPEC", dest="methods",
                   help="a method (repeatable; default: softmax and elu+1); see below")
    s.add_argument("--lengths", metavar="LIST",
                   help="sequence lengths, e.g. 512,1024 or 512..65536")
    s.add_argument("--dim", type=int, default=64, metavar="D", help="head dimension (default 64)")
    s.add_argument("--heads", type=int, default=8, metavar="H", help="heads (default 8)")
    size = s.add_mutually_exclusive_group()
    size.add_argument("--batch", type=int, default=1, metavar="B", help="batch size (default 1)")
    size.add_argument("--tokens", type=int, metavar="N",
                      help="keep batch x length at N tokens (batch = N // T; N at least the "
                           "longest length) instead of --batch")
    s.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="causal attention (default: causal)")
    s.add_argument("--backward", action="store_true", help="time forward + backward")
    s.add_argument("--dtype", choices=("float32", "float16", "bfloat16"),
                   help="input dtype (default: bfloat16 on a GPU, float32 on the CPU)")
    s.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="timed calls per measurement, after a warm-up (default 5)")
    s.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default 0)")
    _add_output_options(s, "show a progress bar on stderr; --no-progress: nothing (default: the "
                           "bar when stderr is a terminal, otherwise one line per finished "
                           "method and length)")
    return att


# --------------------------------------------------------------------------------- helpers
def _cli_error(message):
    return CLIError(message)


def parse_lengths(text):
    """``"512,1024"`` -> [512, 1024]; ``"512..4096"`` -> [512, 1024, 2048, 4096] (doubling).

    Raises
    ------
    ValueError
        For anything else, naming the text, the accepted forms and what is wrong.
    """
    usage = (f"--lengths {text!r}: expected comma-separated ints (512,1024) or a doubling range "
             "(512..65536)")
    parts = text.strip().split("..")
    is_range = len(parts) == 2
    try:
        values = [int(p) for p in (parts if is_range else text.split(","))]
    except ValueError:
        raise ValueError(usage) from None
    if any(T < 1 for T in values):
        raise ValueError(usage + "; each length must be at least 1")
    if not is_range:
        return values
    lo, hi = values
    if hi < lo:
        raise ValueError(f"{usage}; the range must go up, but {lo} > {hi} (did you mean "
                         f"{hi}..{lo}?)")
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


def _plot_index(text):
    try:
        b, h = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--plot-index {text!r}: expected two ints B,H such as 0,0") from None
    return b, h


def _check_count(value, option):
    if value is not None and value < 1:
        raise ValueError(f"{option} must be at least 1; got {value}")


def _check_out(path):
    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"--out {path!r} exists and is not a directory")


def _write_outputs(report, args, plots=True):
    """Write the reports (and, with ``plots`` and without --no-plot, the plots) into --out;
    remove the files of an earlier run first.

    Returns (files written, names of earlier files removed and not written again)."""
    from kernelkit._util.atomic import write_text_atomic
    from kernelkit.attention.comparison.report import CompareReport

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    earlier = [out / name for name in OUTPUT_FILES
               if (out / name).is_symlink() or (out / name).is_file()]
    for path in earlier:
        path.unlink()
    write_text_atomic(out / "report.md", report.to_markdown())
    written = [out / "report.md", out / "report.json"]
    if isinstance(report, CompareReport):  # the weight maps go to a compact .npz
        report.to_json(out / "report.json", heatmaps=False)
        written.append(report.save_heatmaps(out / "heatmaps.npz"))
    else:
        report.to_json(out / "report.json")
    if plots and not args.no_plot:
        written += report.plot(out, formats=tuple(args.formats or ("png", "svg")))
    removed = sorted({p.name for p in earlier} - {Path(p).name for p in written})
    return written, removed


def _out_of_memory(exc):
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return _cli_error(f"out of memory ({first}); try shorter sequences, fewer heads or a "
                      "smaller batch")


def _note_long_run(seconds, what, detail, stop):
    """Say on stderr, before it starts, that a run estimated at ``seconds`` takes more than
    :data:`_SLOW_SECONDS` (None: no estimate)."""
    if seconds is not None and seconds > _SLOW_SECONDS:
        print(f"kernelkit: note: this {what} will take about {seconds / 60:.0f} min on this CPU "
              f"({detail}); {stop}", file=sys.stderr, flush=True)


def _keep_interrupted(report, args):
    """Write the runs an interrupted sweep finished into --out (the reports, no plots), and say
    so on stderr."""
    stopped = report.meta["interrupted"]
    at = (f"T = {stopped['T']}" if stopped["method"] is None else
          f"{stopped['method']}, T = {stopped['T']}")
    if not report.rows:
        print(f"kernelkit: sweep interrupted at {at}, before any run finished; nothing written",
              file=sys.stderr, flush=True)
        return
    try:
        written, _ = _write_outputs(report, args, plots=False)
    except OSError as exc:
        print(f"kernelkit: sweep interrupted at {at}; the runs finished before it could not be "
              f"written: {exc}", file=sys.stderr, flush=True)
        return
    print(f"kernelkit: sweep interrupted at {at}; the {len(report.rows)} runs finished before "
          f"it are in {', '.join(p.name for p in written)} in {args.out} (no plots)",
          file=sys.stderr, flush=True)


def _run(args, build):
    """Build the report, write it, print it; user errors and failed allocations become one-line
    CLI errors. An interrupted sweep keeps the runs it finished, then Ctrl-C goes on up."""
    from kernelkit.attention.comparison.memory import is_out_of_memory
    from kernelkit.attention.comparison.sweeps import SweepInterrupted

    t0 = time.perf_counter()
    try:
        _check_out(args.out)  # fail before a long run, not after it
        if not args.no_plot:
            from kernelkit.attention.comparison.plots import require_matplotlib

            require_matplotlib()
        report = build(args)
        written, removed = _write_outputs(report, args)
    except SweepInterrupted as exc:
        _keep_interrupted(exc.report, args)
        raise
    except ImportError as exc:  # matplotlib missing
        raise _cli_error(f"{exc} (or pass --no-plot)") from None
    except (OSError, ValueError, TypeError) as exc:
        raise _cli_error(str(exc) or type(exc).__name__) from None
    except Exception as exc:  # an allocation the memory plan did not foresee (or ulimit -v)
        if not is_out_of_memory(exc):
            raise
        raise _out_of_memory(exc) from None
    print(report.to_markdown())
    names = ", ".join(p.name for p in written)
    print(f"wrote {names} to {args.out} in {time.perf_counter() - t0:.1f} s")
    if removed:
        print(f"removed {', '.join(removed)} of an earlier run from {args.out}")
    return 0


# -------------------------------------------------------------------------------- commands
def _compare_report(args):
    from kernelkit.attention.comparison import compare
    from kernelkit.attention.comparison.accuracy import check_memory, context_seconds
    from kernelkit.attention.comparison.qkv import load_qkv, qkv_shapes, synthetic_qkv

    _check_count(args.seeds, "--seeds")
    plot_index = _plot_index(args.plot_index)
    given = [name for name in _SYNTHETIC if getattr(args, name) is not None]
    sizes = None
    if args.qkv is not None:
        if given:
            raise ValueError(
                f"--{given[0]} sets up synthetic inputs; it cannot be combined with --qkv"
            )
        shapes = qkv_shapes(args.qkv)  # from the headers: plan memory before reading data
        if shapes is not None:
            (B, H, T, D), (_, _, S, _), (_, _, _, Dv) = shapes
            sizes = (B, H, T, S, D, Dv)
    else:
        opts = {name: getattr(args, name) if getattr(args, name) is not None else default
                for name, default in _SYNTHETIC.items()}
        for name in ("batch", "heads", "length", "dim", "clusters"):
            _check_count(opts[name], f"--{name}")
        B, H, T, D = (opts[name] for name in ("batch", "heads", "length", "dim"))
        sizes = (B, H, T, T, D, D)  # checked before the synthetic inputs are drawn
    if sizes is not None:
        check_memory(*sizes)
        _note_long_run(context_seconds(*sizes[:4]), "comparison",
                       f"{B * H} SVDs of {T} x {sizes[3]} attention weights", "Ctrl-C stops it")
    if args.qkv is not None:
        q, k, v = load_qkv(args.qkv)
    else:
        q, k, v = synthetic_qkv(B, H, T, D, temperature=opts["temperature"],
                                clusters=opts["clusters"], seed=opts["seed"])
    kwargs = {} if args.methods is None else {"methods": tuple(args.methods)}
    return compare(q, k, v, **kwargs, is_causal=args.causal, seeds=tuple(range(args.seeds)),
                   device=args.device, plot_index=plot_index,
                   measure=not args.no_measure, progress=args.progress)


def _sweep_report(args):
    from kernelkit.attention.comparison.sweeps import sweep, sweep_seconds

    kwargs = {} if args.methods is None else {"methods": tuple(args.methods)}
    lengths = None if args.lengths is None else parse_lengths(args.lengths)
    for name in ("dim", "heads", "batch", "tokens", "repeat"):
        _check_count(getattr(args, name), f"--{name}")
    sizes = dict(**kwargs, lengths=lengths, batch=args.batch, heads=args.heads, d=args.dim,
                 backward=args.backward, dtype=args.dtype, device=args.device,
                 tokens=args.tokens, repeat=args.repeat)
    _note_long_run(sweep_seconds(**sizes), "sweep",
                   "shorter --lengths, fewer --heads or a smaller --repeat take less",
                   "Ctrl-C stops it and keeps the runs finished before it")
    return sweep(**sizes, is_causal=args.causal, progress=args.progress, seed=args.seed)


def cmd_attention(args):
    """Run ``kernelkit attention compare`` or ``sweep``; return the exit code."""
    if args.attention_command is None:
        raise _cli_error(
            "kernelkit attention needs a command: compare or sweep (see kernelkit attention --help)"
        )
    build = {"compare": _compare_report, "sweep": _sweep_report}[args.attention_command]
    return _run(args, build)
