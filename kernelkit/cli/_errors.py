"""The command line's error type, at the bottom of :mod:`kernelkit.cli` (imports nothing)."""

__all__ = ["CLIError", "PROG"]

PROG = "kernelkit"


class CLIError(Exception):
    """A user error: printed as one line ``kernelkit: error: ...``, exit code 2."""
