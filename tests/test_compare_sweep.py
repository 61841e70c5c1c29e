"""Sequence-length sweeps (kernelkit.attention.sweep): crossover logic, report, measurement loop."""

import importlib
import json
import math
import random
from types import SimpleNamespace

import pytest

from kernelkit.attention.comparison.sweeps import SweepReport, crossover_lengths, sweep

# the module, not the function kernelkit.attention.comparison re-exports under the same name
MEASURE_MODULE = importlib.import_module("kernelkit.attention.comparison.measurement")


def row(method, T, time_ms, status="ok", batch=1, peak=1024):
    ran = status == "ok"
    return dict(method=method, label=method, T=T, batch=batch,
                time_ms=time_ms if ran else math.nan, peak_bytes=peak if ran else -1,
                status=status, note="" if ran else status)


def rows_from(times):
    """{method: [time or status per length]} over lengths 256, 512, 1024, 2048."""
    out = []
    for method, values in times.items():
        for T, value in zip((256, 512, 1024, 2048), values):
            out.append(row(method, T, value) if isinstance(value, float) else
                       row(method, T, math.nan, status=value))
    return out


# ------------------------------------------------------------------------------- crossover
def test_crossover_interpolates_on_log_log_axes():
    # ratios 4, 2, 0.5, 0.125: faster from 1024; log ratio is linear in log T between 512
    # (log 2) and 1024 (log 0.5), so it crosses zero half way: sqrt(512 * 1024) = 512 sqrt(2).
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "elu+1": [4.0, 4.0, 4.0, 4.0]})
    got = crossover_lengths(rows)
    assert got["elu+1"]["measured"] == 1024
    assert got["elu+1"]["estimate"] == pytest.approx(512 * math.sqrt(2), rel=1e-12)


def test_crossover_uneven_bracket():
    # ratio 3 at T=512, 1/3^3 at T=2048 (log T step of 2 octaves): zero at 1/4 of the way,
    # T = 512 * 4^(1/4) = 512 sqrt(2).
    rows = [row("softmax", 512, 1.0), row("softmax", 2048, 27.0),
            row("m", 512, 3.0), row("m", 2048, 1.0)]
    assert crossover_lengths(rows)["m"]["estimate"] == pytest.approx(512 * math.sqrt(2), rel=1e-12)


@pytest.mark.parametrize("method_times, measured, has_estimate", [
    ([0.5, 0.5, 0.5, 0.5], 256, False),          # faster everywhere: below the swept range
    ([2.0, 4.0, 16.0, 64.0], None, False),       # never faster
    ([0.5, 4.0, 16.0, 1.0], 2048, True),         # faster at 256, slower, then faster again
    ([2.0, 2.0, 8.0, 32.0], None, False),        # equal time is not faster
    ([2.0, 2.0, 8.0, 31.0], 2048, True),         # faster only at the last length
])
def test_crossover_cases(method_times, measured, has_estimate):
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "m": method_times})
    got = crossover_lengths(rows)["m"]
    assert got["measured"] == measured
    assert (got["estimate"] is not None) == has_estimate
    if has_estimate:  # the estimate lies inside its bracket
        assert measured / 2 <= got["estimate"] < measured


def test_crossover_counts_runs_that_only_one_method_finished():
    # softmax runs out of memory from 1024 on: the method, still running, counts as faster,
    # but no estimate can be interpolated towards a length softmax did not finish.
    rows = rows_from({"softmax": [1.0, 2.0, "oom", "oom"], "m": [4.0, 4.0, 4.0, 4.0]})
    assert crossover_lengths(rows)["m"] == {"measured": 1024, "estimate": None, "noisy": False}
    # the method runs out of memory at the longest length while softmax runs: not faster there
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "m": [4.0, 4.0, 4.0, "oom"]})
    assert crossover_lengths(rows)["m"] == {"measured": None, "estimate": None, "noisy": None}
    # neither ran at 2048: that length is left out
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, "oom"], "m": [4.0, 4.0, 4.0, "skipped"]})
    assert crossover_lengths(rows)["m"]["measured"] == 1024


def test_crossover_row_order_and_several_methods():
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "a": [4.0] * 4, "b": [0.1] * 4})
    random.Random(0).shuffle(rows)
    got = crossover_lengths(rows)
    assert set(got) == {"a", "b"}
    assert got["a"]["measured"] == 1024
    assert got["b"] == {"measured": 256, "estimate": None, "noisy": False}
    assert crossover_lengths([r for r in rows if r["method"] != "softmax"]) == {}
    assert set(crossover_lengths(rows, baseline="a")) == {"softmax", "b"}


def spread(r, lo, hi):
    return dict(r, time_min_ms=lo, time_max_ms=hi)


@pytest.mark.parametrize("bracket_spread, noisy", [
    ({}, False),                                            # medians only: ranges are points
    ({("m", 512): (2.0, 3.5), ("softmax", 512): (1.9, 2.1)}, True),    # overlap before
    ({("m", 1024): (0.5, 9.0)}, True),                      # the method's range reaches softmax's
    ({("m", 1024): (3.9, 4.1), ("softmax", 1024): (7.9, 8.1)}, False),  # apart
    ({("m", 256): (0.1, 99.0)}, False),                     # noise away from the crossover
])
def test_crossover_flags_noisy_timings(bracket_spread, noisy):
    # softmax 1, 2, 8, 32 ms; m 4 ms: m is faster from 1024, the bracket is (512, 1024)
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "m": [4.0, 3.0, 4.0, 4.0]})
    rows = [spread(r, *bracket_spread[(r["method"], r["T"])])
            if (r["method"], r["T"]) in bracket_spread else r for r in rows]
    got = crossover_lengths(rows)["m"]
    assert got["measured"] == 1024 and got["noisy"] is noisy


def test_report_shows_the_spread_and_flags_a_noisy_crossover():
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "m": [4.0, 4.0, 4.0, 4.0]})
    rows = [spread(r, 0.5, 9.0) if (r["method"], r["T"]) == ("m", 1024) else r for r in rows]
    text = SweepReport(rows=rows, crossover=crossover_lengths(rows)).to_markdown()
    assert "| 1024 | 1 | 8 | 4 (0.5–9) |" in text
    assert "| m | 1024 | 724 | overlap (noisy) |" in text
    assert "can swap order between runs" in text
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "m": [4.0, 4.0, 4.0, 4.0]})
    text = SweepReport(rows=rows, crossover=crossover_lengths(rows)).to_markdown()
    assert "| m | 1024 | 724 | apart |" in text and "noisy" not in text


# ---------------------------------------------------------------------------------- report
def make_report():
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, "oom"], "elu+1": [4.0, 4.0, 4.0, 4.0]})
    meta = dict(methods=["softmax", "elu+1"], heads=8, d=64, dtype="bfloat16", device="cuda",
                device_name="Test GPU", causal=True, backward=True, repeat=5, batch=1)
    return SweepReport(rows=rows, crossover=crossover_lengths(rows), meta=meta)


def strict_json(text):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_report_json_roundtrip_is_strict(tmp_path):
    report = make_report()
    data = strict_json(report.to_json())
    oom = [r for r in data["rows"] if r["status"] == "oom"]
    assert oom and oom[0]["time_ms"] is None and oom[0]["peak_bytes"] == -1
    path = tmp_path / "r.json"
    assert report.to_json(path) == path.read_text().rstrip("\n")
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    for source in (path, str(path), path.read_text()):
        back = SweepReport.from_json(source)
        assert back.crossover == report.crossover and back.meta == report.meta
        assert [r["status"] for r in back.rows] == [r["status"] for r in report.rows]
        assert math.isnan(back.rows[3]["time_ms"]) and back.rows[0]["time_ms"] == 1.0
    with pytest.raises(ValueError, match="not a sweep report"):
        SweepReport.from_json('{"rows": []}')


def test_report_markdown():
    text = make_report().to_markdown()
    assert "Test GPU (cuda), bfloat16, H = 8, D = 64, causal, forward + backward" in text
    assert "| T (tokens) | batch | softmax (ms) | elu+1 (ms) |" in text
    assert "| 2048 | 1 | oom | 4 |" in text                       # time table
    assert "| 256 | 1 | 0.0009766 | 0.0009766 |" in text          # memory: 1024 B in MiB
    assert "| elu+1 | 1024 | 724 |" in text                       # crossover sqrt(512 * 1024)
    assert str(make_report()) == text == repr(make_report())


def test_report_markdown_crossover_edge_cases():
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0], "a": [0.1] * 4, "b": [64.0] * 4})
    text = SweepReport(rows=rows, crossover=crossover_lengths(rows)).to_markdown()
    assert "| a | 256 | ≤ 256 (below the range) |" in text
    assert "| b | not up to T = 2048 | - |" in text
    no_base = SweepReport(rows=[r for r in rows if r["method"] != "softmax"]).to_markdown()
    assert "No crossover: the sweep has no 'softmax' rows" in no_base


def test_report_of_softmax_alone_says_it_is_the_reference():
    # softmax alone has rows (its own time and memory) but nothing to cross over with
    rows = rows_from({"softmax": [1.0, 2.0, 8.0, 32.0]})
    text = SweepReport(rows=rows, crossover=crossover_lengths(rows)).to_markdown()
    assert "| 2048 | 1 | 32 |" in text
    assert ("No crossover: softmax is the reference of the crossover and the only method swept; "
            "sweep other methods with it (e.g. elu+1, favor+:256)") in text
    assert "has no 'softmax' rows" not in text


# ------------------------------------------------------------------------------ the sweep
def test_sweep_runs_methods_on_the_cpu():
    report = sweep(["softmax", "elu+1"], [32, 16], heads=1, d=16, device="cpu", repeat=1,
                   progress=False)
    assert [(r["method"], r["T"]) for r in report.rows] == [
        ("softmax", 16), ("elu+1", 16), ("softmax", 32), ("elu+1", 32)]
    for r in report.rows:
        assert r["status"] == "ok" and r["time_ms"] > 0 and r["peak_bytes"] > 0
        assert r["batch"] == 1 and r["note"] == ""
        assert r["time_min_ms"] == r["time_ms"] == r["time_max_ms"]  # repeat=1
    assert set(report.crossover) == {"elu+1"}
    m = report.meta
    assert (m["lengths"], m["dtype"], m["device"], m["causal"]) == ([16, 32], "float32", "cpu", True)
    assert m["versions"]["torch"] and m["timestamp"]


def test_sweep_rows_keep_the_spread_of_the_repeats(monkeypatch):
    times = iter([3.0, 1.0, 2.0, 50.0, 5.0])
    real = MEASURE_MODULE._measure_cpu

    def fake_cpu(fn, warmup, repeat):
        _, peak = real(fn, warmup, repeat)
        return [next(times) for _ in range(repeat)], peak

    monkeypatch.setattr(MEASURE_MODULE, "_measure_cpu", fake_cpu)
    report = sweep(["softmax"], [16], heads=1, d=8, device="cpu", repeat=5, progress=False)
    r = report.rows[0]
    assert (r["time_min_ms"], r["time_ms"], r["time_max_ms"]) == (1.0, 3.0, 50.0)
    back = SweepReport.from_json(report.to_json())
    assert back.rows[0]["time_max_ms"] == 50.0


def test_sweep_plans_and_runs_on_the_device(device):
    # on cuda the plan reads the GPU's free memory (the inputs live there), not host memory
    report = sweep(["softmax", "elu+1"], [64, 128], heads=1, d=16, device=device, repeat=3,
                   progress=False)
    assert [r["status"] for r in report.rows] == ["ok"] * 4
    for r in report.rows:
        assert 0 < r["time_min_ms"] <= r["time_ms"] <= r["time_max_ms"]
    assert report.meta["device"] == device


def test_sweep_backward():
    report = sweep(["softmax"], [16], heads=1, d=16, device="cpu", repeat=1, backward=True,
                   is_causal=False, progress=False)
    assert report.rows[0]["status"] == "ok" and report.meta["backward"] is True


class FakeMeasure:
    """Stands in for kernelkit.attention.comparison.measurement.measure: runs fn once, times from
    a table."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, fn, *, device, warmup=1, repeat=5):
        self.calls.append((device, warmup, repeat))
        result = self.table[len(self.calls) - 1]
        if isinstance(result, Exception):
            raise result
        if result == "oom":
            return SimpleNamespace(time_ms=math.nan, peak_bytes=-1, device=device, status="oom",
                                   times_ms=())
        fn()
        return SimpleNamespace(time_ms=result, peak_bytes=100, device=device, status="ok",
                               times_ms=(result,) * repeat)


def test_sweep_oom_then_skip_and_unsupported_methods(monkeypatch):
    # call order: (softmax, elu+1) at 16, then at 32; elu+1 is only measured at 16.
    fake = FakeMeasure([1.0, NotImplementedError("no such path"), "oom"])
    monkeypatch.setattr(MEASURE_MODULE, "measure", fake)
    report = sweep(["softmax", "elu+1"], [16, 32, 64], heads=1, d=8, device="cpu", repeat=3,
                   progress=False)
    status = {(r["method"], r["T"]): (r["status"], r["note"]) for r in report.rows}
    assert status[("softmax", 16)] == ("ok", "")
    assert status[("elu+1", 16)] == ("skipped", "NotImplementedError: no such path")
    assert status[("softmax", 32)] == ("oom", "out of memory")
    assert status[("elu+1", 32)] == ("skipped", "NotImplementedError: no such path")
    assert status[("softmax", 64)] == ("skipped", "out of memory at T = 32")
    assert len(fake.calls) == 3 and fake.calls[0] == ("cpu", 1, 3)


def test_sweep_tokens_keep_batch_times_length(monkeypatch):
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0] * 3))
    report = sweep(["softmax"], [16, 32, 64], heads=1, d=8, device="cpu", tokens=64,
                   progress=False)
    assert [r["batch"] for r in report.rows] == [4, 2, 1]
    assert "| 16 | 4 |" in report.to_markdown()


def test_progress_bar(monkeypatch, capsys):
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0] * 4))
    sweep(["softmax", "elu+1"], [16, 32], heads=1, d=8, device="cpu", progress=True)
    err = capsys.readouterr().err
    assert "sweep" in err and "/4" in err and "elu+1 T=32" in err
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0] * 4))
    sweep(["softmax", "elu+1"], [16, 32], heads=1, d=8, device="cpu", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kwargs, error, fragment", [
    (dict(tokens=64, batch=2), ValueError, "give tokens or batch, not both"),
    (dict(tokens=64, lengths=[16, 128]), ValueError,
     "tokens=64 is less than one sequence of the longest length T = 128"),
    (dict(dtype="float64"), ValueError, "dtype must be one of float32, float16, bfloat16"),
    (dict(lengths=[16, 16]), ValueError, "lengths must not repeat"),
    (dict(lengths=[]), ValueError, "at least one sequence length"),
    (dict(lengths="16"), TypeError, "lengths must be a sequence of ints"),
    (dict(lengths=[16, 0]), ValueError, "each length must be at least 1"),
    (dict(methods=["softmax", "softmax"]), ValueError, "'softmax' more than once"),
    (dict(methods=[]), ValueError, "at least one method"),
    (dict(methods=["no-such-method"]), ValueError, "no-such-method"),
    (dict(heads=0), ValueError, "heads must be at least 1"),
    (dict(repeat=1.5), TypeError, "repeat must be an int"),
    (dict(progress="yes"), TypeError, "progress must be True, False or None"),
    (dict(is_causal=1), TypeError, "is_causal must be True or False"),
    (dict(device="tpu"), ValueError, "device must be one of"),
])
def test_sweep_rejects_bad_arguments(kwargs, error, fragment):
    args = dict(methods=["softmax"], lengths=[16], d=8, device="cpu")
    args.update(kwargs)
    with pytest.raises(error, match=fragment):
        sweep(**args)


def test_sweep_cuda_without_gpu(no_gpu):
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        sweep(["softmax"], [16], device="cuda")


def test_sweep_skips_a_method_whose_planned_memory_does_not_fit(monkeypatch):
    # softmax's plain-PyTorch path holds (B, H, T, T) float32 arrays: 3 x 4 MiB at T = 1024;
    # with 8 MiB available it is skipped there (and after), elu+1 still runs.
    launch = importlib.import_module("kernelkit_gpu._launch")
    monkeypatch.setattr(launch, "INTERPRET", False)
    memory = importlib.import_module("kernelkit.attention.comparison.memory")
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**20)
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0] * 4))
    report = sweep(["softmax", "elu+1"], [256, 1024, 2048], heads=1, d=8, device="cpu",
                   progress=False)
    status = {(r["method"], r["T"]): (r["status"], r["note"]) for r in report.rows}
    assert status[("softmax", 256)] == ("ok", "")
    note = "needs about 12.2 MiB of memory, 8.0 MiB available"  # + 0.2 MiB of inputs
    assert status[("softmax", 1024)] == ("skipped", note)
    assert status[("softmax", 2048)] == ("skipped", note + " at T = 1024")
    assert [status[("elu+1", T)][0] for T in (256, 1024, 2048)] == ["ok"] * 3


def test_sweep_refuses_lengths_whose_inputs_do_not_fit(monkeypatch):
    memory = importlib.import_module("kernelkit.attention.comparison.memory")
    monkeypatch.setattr(memory, "available_memory", lambda: 2**20)
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([]))  # nothing may run
    with pytest.raises(ValueError, match=r"the inputs at T = 4096 \(B x H x T x D = 1 x 2 x "
                                         r"4096 x 8, float32\) need about 1.2 MiB but 1.0 MiB "
                                         r"of memory is available; sweep shorter lengths: they "
                                         r"fit up to "
                                         r"about T = 3276"):
        sweep(["softmax"], [16, 4096], heads=2, d=8, device="cpu", progress=False)


def test_sweep_plans_the_feature_arrays_of_linear_methods(monkeypatch):
    # favor+:256 holds about LINEAR_ARRAYS (B, H, T, M + D) float32 arrays: 10.3 MiB at T = 1024
    memory = importlib.import_module("kernelkit.attention.comparison.memory")
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**20)
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0]))
    report = sweep(["favor+:256"], [64, 1024], heads=1, d=8, device="cpu", progress=False)
    assert [(r["status"], r["note"]) for r in report.rows] == [
        ("ok", ""), ("skipped", "needs about 10.5 MiB of memory, 8.0 MiB available")]


@pytest.mark.subprocess
def test_available_memory_counts_the_address_space_limit():
    # ulimit -v in a child process: the limit minus what the process has mapped, below 4 GiB
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30,) * 2); "
            "from kernelkit.attention.comparison.memory import available_memory as a; print(a())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=root,
                         env=dict(os.environ, PYTHONPATH=str(root))).stdout
    assert 0 < int(out) < 4 * 2**30


def test_a_sweep_that_measures_nothing_says_why(monkeypatch):
    # every method skipped at every length: no report to plot, one error with the reasons
    launch = importlib.import_module("kernelkit_gpu._launch")
    monkeypatch.setattr(launch, "INTERPRET", False)  # softmax on its (B, H, T, T) path
    memory = importlib.import_module("kernelkit.attention.comparison.memory")
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * 2**20)
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([]))  # nothing may run
    with pytest.raises(ValueError, match=(
            r"^the sweep measured nothing \(no method ran at any length\): softmax at T = 1024: "
            r"needs about 12\.2 MiB of memory, 8\.0 MiB available; favor\+:256 at T = 1024: "
            r"needs about 10\.5 MiB of memory, 8\.0 MiB available$")):
        sweep(["softmax", "favor+:256"], [1024, 2048], heads=1, d=8, device="cpu",
              progress=False)


def test_progress_is_one_line_per_run_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    # a pipe or a log file gets a flushed line per finished run (tqdm draws nothing there)
    monkeypatch.setattr(MEASURE_MODULE, "measure", FakeMeasure([1.0, "oom", 2.5]))
    sweep(["softmax", "elu+1"], [16, 32], heads=1, d=8, device="cpu")
    assert capsys.readouterr().err.splitlines() == [
        "sweep 1/4: softmax at T = 16: 1 (1–1) ms, 9.537e-05 MiB peak beyond the inputs",
        "sweep 2/4: elu+1 at T = 16: oom (out of memory)",
        "sweep 3/4: softmax at T = 32: 2.5 (2.5–2.5) ms, 9.537e-05 MiB peak beyond the inputs",
        "sweep 4/4: elu+1 at T = 32: skipped (out of memory at T = 16)",
    ]


def test_ctrl_c_keeps_the_runs_finished_before_it(monkeypatch):
    # Ctrl-C while the third run is still in its (endless) call: the sweep stops at once with
    # the two finished runs; the abandoned call is released at the end
    import _thread
    import signal
    import threading

    from kernelkit.attention.comparison.sweeps import SweepInterrupted

    release = threading.Event()
    table = FakeMeasure([1.0, 2.0])

    def measure(fn, **kwargs):
        if len(table.calls) < 2:
            return table(fn, **kwargs)
        _thread.interrupt_main()  # Ctrl-C, as the main thread waits for this call
        release.wait(60)
        return table(fn, **kwargs)

    monkeypatch.setattr(MEASURE_MODULE, "measure", measure)
    # interrupt_main does nothing where SIGINT is ignored (a background job of a shell)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SweepInterrupted) as info:
            sweep(["softmax", "elu+1"], [16, 32], heads=1, d=8, device="cpu", progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
        release.set()
    assert isinstance(info.value, KeyboardInterrupt)
    report = info.value.report
    assert [(r["method"], r["T"], r["time_ms"]) for r in report.rows] == [
        ("softmax", 16, 1.0), ("elu+1", 16, 2.0)]
    assert report.meta["interrupted"] == {"method": "softmax", "T": 32}
    assert set(report.crossover) == {"elu+1"}
    text = report.to_markdown()
    assert "Interrupted (Ctrl-C) at softmax, T = 32: the tables hold the runs finished" in text
    assert "| 16 | 1 | 1 (1–1) | 2 (2–2) |" in text
    assert SweepReport.from_json(report.to_json()).meta["interrupted"] == {
        "method": "softmax", "T": 32}


def test_sweep_seconds_counts_the_runs_the_memory_plan_lets_run(monkeypatch):
    from kernelkit.attention.comparison import sweep_plan

    launch = importlib.import_module("kernelkit_gpu._launch")
    monkeypatch.setattr(launch, "INTERPRET", False)  # the plain-PyTorch path the model is for
    memory = importlib.import_module("kernelkit.attention.comparison.memory")
    monkeypatch.setattr(memory, "available_memory", lambda: 2**40)
    monkeypatch.setattr(sweep_plan, "CPU_SECONDS", {"quadratic": 1e-9, "features": 1e-8})
    args = dict(heads=2, d=16, device="cpu", repeat=3)
    # 5 calls per run (warm-up, 3 timed, memory); softmax B·H·T²·D, elu+1 B·H·T·(M + D)·D
    softmax = 5 * 1e-9 * 2 * 16 * (256**2 + 512**2)
    elu = 5 * 1e-8 * 2 * (16 + 16) * 16 * (256 + 512)
    assert sweep_plan.sweep_seconds(["softmax", "elu+1"], [256, 512], **args) == pytest.approx(
        softmax + elu, rel=1e-12)
    assert sweep_plan.sweep_seconds(["softmax"], [256], backward=True, **args) == pytest.approx(
        sweep_plan.BACKWARD_COST * 5 * 1e-9 * 2 * 16 * 256**2, rel=1e-12)
    # softmax needs 3 (1, 2, 512, 512) float32 arrays = 6 MiB at T = 512: skipped there
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * 2**20)
    assert sweep_plan.sweep_seconds(["softmax", "elu+1"], [256, 512], **args) == pytest.approx(
        5 * 1e-9 * 2 * 16 * 256**2 + elu, rel=1e-12)
    # no estimate under the Triton interpreter; bad arguments as sweep()
    monkeypatch.setattr(launch, "INTERPRET", True)
    assert sweep_plan.sweep_seconds(["softmax"], [256], **args) is None
    with pytest.raises(ValueError, match="'softmax' more than once"):
        sweep_plan.sweep_seconds(["softmax", "softmax"], [256], **args)
