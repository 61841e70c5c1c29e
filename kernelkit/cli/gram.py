"""``kernelkit gram``: the Gram matrix K(X, Y) of data files, written to .npy block by block."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from kernelkit.cli._errors import CLIError

__all__ = ["add_gram_parser", "cmd_gram", "parse_param"]


def _parameter_text(param):
    default = param.default
    if default is None:  # the registry's documented meaning of None (1 / n_features ...)
        default = "None (" + param.doc.split("None means ")[-1] + ")"
    text = f"{param.name}={default}"
    if param.choices:
        text += " (" + " | ".join(str(c) for c in param.choices) + ")"
    if param.per_feature:
        text += " (or one per feature: v1,v2,...)"
    return text


def _parameters_help():
    """One line per registry kernel with its parameters and defaults, read from the registry."""
    from kernelkit_math.registry import get_kernel, kernel_names

    width = max(len(name) for name in kernel_names()) + 2
    lines = []
    for name in kernel_names():
        params = get_kernel(name).params
        text = ";  ".join(_parameter_text(p) for p in params) if params else "(no parameters)"
        lines.append(f"  {name:<{width}}{text}")
    return "\n".join(lines)


def _gram_epilog():
    return f"""\
kernels and parameters (--param NAME=VALUE, repeatable; scikit-learn names; defaults shown):
{_parameters_help()}

input files:
  .npy  a 2-D numeric array saved with numpy.save (pickled object arrays are refused)
  .csv  comma-separated numbers, one sample per line, with an optional header line (see
        --header); as pandas writes it: pd.DataFrame(X).to_csv("X.csv"), with or without
        index=False

CSV header (--header / --no-header; default: detected): the first line is read as column
names when one of its fields is not a number, or when it is exactly 0,1,...,d-1 (pandas'
default names); otherwise it is data. A header with an empty first field (pandas' index
column) marks the first column as row labels, left out. A first line that is the single value
0 is refused as ambiguous. --no-header reads every line as data (a first row 0,1,2 included);
--header skips the first line whatever it holds.

Input files must be regular files (not a FIFO or a device).

The output is a .npy file (float32 when every input is float32, else float64), written to a
temporary file beside it and renamed when complete: an error, Ctrl-C, SIGTERM, SIGHUP or
SIGQUIT never leaves a partial or temporary file. The free disk space is checked before any
work. A missing output directory is created (parents included). --out may not be an input file
(also through a symbolic or hard link) and, if it exists, must be a regular file; a symbolic
link is followed (the file it points to is replaced, the link kept) and a replaced file keeps
its permissions.

examples:
  kernelkit gram X.npy --kernel rbf --param gamma=0.5 --out K.npy
  kernelkit gram X.csv --y Y.csv --kernel matern --param length_scale=2 --param nu=2.5 --out K.npy
  kernelkit gram big.npy --kernel linear --out K.npy --block-size 2048 --progress

  python -c "import numpy as np; print(np.load('K.npy').shape)"   # read the result back

  torchrun --nproc_per_node 2 -m kernelkit gram X.npy --out K.npy   # one process per GPU
                                       (the row blocks shared out; see docs/distributed.md)"""


def add_gram_parser(sub, fmt):
    """Register ``kernelkit gram`` on the subcommand set ``sub``."""
    g = sub.add_parser(
        "gram", formatter_class=fmt, epilog=_gram_epilog(),
        help="write the Gram matrix K(X, Y) of a data file to .npy",
        description=(
            "Compute the Gram matrix K[i, j] = k(X[i], Y[j]) of a kernel, block by block, and\n"
            "write it to a .npy file. Without --y, K(X, X) is computed (exactly symmetric)."
        ),
    )
    g.add_argument("X", help="data file, .npy or .csv, shape (n_samples, n_features)")
    g.add_argument(
        "--y", dest="Y", metavar="Y", default=None,
        help="second data file (.npy or .csv) with the same number of features; default: X",
    )
    g.add_argument(
        "--header", action=argparse.BooleanOptionalAction, default=None,
        help="the first line of a .csv file is a header (--header) or data (--no-header); "
             "default: detected, see below",
    )
    g.add_argument("--kernel", default="rbf", help="kernel name (default: rbf); see below")
    g.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE",
        help="a kernel parameter, e.g. gamma=0.5 (repeatable)",
    )
    g.add_argument("--out", required=True, metavar="K.npy", help="output .npy file (required)")
    g.add_argument(
        "--block-size", type=int, default=None, metavar="N",
        help="rows per block (default: chosen to keep each block within 256 MiB)",
    )
    g.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="show a progress bar on stderr (default: only for long jobs)",
    )
    g.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"),
        help="where to compute (default: auto, the GPU when one is present; cuda streams "
             "row blocks from the GPU into the .npy file)",
    )
    return g


def _number(text):
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_param(text):
    """Parse ``NAME=VALUE`` into ``(name, value)``.

    VALUE is an int (``3``), a float (``0.5``, ``1e-3``) or comma-separated floats for
    per-feature values (``0.1,0.2``, returned as a list).

    Raises
    ------
    CLIError
        For a missing ``=``, an empty name or a value that is not a number.
    """
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    usage = "use NAME=VALUE, e.g. --param gamma=0.5"
    if not sep or not name:
        raise CLIError(f"--param {text!r}: expected NAME=VALUE ({usage})")
    if not name.isidentifier():
        raise CLIError(f"--param {text!r}: {name!r} is not a parameter name ({usage})")
    try:
        if "," in value:
            return name, [float(v) for v in value.split(",")]
        return name, _number(value)
    except ValueError:
        raise CLIError(
            f"--param {text!r}: value {value!r} is not a number (give an int, a float, or "
            "comma-separated floats for per-feature values)"
        ) from None


def _params(items):
    params = {}
    for item in items:
        name, value = parse_param(item)
        if name in params:
            raise CLIError(f"--param {name} given more than once")
        params[name] = value
    return params


def cmd_gram(args):
    """Run ``kernelkit gram``; under torchrun (WORLD_SIZE > 1) over a process group of its own
    (kernelkit.distributed.init_from_env), rank 0 printing the summary."""
    from kernelkit import distributed

    created = distributed.init_from_env(args.device)
    try:
        quiet = distributed.active() and sys.modules["torch"].distributed.get_rank() != 0
        return _gram_job(args, quiet=quiet)
    finally:
        if created:
            distributed.finish()


def _gram_job(args, quiet=False):
    from kernelkit._util.io import load_matrix
    from kernelkit._util.atomic import check_npy_path
    from kernelkit._util.validation import result_dtype
    from kernelkit.blocked_gram import gram

    params = _params(args.param)
    try:
        inputs = [("X", args.X)] + ([] if args.Y is None else [("--y", args.Y)])
        check_npy_path(args.out, "--out", inputs=inputs)  # fail before reading large inputs
        try:
            header = "auto" if args.header is None else args.header
            X = load_matrix(args.X, "X", header=header)
            Y = None if args.Y is None else load_matrix(args.Y, "Y", header=header)
        except MemoryError:
            raise CLIError("out of memory reading the input files: the data do not fit in "
                           "memory") from None
        t0 = time.perf_counter()
        path = gram(
            X, Y, args.kernel, out=args.out, block_size=args.block_size,
            progress=args.progress, device=args.device, **params,
        )
        seconds = time.perf_counter() - t0
    except (OSError, ValueError, TypeError) as exc:  # user errors: files, kernel, parameters
        raise CLIError(str(exc) or type(exc).__name__) from None
    except MemoryError:
        raise CLIError("out of memory; try a smaller --block-size") from None
    dtype = np.dtype(result_dtype(X, Y)).name
    n_y = X.shape[0] if Y is None else Y.shape[0]
    shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "default parameters"
    if quiet:
        return 0
    print(
        f"wrote {path}: {args.kernel} kernel ({shown}), shape ({X.shape[0]}, {n_y}), "
        f"{dtype}, in {seconds:.2f} s"
    )
    return 0
