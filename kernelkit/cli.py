"""The ``kernelkit`` command line: ``kernelkit demo``, ``info``, ``gram`` and ``attention``.

Installed as the console script ``kernelkit`` (``kernelkit = kernelkit.cli:main``) and runnable
as ``python -m kernelkit``. Heavy modules (scikit-learn estimators, torch, triton) load only in
the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time

import numpy as np

from kernelkit.cli_attention import add_attention_parser, cmd_attention

__all__ = ["main", "build_parser", "parse_param"]

PROG = "kernelkit"


class CLIError(Exception):
    """A user error: printed as one line ``kernelkit: error: ...``, exit code 2."""


# ------------------------------------------------------------------------------------ parser
_MAIN_DESCRIPTION = """\
kernelkit: kernels in every ML sense.

Math kernels (RBF, Matern, polynomial...) as scikit-learn-native objects, Gram matrices of any
size computed block by block on the CPU or a GPU (Triton kernels checked against float64
references), and softmax / linear attention as kernel smoothers."""

_MAIN_EPILOG = """\
examples:
  kernelkit demo                       kernelkit kernels inside SVC, GaussianProcessRegressor
                                       and GridSearchCV, compared with scikit-learn
  kernelkit info                       versions and available backends
  kernelkit gram X.npy --out K.npy     write the Gram matrix of a data file
  kernelkit attention compare --qkv qkv.npz --method elu+1 --out cmp/
                                       linear vs softmax attention: errors, speed, plots

Run 'kernelkit COMMAND --help' for the options of one command."""

_DEMO_EPILOG = """\
examples:
  kernelkit demo                  run every section (about 10-30 s on a laptop CPU)
  kernelkit demo --quick          small data, a few seconds
  kernelkit demo --section svc    only the SVC section (repeat --section for more)"""

_INFO_EPILOG = """\
examples:
  kernelkit info                  print versions and which backends this machine has"""


def _kernel_list():
    from kernelkit_math.registry import kernel_names

    return ", ".join(kernel_names())


def _gram_epilog():
    return f"""\
kernels:
  {_kernel_list()}

parameters (--param NAME=VALUE, repeatable; scikit-learn names):
  rbf, laplacian      gamma=0.5             (default 1/n_features; comma-separated values
                                             give one gamma per feature: gamma=0.1,0.2,0.3)
  polynomial          gamma=0.1 degree=3 coef0=1
  sigmoid             gamma=0.1 coef0=1
  matern              length_scale=2.0 nu=1.5   (nu is 0.5, 1.5 or 2.5)
  rational_quadratic  length_scale=2.0 alpha=1.0
  exponential         scale=0.125           (default 1/sqrt(n_features))

input files:
  .npy  a 2-D numeric array saved with numpy.save (pickled object arrays are refused)
  .csv  comma-separated numbers, one sample per line; an optional header line is skipped

The output is a .npy file (float32 when every input is float32, else float64), written to a
temporary file beside it and renamed when complete: an error, Ctrl-C or SIGTERM never leaves a
partial or temporary file. The free disk space is checked before any work. --out may not be an
input file (also through a symbolic or hard link); a symbolic link is followed (the file it
points to is replaced, the link kept) and a replaced file keeps its permissions.

examples:
  kernelkit gram X.npy --kernel rbf --param gamma=0.5 --out K.npy
  kernelkit gram X.csv --y Y.csv --kernel matern --param length_scale=2 --param nu=2.5 --out K.npy
  kernelkit gram big.npy --kernel linear --out K.npy --block-size 2048 --progress

  python -c "import numpy as np; print(np.load('K.npy').shape)"   # read the result back"""


def build_parser():
    """The argparse parser of the ``kernelkit`` command."""
    from kernelkit.demo import SECTIONS

    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG, description=_MAIN_DESCRIPTION, epilog=_MAIN_EPILOG, formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_kernelkit_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    demo = sub.add_parser(
        "demo", formatter_class=fmt, epilog=_DEMO_EPILOG,
        help="kernelkit kernels in SVC, Gaussian processes and GridSearchCV",
        description=(
            "Run kernelkit's kernels inside scikit-learn estimators and compare them with\n"
            "scikit-learn's own kernels: accuracy and prediction agreement of an SVC on the\n"
            "digits data, the optimised log marginal likelihood of a Gaussian process, and a\n"
            "grid search over the RBF length scale. Prints tables and timings."
        ),
    )
    demo.add_argument(
        "--quick", action="store_true", help="use small data so the demo takes a few seconds",
    )
    demo.add_argument(
        "--section", action="append", choices=[s.name for s in SECTIONS], metavar="NAME",
        help="run only this section (repeatable): " + ", ".join(s.name for s in SECTIONS),
    )

    sub.add_parser(
        "info", formatter_class=fmt, epilog=_INFO_EPILOG,
        help="versions and available backends",
        description=(
            "Print the versions of kernelkit, Python and the libraries it uses, and which\n"
            "compute backends this machine offers (NumPy, Triton interpreter, CUDA GPU)."
        ),
    )

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
    add_attention_parser(sub, fmt)
    return parser


# ---------------------------------------------------------------------------------- helpers
def _kernelkit_version():
    try:
        from kernelkit import __version__

        return __version__
    except Exception:  # pragma: no cover - a broken checkout still prints something
        return "unknown"


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


# --------------------------------------------------------------------------------- commands
def cmd_demo(args):
    from kernelkit.demo import run_demo

    run_demo(sections=args.section, quick=args.quick)
    return 0


def _module_version(module):
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None, "not installed"
    except Exception as exc:  # a broken install, e.g. a missing shared library
        return None, f"import failed ({type(exc).__name__}: {exc})"
    return mod, getattr(mod, "__version__", "unknown version")


def info_lines():
    """The lines ``kernelkit info`` prints: versions, then backends."""
    rows = [("kernelkit", _kernelkit_version()), ("python", platform.python_version())]
    modules = {}
    for label, module in [
        ("numpy", "numpy"), ("scipy", "scipy"), ("scikit-learn", "sklearn"),
        ("torch", "torch"), ("triton", "triton"),
    ]:
        modules[module], text = _module_version(module)
        rows.append((label, str(text)))
    lines = ["versions:"] + [f"  {k:<14}{v}" for k, v in rows]
    lines.append(f"  {'platform':<14}{platform.platform()}")

    backends = [("NumPy (float64 reference)", "available")]
    if modules["triton"] is not None:
        mode = "on" if os.environ.get("TRITON_INTERPRET") == "1" else "off"
        backends.append(("Triton interpreter", f"available (TRITON_INTERPRET=1 is {mode})"))
    else:
        backends.append(("Triton interpreter", "not available (triton not installed)"))
    torch = modules["torch"]
    if torch is None:
        backends.append(("CUDA GPU", "not available (torch not installed)"))
    else:
        try:
            if torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                backends.append(("CUDA GPU", "available: " + ", ".join(names)))
            else:
                backends.append(("CUDA GPU", "not available (torch.cuda.is_available() is False)"))
        except Exception as exc:  # pragma: no cover - driver trouble
            backends.append(("CUDA GPU", f"not available ({type(exc).__name__}: {exc})"))
    lines.append("backends:")
    lines += [f"  {k:<28}{v}" for k, v in backends]
    from kernelkit._device import resolve_device

    label = 'device="auto" runs on'
    lines.append(f"  {label:<28}{resolve_device('auto')}")
    return lines


def cmd_info(args):
    print("\n".join(info_lines()))
    return 0


def cmd_gram(args):
    from kernelkit._io import check_npy_path, load_matrix
    from kernelkit._validation import result_dtype
    from kernelkit.gram import gram

    params = _params(args.param)
    try:
        inputs = [("X", args.X)] + ([] if args.Y is None else [("--y", args.Y)])
        check_npy_path(args.out, "--out", inputs=inputs)  # fail before reading large inputs
        X = load_matrix(args.X, "X")
        Y = None if args.Y is None else load_matrix(args.Y, "Y")
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
    print(
        f"wrote {path}: {args.kernel} kernel ({shown}), shape ({X.shape[0]}, {n_y}), "
        f"{dtype}, in {seconds:.2f} s"
    )
    return 0


_COMMANDS = {"demo": cmd_demo, "info": cmd_info, "gram": cmd_gram, "attention": cmd_attention}


def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    """Run the ``kernelkit`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    User errors (missing or malformed files, unknown kernels, bad parameters) print one line
    ``kernelkit: error: ...`` on stderr and return 2, without a traceback.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or an argparse usage error (code 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _COMMANDS[args.command](args)
    except CLIError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
