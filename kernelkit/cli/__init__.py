"""The ``kernelkit`` command line: ``kernelkit demo``, ``info``, ``gram`` and ``attention``.

Installed as the console script ``kernelkit`` (``kernelkit = kernelkit.cli:main``) and runnable
as ``python -m kernelkit``. Heavy modules (scikit-learn estimators, torch, triton) load only in
the subcommand that needs them.

Modules, each importing only those listed before it: :mod:`._errors` (``CLIError``),
:mod:`.info`, :mod:`.gram`, :mod:`.attention` (one subcommand each), :mod:`.main` (the parser
and :func:`main`).
"""

from kernelkit.cli._errors import CLIError
from kernelkit.cli.gram import parse_param
from kernelkit.cli.entry import build_parser, main

__all__ = ["CLIError", "build_parser", "main", "parse_param"]
