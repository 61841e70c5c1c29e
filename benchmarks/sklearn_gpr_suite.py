"""Run scikit-learn's own ``test_gpr.py`` with kernelkit's GaussianProcessRegressor substituted.

The test file (and its helper ``_mini_sequence_kernel.py``) is copied from the installed
scikit-learn (its wheel ships the tests) into a temporary directory; only the import of
``GaussianProcessRegressor`` is replaced by a subclass of :class:`kernelkit.GaussianProcessRegressor`
whose defaults are ``device="cpu"`` (or ``--device``) and ``dtype="float64"``. pytest runs it and
this script writes a JSON summary: counts, and for each failure its test id and the first line of
its reason. scikit-learn's file is never copied into the repository.

Usage::

    PYTHONPATH=. TRITON_INTERPRET=1 python benchmarks/sklearn_gpr_suite.py --out results.json

``--test-file`` takes another copy of ``test_gpr.py`` (for example one fetched from the
scikit-learn repository at the pinned version) when the installed wheel lacks the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import sklearn

_IMPORT = "from sklearn.gaussian_process import GaussianProcessRegressor\n"

_SUBSTITUTE = '''\
import types as _types

import kernelkit as _kernelkit

_base_init = _kernelkit.NAME.__init__


class NAME(_kernelkit.NAME):
    """kernelkit's NAME with the runner's defaults (the signature otherwise kernelkit's)."""


_init = _types.FunctionType(_base_init.__code__, _base_init.__globals__, "__init__",
                            _base_init.__defaults__, _base_init.__closure__)
_init.__kwdefaults__ = dict(_base_init.__kwdefaults__, **DEFAULTS)
NAME.__init__ = _init
'''


def substitute(test_file, import_line, name, defaults):
    """The source of ``test_file`` with its one ``import_line`` replaced by a subclass of
    ``kernelkit.<name>`` whose keyword defaults ``defaults`` (a dict) change."""
    source = pathlib.Path(test_file).read_text()
    if source.count(import_line) != 1:
        raise SystemExit(f"{test_file}: expected exactly one line {import_line.strip()!r}")
    return source.replace(import_line, _SUBSTITUTE.replace("NAME", name)
                          .replace("DEFAULTS", repr(defaults)))


def _prepare(workdir, test_file, device):
    source = substitute(test_file, _IMPORT, "GaussianProcessRegressor",
                        {"device": device, "dtype": "float64"})
    source = source.replace("from sklearn.gaussian_process.tests._mini_sequence_kernel import",
                            "from _mini_sequence_kernel import")
    target = workdir / "test_gpr_kernelkit.py"
    target.write_text(source)
    helper = pathlib.Path(test_file).with_name("_mini_sequence_kernel.py")
    if helper.exists():
        shutil.copy(helper, workdir / helper.name)
    return target


def _summary(junit):
    root = ET.parse(junit).getroot()
    out = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "failures": []}
    for case in root.iter("testcase"):
        name = case.get("name")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            out["failed"] += 1
            message = (failure.get("message") or failure.text or "").strip()
            out["failures"].append({"test": name, "reason": message.splitlines()[0][:300]
                                    if message else ""})
        elif skipped is not None:
            kind = "xfailed" if "xfail" in (skipped.get("type") or "") else "skipped"
            out[kind] += 1
        else:
            out["passed"] += 1
    return out


def run(target, workdir, k=None):
    """Run pytest on the prepared test file ``target`` in ``workdir``; return the summary of
    :func:`_summary` with ``sklearn`` (its version) and ``seconds``."""
    junit = workdir / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target),
           f"--junitxml={junit}", "-W", "ignore::DeprecationWarning", "--rootdir", str(workdir)]
    if k:
        cmd += ["-k", k]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(__file__).resolve().parent.parent),
                                         env.get("PYTHONPATH", "")])
    start = time.perf_counter()
    subprocess.run(cmd, cwd=workdir, env=env, check=False)
    summary = _summary(junit)
    summary.update(sklearn=sklearn.__version__, seconds=round(time.perf_counter() - start, 1))
    return summary


def report(summary, out, default_name, title):
    """Write ``summary`` as JSON to ``out`` (a directory: ``default_name`` in it; None: no file)
    and print it under ``title``."""
    if out:
        path = pathlib.Path(out)
        if path.is_dir():
            path = path / default_name
        tmp_path = path.with_name(path.name + ".tmp")
        tmp_path.write_text(json.dumps(summary, indent=2) + "\n")
        os.replace(tmp_path, path)
    print(f"{title}: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['skipped']} skipped, {summary['xfailed']} xfailed, {summary['seconds']} s")
    for f in summary["failures"]:
        print(f"  FAILED {f['test']}: {f['reason']}")


def arguments(doc, default_tests, default_name, argv, extra=()):
    """The runners' command line: ``--test-file``, ``--out``, ``--device``, ``-k`` and the
    ``extra`` ``(flag, keyword arguments)`` pairs; the test file must exist."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--test-file", default=str(default_tests))
    parser.add_argument("--out", "--json", dest="out", default=os.environ.get("OUT"),
                        help=f"JSON summary path (a directory: {default_name} in it)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    for flag, kwargs in extra:
        parser.add_argument(flag, **kwargs)
    args = parser.parse_args(argv)
    if not pathlib.Path(args.test_file).exists():
        raise SystemExit(f"{args.test_file} not found; pass --test-file")
    return args


def main(argv=None):
    name = "sklearn_gpr_suite.json"
    args = arguments(__doc__, pathlib.Path(sklearn.__file__).parent
                     / "gaussian_process/tests/test_gpr.py", name, argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        summary = run(_prepare(workdir, args.test_file, args.device), workdir, args.k)
    summary["device"] = args.device
    report(summary, args.out, name,
           f"scikit-learn {summary['sklearn']} test_gpr.py with kernelkit's GP ({args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
