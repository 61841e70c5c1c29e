"""kernelkit._host_memory: the host memory available to a new allocation, and its users."""

import types

import pytest

from kernelkit import _host_memory
from kernelkit.solvers import _memory

GIB = 2**30
#: A machine that has read many files: little free memory, much of it reclaimable page cache.
MEMINFO = """\
MemTotal:       32000000 kB
MemFree:         1048576 kB
MemAvailable:   20971520 kB
Buffers:          100000 kB
Cached:         19000000 kB
"""


@pytest.fixture
def meminfo(tmp_path, monkeypatch):
    """Point the helper at a fake meminfo file (written by the test) and make sysconf report
    the MemFree figure, as Linux does for SC_AVPHYS_PAGES."""
    path = tmp_path / "meminfo"
    monkeypatch.setattr(_host_memory, "MEMINFO", str(path))
    pages = {"SC_AVPHYS_PAGES": 1048576 // 4, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(_host_memory.os, "sysconf", lambda name: pages[name])
    return path


def test_reads_mem_available_not_mem_free(meminfo):
    meminfo.write_text(MEMINFO)
    assert _host_memory.available_bytes() == 20 * GIB


@pytest.mark.parametrize("text", [None, "MemTotal: 1 kB\nMemFree: 1 kB\n", "MemAvailable: lots\n"],
                         ids=["no file", "no MemAvailable line", "malformed"])
def test_falls_back_to_free_pages(meminfo, text):
    if text is not None:
        meminfo.write_text(text)
    assert _host_memory.available_bytes() == 1 * GIB


def test_none_where_nothing_can_be_read(meminfo, monkeypatch):
    def no_sysconf(name):
        raise ValueError(f"unrecognized configuration name {name!r}")

    monkeypatch.setattr(_host_memory.os, "sysconf", no_sysconf)
    assert _host_memory.available_bytes() is None


def _cpu_operator():
    return types.SimpleNamespace(device=types.SimpleNamespace(type="cpu"), triton=False,
                                 bytes_per_value=8)


def test_kernel_ridge_memory_plan_counts_mem_available(meminfo):
    """Issue 18 D: a fit needing more than MemFree but less than MemAvailable is planned, not
    refused ("5.0 GiB is available" while 21.9 GiB was)."""
    meminfo.write_text(MEMINFO)
    assert _memory.available_bytes("cpu") == 20 * GIB
    n, m = 30_000, 8_000  # landmark matrices 4 * 8 * m**2 bytes = 1.9 GiB: > MemFree (1 GiB)
    assert _memory.plan_blocks(_cpu_operator(), n=n, d=10, k=1, m=m, solver="nystrom") > 0
    meminfo.write_text(MEMINFO.replace("20971520", "1048576"))
    with pytest.raises(ValueError, match="but 1 GiB is available"):
        _memory.plan_blocks(_cpu_operator(), n=n, d=10, k=1, m=m, solver="nystrom")
