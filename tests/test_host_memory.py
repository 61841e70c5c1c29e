"""kernelkit._util.host_memory: the host memory available to a new allocation, and its users."""

import types

import pytest

from kernelkit._util import host_memory
from kernelkit.estimators import _ridge_memory

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
    monkeypatch.setattr(host_memory, "MEMINFO", str(path))
    monkeypatch.setattr(host_memory, "PROC_CGROUP", str(tmp_path / "no-cgroup"))  # this machine's own
    pages = {"SC_AVPHYS_PAGES": 1048576 // 4, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(host_memory.os, "sysconf", lambda name: pages[name])
    return path


def test_reads_mem_available_not_mem_free(meminfo):
    meminfo.write_text(MEMINFO)
    assert host_memory.available_bytes() == 20 * GIB


@pytest.mark.parametrize("text", [None, "MemTotal: 1 kB\nMemFree: 1 kB\n", "MemAvailable: lots\n"],
                         ids=["no file", "no MemAvailable line", "malformed"])
def test_falls_back_to_free_pages(meminfo, text):
    if text is not None:
        meminfo.write_text(text)
    assert host_memory.available_bytes() == 1 * GIB


def test_none_where_nothing_can_be_read(meminfo, monkeypatch):
    def no_sysconf(name):
        raise ValueError(f"unrecognized configuration name {name!r}")

    monkeypatch.setattr(host_memory.os, "sysconf", no_sysconf)
    assert host_memory.available_bytes() is None


def _cpu_operator():
    return types.SimpleNamespace(device=types.SimpleNamespace(type="cpu"), triton=False,
                                 bytes_per_value=8)


def test_kernel_ridge_memory_plan_counts_mem_available(meminfo):
    """Issue 18 D: a fit needing more than MemFree but less than MemAvailable is planned, not
    refused ("5.0 GiB is available" while 21.9 GiB was)."""
    meminfo.write_text(MEMINFO)
    assert _ridge_memory.available_bytes("cpu") == 20 * GIB
    n, m = 30_000, 8_000  # landmark matrices 4 * 8 * m**2 bytes = 1.9 GiB: > MemFree (1 GiB)
    assert _ridge_memory.plan_blocks(_cpu_operator(), n=n, d=10, k=1, m=m, solver="nystrom") > 0
    meminfo.write_text(MEMINFO.replace("20971520", "1048576"))
    with pytest.raises(ValueError, match="but 1 GiB is available"):
        _ridge_memory.plan_blocks(_cpu_operator(), n=n, d=10, k=1, m=m, solver="nystrom")


# ----------------------------------------------------------------------------- memory cgroups
def _write(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)


@pytest.fixture
def cgroups(meminfo, tmp_path, monkeypatch):
    """A fake /proc/self/cgroup and cgroup mount (``root``); meminfo reports 20 GiB available."""
    meminfo.write_text(MEMINFO)
    root = tmp_path / "sys-fs-cgroup"
    root.mkdir()
    monkeypatch.setattr(host_memory, "CGROUP_ROOT", str(root))
    proc = tmp_path / "proc-self-cgroup"
    monkeypatch.setattr(host_memory, "PROC_CGROUP", str(proc))
    return root, proc


def test_cgroup_v2_limit_caps_mem_available(cgroups):
    """Issue 37 N7: inside a 1 GiB cgroup the machine's 20 GiB are not available."""
    root, proc = cgroups
    proc.write_text("0::/job/step\n")
    _write(root, {"memory.max": "max\n"})  # the root has no limit
    _write(root / "job" / "step", {"memory.max": f"{GIB}\n", "memory.current": f"{GIB // 4}\n",
                                    "memory.stat": f"anon 1\ninactive_file {GIB // 8}\n"})
    assert host_memory.available_bytes() == GIB - GIB // 4 + GIB // 8


def test_cgroup_v2_an_ancestor_limit_binds(cgroups):
    root, proc = cgroups
    proc.write_text("0::/job/step\n")
    _write(root / "job", {"memory.max": f"{2 * GIB}\n", "memory.current": f"{GIB + GIB // 2}\n"})
    _write(root / "job" / "step", {"memory.max": "max\n", "memory.current": "0\n"})
    assert host_memory.available_bytes() == GIB // 2


def test_cgroup_v2_without_a_limit_leaves_mem_available(cgroups):
    root, proc = cgroups
    proc.write_text("0::/\n")
    _write(root, {"memory.max": "max\n", "memory.current": f"{GIB}\n"})
    assert host_memory.available_bytes() == 20 * GIB


def test_cgroup_v1_limit_and_hierarchical_limit(cgroups):
    root, proc = cgroups
    proc.write_text("5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n")
    memory = root / "memory"
    _write(memory, {"memory.limit_in_bytes": "9223372036854771712\n",
                    "memory.usage_in_bytes": f"{8 * GIB}\n"})  # v1's "no limit"
    stat = f"cache 5\nhierarchical_memory_limit {3 * GIB}\ntotal_inactive_file {GIB // 2}\n"
    _write(memory / "docker" / "abc", {"memory.limit_in_bytes": f"{4 * GIB}\n",
                                       "memory.usage_in_bytes": f"{GIB}\n", "memory.stat": stat})
    assert host_memory.available_bytes() == 3 * GIB - GIB + GIB // 2


def test_cgroup_v1_container_sees_its_own_cgroup_as_the_root(cgroups):
    """Without a cgroup namespace the path names the host's hierarchy, which the container's
    mount does not hold: the mount's root is the container's own cgroup."""
    root, proc = cgroups
    proc.write_text("4:memory:/docker/0123abcd\n")
    _write(root / "memory", {"memory.limit_in_bytes": f"{GIB}\n",
                             "memory.usage_in_bytes": f"{GIB // 2}\n"})
    assert host_memory.available_bytes() == GIB // 2


def test_cgroup_files_unreadable_or_malformed_are_ignored(cgroups):
    root, proc = cgroups
    proc.write_text("garbage line\n0::/a\n")
    _write(root / "a", {"memory.max": "lots\n", "memory.current": "x\n"})
    assert host_memory.available_bytes() == 20 * GIB


def test_kernel_ridge_plan_refuses_a_fit_larger_than_the_cgroup(cgroups):
    """Issue 37 N7: a 2 GB fit inside a 1 GiB cgroup raises the documented ValueError (it was
    accepted on the machine's 22 GiB, then OOM-killed)."""
    root, proc = cgroups
    proc.write_text("0::/\n")
    _write(root, {"memory.max": f"{GIB}\n", "memory.current": "0\n"})
    with pytest.raises(ValueError, match="but 1 GiB is available"):
        _ridge_memory.plan_blocks(_cpu_operator(), n=30_000, d=10, k=1, m=8_000, solver="nystrom")
