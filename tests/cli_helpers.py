"""Helpers shared by the command-line tests: run ``kernelkit.cli.entry`` (in this process or a
new one) and check its errors."""

from kernelkit.cli import main


def run_main(argv, capsys):
    """Run the ``kernelkit`` command in-process; (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, *fragments):
    """Exit code 2 and one line 'kernelkit: error: ...' on stderr, no traceback."""
    assert code == 2
    assert_one_line_error(err, "kernelkit: error: ", *fragments)


def run_cli(argv, *, address_space=None, env=None, timeout=120):
    """Run ``python -m kernelkit ARGV`` in a new process from the repository root.

    ``address_space`` (bytes) limits the child's virtual memory as ``ulimit -v`` does
    (RLIMIT_AS, set in the child before it starts Python). Returns the CompletedProcess and the
    child's CPU seconds (user + system), which a busy machine does not inflate as it does the
    wall-clock time.
    """
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    child_env = dict(os.environ, **(env or {}))
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(root), child_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    def limit():
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-m", "kernelkit", *map(str, argv)], cwd=root,
                         env=child_env, preexec_fn=limit, capture_output=True, text=True,
                         timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res, cpu


def assert_one_line_error(stderr, prefix, *fragments):
    """stderr is one line starting with ``prefix``, holding every fragment, no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
