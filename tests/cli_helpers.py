"""Helpers shared by the command-line tests: run ``kernelkit.cli.entry`` and check its errors."""

from kernelkit.cli import main


def run_main(argv, capsys):
    """Run the ``kernelkit`` command in-process; (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, *fragments):
    """Exit code 2 and one line 'kernelkit: error: ...' on stderr, no traceback."""
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kernelkit: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
