"""The performance regression gate (``benchmarks/perf_gate.py``, issue 42): its comparison, the
choice of the baseline, the exit code and what it writes; the GPU timing itself runs on the GPU
machine. The end-to-end test runs the script under ``--smoke`` (tiny shapes, Triton
interpreter) against a planted baseline."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))  # the scripts import their ``_common``

import perf_gate  # noqa: E402

SMOKE_DEVICE = "cpu-interpreter-smoke"  # benchmarks/_common.device_facts on the CPU
NAMES = [c.name for c in perf_gate.headline_cases(smoke=True)]


def record(ms, spread=0.01, shape=None, dtype="float32"):
    return dict(shape=shape or dict(N=8), dtype=dtype, median_ms=ms, spread_ms=spread)


def baseline_file(path, cases, device=SMOKE_DEVICE, date="2026-01-01T00:00:00"):
    path.write_text(json.dumps(dict(benchmark=perf_gate.SCRIPT, date=date,
                                    device=dict(name=device), cases=cases)))
    return path


# ------------------------------------------------------------------------------- verdicts
@pytest.mark.parametrize("now_ms, now_spread, base_spread, expected", [
    (1.10, 0.01, 0.01, "SLOWER"),   # 10 % slower, far beyond either spread
    (1.03, 0.001, 0.001, "ok"),     # 3 %: under the threshold, however steady
    (1.10, 0.15, 0.01, "ok"),       # 10 %, but within this run's spread
    (1.10, 0.01, 0.15, "ok"),       # 10 %, but within the baseline's spread
    (0.90, 0.01, 0.01, "faster"),
    (0.97, 0.001, 0.001, "ok"),
], ids=["10pc-slower", "3pc-slower", "10pc-in-own-spread", "10pc-in-baseline-spread",
        "10pc-faster", "3pc-faster"])
def test_verdict_needs_5_percent_and_a_gap_beyond_the_spread(now_ms, now_spread, base_spread,
                                                              expected):
    assert perf_gate.verdict(record(now_ms, now_spread), record(1.0, base_spread)) == expected


def test_verdict_new_and_changed():
    assert perf_gate.verdict(record(1.0), None) == "new"
    assert perf_gate.verdict(record(1.0), record(1.0, shape=dict(N=16))) == "changed"
    assert perf_gate.verdict(record(1.0), record(1.0, dtype="bfloat16")) == "changed"


def test_compare_names_every_case_with_its_ratio():
    measured = {"a": record(1.10), "b": record(1.03), "c": record(2.0)}
    base = {"a": record(1.0), "b": record(1.0), "d": record(3.0)}
    rows = perf_gate.compare(measured, base)
    assert [(r["case"], r["verdict"]) for r in rows] == [
        ("a", "SLOWER"), ("b", "ok"), ("c", "new"), ("d", "gone")]
    assert rows[0]["ratio"] == pytest.approx(1.10, rel=1e-12)
    assert rows[2]["baseline_ms"] is None and rows[3]["now_ms"] is None
    assert perf_gate.slower(rows) == ["a"]
    table = perf_gate.format_table(rows)
    assert "SLOWER" in table.splitlines()[1] and table.splitlines()[1].startswith("a ")


def test_gate_remeasures_flagged_cases_once_and_only_them():
    base = {"a": record(1.0), "b": record(1.0)}
    calls = []

    def transient(names):  # the second measurement is back to normal
        calls.append(names)
        return {n: record(1.0) for n in names}

    measured = {"a": record(1.10), "b": record(1.0)}
    rows = perf_gate.gate(measured, base, transient)
    assert calls == [["a"]]
    assert perf_gate.slower(rows) == []
    assert measured["a"]["first_median_ms"] == 1.10 and measured["a"]["median_ms"] == 1.0

    measured = {"a": record(1.10), "b": record(1.0)}
    rows = perf_gate.gate(measured, base, lambda names: {n: record(1.11) for n in names})
    assert perf_gate.slower(rows) == ["a"]

    calls.clear()
    rows = perf_gate.gate({"a": record(1.0)}, base, transient)
    assert calls == [] and [r["verdict"] for r in rows] == ["ok", "gone"]


# ------------------------------------------------------------------------------- baselines
def test_find_baseline_takes_the_latest_of_this_device(tmp_path):
    baseline_file(tmp_path / "perf-gate-old.json", {"a": record(1.0)}, date="2026-01-01T10:00:00")
    latest = baseline_file(tmp_path / "perf-gate-new.json", {"a": record(2.0)},
                           date="2026-01-02T09:00:00")
    baseline_file(tmp_path / "perf-gate-other.json", {"a": record(3.0)}, device="NVIDIA H100",
                  date="2026-01-03T00:00:00")
    (tmp_path / "perf-gate-broken.json").write_text("{")
    (path, data), notes = perf_gate.find_baseline(str(tmp_path), SMOKE_DEVICE)
    assert path == str(latest) and data["cases"]["a"]["median_ms"] == 2.0
    assert len(notes) == 2
    assert any("perf-gate-other.json: recorded on 'NVIDIA H100'" in n for n in notes)
    assert any("perf-gate-broken.json: not JSON" in n for n in notes)


def test_find_baseline_without_one(tmp_path):
    assert perf_gate.find_baseline(str(tmp_path), SMOKE_DEVICE) == ((None, None), [])


@pytest.mark.parametrize("content, message", [
    (None, "cannot be read"),
    ("[1, 2", "not JSON"),
    (json.dumps({"benchmark": "benchmarks/gram.py", "device": {"name": "x"}, "cases": {}}),
     "not a benchmarks/perf_gate.py result"),
    (json.dumps({"benchmark": "benchmarks/perf_gate.py", "device": {"name": "x"},
                 "cases": {"gram_rbf": {"median_ms": 0.0, "spread_ms": 0.0}}}),
     "case 'gram_rbf' needs a positive 'median_ms'"),
    (json.dumps({"benchmark": "benchmarks/perf_gate.py", "device": {"name": "x"},
                 "cases": {"gram_rbf": {"median_ms": 1.0}}}),
     "case 'gram_rbf' needs a positive 'median_ms' and a non-negative 'spread_ms'"),
], ids=["missing", "not-json", "other-benchmark", "zero-median", "no-spread"])
def test_load_baseline_refuses_what_is_not_a_gate_result(tmp_path, content, message):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=f"^baseline {path}: {message}"):
        perf_gate.load_baseline(str(path))


# ------------------------------------------------------------------- main, timings planted
@pytest.fixture
def smoke_main(monkeypatch, tmp_path, capsys):
    """``main(argv)`` under --smoke with its temporary folder in ``tmp_path`` and the timings
    planted: ``planted[name]`` ms (default 1.0, spread 0.01). Returns (run, planted, calls)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(perf_gate.tempfile, "tempdir", str(tmp_path))
    planted, calls = {}, []

    def fake_measure(cases, dev, rounds):
        calls.append([c.name for c in cases])
        return {c.name: record(planted.get(c.name, 1.0), shape=c.shape, dtype=c.dtype)
                for c in cases}

    monkeypatch.setattr(perf_gate, "measure", fake_measure)

    def run(*argv):
        code = perf_gate.main(["--smoke", *argv])
        return code, capsys.readouterr().out

    return run, planted, calls


def _smoke_baseline(path, device=SMOKE_DEVICE):
    cases = {c.name: record(1.0, shape=c.shape, dtype=c.dtype)
             for c in perf_gate.headline_cases(smoke=True)}
    return baseline_file(path, cases, device=device)


def test_main_without_baseline_records_and_passes(smoke_main, tmp_path):
    run, _, _ = smoke_main
    out = tmp_path / "run.json"
    code, text = run("--out", str(out))
    assert code == 0
    assert f"no baseline of '{SMOKE_DEVICE}' in {tmp_path}" in text
    assert "the timings are meaningless" in text
    data = perf_gate.load_baseline(str(out))
    assert list(data["cases"]) == NAMES and data["slower"] == []
    assert {r["verdict"] for r in data["comparison"]} == {"new"}


def test_main_skips_baselines_of_another_device(smoke_main, tmp_path):
    run, planted, _ = smoke_main
    other = _smoke_baseline(tmp_path / "perf-gate-h100.json", device="NVIDIA H100")
    planted["gram_rbf"] = 2.0  # slower than the other device's figure: not compared
    code, text = run("--out", str(tmp_path / "run.json"))
    assert code == 0
    assert f"skipped baseline {other}: recorded on 'NVIDIA H100', this is '{SMOKE_DEVICE}'" in text
    assert (tmp_path / "run.json").exists()
    code, text = run("--baseline", str(other), "--out", str(tmp_path / "run2.json"))
    assert code == 0
    assert f"baseline {other} was recorded on 'NVIDIA H100', this is '{SMOKE_DEVICE}': not " \
           "compared" in text


def test_main_reports_a_planted_slowdown_by_name_and_keeps_the_baseline(smoke_main, tmp_path):
    run, planted, calls = smoke_main
    base = _smoke_baseline(tmp_path / "perf-gate-base.json")
    planted.update(linear_causal_fwd=1.10, softmax_full_fwd=1.03)
    out = tmp_path / "run.json"
    code, text = run("--out", str(out))
    assert code == 1
    assert calls == [NAMES, ["linear_causal_fwd"]]  # measured again before being reported
    assert "SLOWER by more than 5%: linear_causal_fwd; not recorded" in text
    assert not out.exists()
    verdicts = {line.split()[0]: line.split()[-1] for line in text.splitlines()
                if line.split() and line.split()[0] in NAMES}
    assert verdicts == {n: ("SLOWER" if n == "linear_causal_fwd" else "ok") for n in NAMES}
    code, text = run("--out", str(out), "--record")
    assert code == 1 and "recorded anyway (--record)" in text
    assert perf_gate.load_baseline(str(out))["slower"] == ["linear_causal_fwd"]
    assert perf_gate.load_baseline(str(base))["cases"]["linear_causal_fwd"]["median_ms"] == 1.0


def test_main_refuses_a_bad_baseline_before_timing(smoke_main, tmp_path, capsys):
    run, _, calls = smoke_main
    with pytest.raises(SystemExit) as exc:
        run("--baseline", str(tmp_path / "none.json"))
    assert exc.value.code == 2 and calls == []
    assert f"baseline {tmp_path / 'none.json'}: cannot be read" in capsys.readouterr().err


def test_main_needs_a_gpu_without_smoke(monkeypatch):
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=r"perf_gate.py needs a CUDA GPU \(or --smoke"):
        perf_gate.main([])


# ------------------------------------------------------------------------------ end to end
@pytest.mark.subprocess
def test_smoke_run_end_to_end(tmp_path, device):
    """The real script under --smoke (the interpreter; with --device cuda the GPU) against a
    baseline that makes the Gram case 10^6 times slower: exit code 1, the case named, and with
    --record a valid JSON of every case."""
    cases = {c.name: record(1e-6, spread=0.0, shape=c.shape, dtype=c.dtype)
             for c in perf_gate.headline_cases(smoke=True) if c.name == "gram_rbf"}
    name = SMOKE_DEVICE if device == "cpu" else perf_gate.device_facts("cuda")["name"]
    base = baseline_file(tmp_path / "base.json", cases, device=name)
    out = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "perf_gate.py"), "--smoke",
                          "--baseline", str(base), "--out", str(out), "--record"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "SLOWER by more than 5%: gram_rbf; recorded anyway" in res.stdout
    data = perf_gate.load_baseline(str(out))
    assert data["device"]["name"] == name and data["smoke"] is True
    assert list(data["cases"]) == NAMES and data["slower"] == ["gram_rbf"]
    assert {"torch", "triton"} <= set(data["versions"])
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    assert data["git"]["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    gram = data["cases"]["gram_rbf"]
    assert gram["first_median_ms"] > 0  # measured again before being reported
    for name, case in data["cases"].items():
        assert len(case["rounds_ms"]) == perf_gate.SMOKE_ROUNDS, name
        assert case["median_ms"] > 0 and case["rate"] > 0, name
        assert case["spread_ms"] == max(case["rounds_ms"]) - min(case["rounds_ms"]), name
    verdicts = {r["case"]: r["verdict"] for r in data["comparison"]}
    assert verdicts == {n: ("SLOWER" if n == "gram_rbf" else "new") for n in NAMES}
