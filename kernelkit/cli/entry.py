"""The ``kernelkit`` parser and :func:`main`: ``demo`` here, the other subcommands in their modules."""

from __future__ import annotations

import argparse
import os
import sys

from kernelkit.cli._errors import PROG, CLIError
from kernelkit.cli.attention import add_attention_parser, cmd_attention
from kernelkit.cli.gram import add_gram_parser, cmd_gram
from kernelkit.cli.info import cmd_info, kernelkit_version

__all__ = ["main", "build_parser"]

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
  kernelkit demo                  run every section (timings: docs/benchmarks.md)
  kernelkit demo --quick          small data, several times faster
  kernelkit demo --section svc    only the SVC section (repeat --section for more)"""

_INFO_EPILOG = """\
examples:
  kernelkit info                  print versions and which backends this machine has"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the (sub)command, with a hint
    to its ``--help``, and exit code 2. Subparsers get this class too."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "_parser", None) is None:  # a subparser sets it first: the deepest
            namespace._parser = self
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:  # report them from the subcommand they were given to, not the top level
            namespace._parser.error(f"unrecognized arguments: {' '.join(extras)}")
        del namespace._parser
        return namespace

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser():
    """The argparse parser of the ``kernelkit`` command."""
    from kernelkit.cli.demo import SECTIONS

    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog=PROG, description=_MAIN_DESCRIPTION, epilog=_MAIN_EPILOG, formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {kernelkit_version()}")
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
        "--quick", action="store_true", help="use small data: several times faster than the full demo",
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

    add_gram_parser(sub, fmt)
    add_attention_parser(sub, fmt)
    return parser


# --------------------------------------------------------------------------------- commands
def cmd_demo(args):
    from kernelkit.cli.demo import run_demo

    run_demo(sections=args.section, quick=args.quick)
    return 0


_COMMANDS = {"demo": cmd_demo, "info": cmd_info, "gram": cmd_gram, "attention": cmd_attention}


def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    """Run the ``kernelkit`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    User errors (missing or malformed files, unknown kernels, bad parameters) print one line
    ``kernelkit: error: ...`` on stderr and return 2, without a traceback; so do usage errors
    (``kernelkit attention compare: error: ... (see 'kernelkit attention compare --help')``).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or an argparse usage error (code 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "gram":  # --kernel RBF (the class name) means the registry's rbf
        from kernelkit.attention.comparison.methods import registry_kernel_name

        args.kernel = registry_kernel_name(args.kernel) or args.kernel
    try:
        return _COMMANDS[args.command](args)
    except CLIError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        comparison = sys.modules.get("kernelkit.attention.comparison.accuracy")
        if comparison is not None and comparison.work_left_running():
            # an SVD left running in its worker thread (kernelkit.attention.comparison):
            # interpreter shutdown would wait for it inside LAPACK / OpenBLAS, or deadlock
            # there; end the process now
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        return 130

