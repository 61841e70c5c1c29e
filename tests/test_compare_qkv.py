"""Reading q, k, v from files (kernelkit.attention.comparison.qkv.load_qkv) and synthetic inputs."""

import io
import re
import zipfile

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_safetensors_numpy
from safetensors.torch import save_file as save_safetensors_torch

from kernelkit.attention.comparison.qkv import load_qkv, qkv_shapes, synthetic_qkv

# (B, H, T, S, D, Dv): S != T and Dv != D so a swapped axis shows.
B, H, T, S, D, DV = 2, 3, 5, 7, 4, 6
FULL = {"q": (B, H, T, D), "k": (B, H, S, D), "v": (B, H, S, DV)}
RANKS = {4: lambda s: s, 3: lambda s: s[1:], 2: lambda s: s[2:]}


def arrays(rng, rank, dtype=np.float32):
    return {n: rng.standard_normal(RANKS[rank](shape)).astype(dtype) for n, shape in FULL.items()}


def save(path, data):
    """Write a dict of NumPy arrays in the format given by the path's suffix."""
    suffix = path.suffix
    if suffix == ".npz":
        np.savez(path, **data)
    elif suffix in (".pt", ".pth"):
        torch.save({n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in data.items()}, path)
    else:
        save_safetensors_numpy({n: np.ascontiguousarray(a) for n, a in data.items()}, str(path))
    return path


def expected_4d(a):
    return a.reshape((1,) * (4 - a.ndim) + a.shape)


@pytest.mark.parametrize("rank", [4, 3, 2], ids=["BHTD", "HTD", "TD"])
@pytest.mark.parametrize("suffix", [".npz", ".pt", ".pth", ".safetensors"])
def test_roundtrip_every_format_and_rank(tmp_path, rng, suffix, rank):
    data = arrays(rng, rank)
    q, k, v = load_qkv(save(tmp_path / f"qkv{suffix}", data))
    for name, got in zip("qkv", (q, k, v)):
        assert got.shape == expected_4d(data[name]).shape
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected_4d(data[name]))


@pytest.mark.parametrize("rank", [4, 2], ids=["BHTD", "TD"])
@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_shapes_from_the_headers_without_the_data(tmp_path, rng, monkeypatch, suffix, rank):
    path = save(tmp_path / f"qkv{suffix}", arrays(rng, rank))
    expected = tuple(expected_4d(np.empty(RANKS[rank](FULL[n]))).shape for n in "qkv")

    def never(*args, **kwargs):
        raise AssertionError("array data read")

    monkeypatch.setattr(np.lib.format, "read_array", never)  # .npz members
    monkeypatch.setattr("safetensors.numpy.load_file", never)
    assert qkv_shapes(path) == expected


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_shapes_check_the_arrays_fit_together(tmp_path, rng, suffix):
    data = arrays(rng, 4)
    data["v"] = data["v"][:, :, :3]
    path = save(tmp_path / f"qkv{suffix}", data)
    with pytest.raises(ValueError, match=r"v has shape \(2, 3, 3, 6\) but k has shape"):
        qkv_shapes(path)
    del data["k"]
    with pytest.raises(ValueError, match="has no array named 'k'"):
        qkv_shapes(save(tmp_path / f"qk{suffix}", data))


def test_extra_entries_are_ignored_and_other_dtypes(tmp_path, rng):
    data = arrays(rng, 3, np.float64)
    data["k"] = (10 * data["k"]).astype(np.int32)  # integers become float64
    data["mask"] = np.ones(3, dtype=bool)
    q, k, v = load_qkv(save(tmp_path / "qkv.npz", data))
    assert q.dtype == np.float64 and k.dtype == np.float64
    np.testing.assert_array_equal(k[0], data["k"].astype(np.float64))


def test_bfloat16_safetensors_and_pt_become_exact_float32(tmp_path, rng):
    tensors = {n: torch.from_numpy(a).to(torch.bfloat16) for n, a in arrays(rng, 4).items()}
    save_safetensors_torch(tensors, str(tmp_path / "qkv.safetensors"))
    torch.save(tensors, tmp_path / "qkv.pt")
    for path in (tmp_path / "qkv.safetensors", tmp_path / "qkv.pt"):
        q, k, v = load_qkv(path)
        assert q.dtype == np.float32
        np.testing.assert_array_equal(v, tensors["v"].float().numpy())


def test_inputs_are_not_modified(tmp_path, rng):
    data = arrays(rng, 2)
    copy = {n: a.copy() for n, a in data.items()}
    path = save(tmp_path / "qkv.npz", data)
    q, _, _ = load_qkv(path)
    q[...] = 0.0
    again, _, _ = load_qkv(path)
    np.testing.assert_array_equal(again[0, 0], copy["q"])


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_missing_array_names_it_and_lists_the_file(tmp_path, rng, suffix):
    data = arrays(rng, 4)
    del data["v"]
    path = save(tmp_path / f"qkv{suffix}", data)
    with pytest.raises(ValueError, match=r"no array named 'v' \(it holds 'k', 'q'\)") as info:
        load_qkv(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
@pytest.mark.parametrize("shape", [(7,), (1, 2, 3, 4, 5)], ids=["1d", "5d"])
def test_wrong_rank_names_array_and_shape(tmp_path, rng, suffix, shape):
    data = arrays(rng, 4)
    data["k"] = rng.standard_normal(shape).astype(np.float32)
    with pytest.raises(ValueError, match=rf"k has shape {re.escape(str(shape))}"):
        load_qkv(save(tmp_path / f"qkv{suffix}", data))


@pytest.mark.parametrize("name, shape, fragment", [
    ("v", (B, H, S + 1, DV), f"v has shape {(B, H, S + 1, DV)} but k has shape {(B, H, S, D)}"),
    ("k", (B, H, S, D + 1), f"k has shape {(B, H, S, D + 1)} but q has shape {(B, H, T, D)}"),
    ("k", (B, H + 1, S, D), f"k has shape {(B, H + 1, S, D)} but q has shape {(B, H, T, D)}"),
])
def test_mismatched_shapes_name_both_arrays(tmp_path, rng, name, shape, fragment):
    data = arrays(rng, 4)
    data[name] = rng.standard_normal(shape).astype(np.float32)
    if name == "k":  # keep k and v consistent so the q/k check is the one that fires
        data["v"] = rng.standard_normal(shape[:-1] + (DV,)).astype(np.float32)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        load_qkv(save(tmp_path / "qkv.npz", data))


def test_mixed_ranks_list_every_shape(tmp_path, rng):
    data = arrays(rng, 4)
    data["q"] = data["q"][0]
    with pytest.raises(ValueError, match=re.escape(f"q {(H, T, D)}, k {(B, H, S, D)}")):
        load_qkv(save(tmp_path / "qkv.npz", data))


@pytest.mark.parametrize("bad, fragment", [
    (np.full((T, D), np.nan, dtype=np.float32), "NaN or infinite"),
    (np.zeros((0, D), dtype=np.float32), "empty"),
    (np.array([["a", "b"]]), "expected real numbers"),
])
def test_bad_values(tmp_path, rng, bad, fragment):
    data = arrays(rng, 2)
    data["q"] = bad
    with pytest.raises(ValueError, match=fragment):
        load_qkv(save(tmp_path / "qkv.npz", data))


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".safetensors"])
def test_corrupt_file(tmp_path, suffix):
    path = tmp_path / f"qkv{suffix}"
    path.write_bytes(b"this is not a tensor file at all" * 4)
    with pytest.raises(ValueError, match=r"qkv file .* (is not a valid|could not be read)"):
        load_qkv(path)


def test_header_declaring_a_huge_shape_is_refused_before_allocating(tmp_path, monkeypatch):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (2, 10**7, 10**6)})
    with zipfile.ZipFile(tmp_path / "qkv.npz", "w") as archive:
        for name in "qkv":
            archive.writestr(f"{name}.npy", header.getvalue() + bytes(16))

    def never(*args, **kwargs):
        raise AssertionError("the array must not be read")

    monkeypatch.setattr(np.lib.format, "read_array", never)
    with pytest.raises(ValueError, match=r"'q' declares shape \(2, 10000000, 1000000\) of "
                                         r"float32 \(80000000000000 bytes\) but the file holds "
                                         r"only 16 bytes"):
        load_qkv(tmp_path / "qkv.npz")


@pytest.mark.parametrize("cut", ["half", "member data"])
def test_truncated_npz(tmp_path, rng, cut):
    path = save(tmp_path / "qkv.npz", arrays(rng, 4))
    data = path.read_bytes()
    if cut == "half":  # the zip directory at the end is gone
        path.write_bytes(data[: len(data) // 2])
        match = "is not a valid .npz archive"
    else:  # directory intact, the bytes of k damaged
        start = data.index(b"k.npy") + 200
        path.write_bytes(data[:start] + bytes(64) + data[start + 64:])
        match = "array 'k' could not be read; the file is truncated or corrupt"
    with pytest.raises(ValueError, match=match):
        load_qkv(path)


def test_refuses_pickles(tmp_path, rng):
    np.savez(tmp_path / "obj.npz", q=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="refuses to unpickle"):
        load_qkv(tmp_path / "obj.npz")

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"q": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="weights_only=True"):
        load_qkv(tmp_path / "evil.pt")


def test_pt_must_hold_a_dict_of_tensors(tmp_path):
    torch.save(torch.zeros(3, 4), tmp_path / "t.pt")
    with pytest.raises(ValueError, match="holds a Tensor; expected a dict"):
        load_qkv(tmp_path / "t.pt")
    torch.save({"q": [1.0], "k": torch.zeros(2, 2), "v": torch.zeros(2, 2)}, tmp_path / "l.pt")
    with pytest.raises(ValueError, match="'q' is a list, not a torch.Tensor"):
        load_qkv(tmp_path / "l.pt")


def test_path_errors(tmp_path, rng):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_qkv(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="is a directory"):
        load_qkv(tmp_path)
    np.save(tmp_path / "q.npy", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"unsupported extension '\.npy'; expected one of \.npz"):
        load_qkv(tmp_path / "q.npy")
    np.save(tmp_path / "renamed.npy", np.zeros((2, 2)))
    (tmp_path / "renamed.npy").rename(tmp_path / "renamed.npz")
    with pytest.raises(ValueError, match="single .npy array, not an .npz archive"):
        load_qkv(tmp_path / "renamed.npz")
    with pytest.raises(TypeError, match="path must be a file path"):
        load_qkv(3)


# --------------------------------------------------------------------------- synthetic
def test_synthetic_shapes_dtype_and_determinism():
    q, k, v = synthetic_qkv(2, 3, 5, 4, S=7, dv=6, seed=1, dtype=np.float64)
    assert (q.shape, k.shape, v.shape) == ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))
    assert q.dtype == k.dtype == v.dtype == np.float64
    again = synthetic_qkv(2, 3, 5, 4, S=7, dv=6, seed=1, dtype=np.float64)
    other = synthetic_qkv(2, 3, 5, 4, S=7, dv=6, seed=2, dtype=np.float64)
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v), again))
    assert not np.array_equal(q, other[0])
    q32, _, _ = synthetic_qkv(1, 1, 5, 4)
    assert q32.dtype == np.float32 and synthetic_qkv(1, 1, 5, 4)[1].shape == (1, 1, 5, 4)


@pytest.mark.parametrize("temperature", [0.5, 4.0])
def test_synthetic_temperature_is_the_spread_of_scaled_scores(temperature):
    # E[(q.k / sqrt(D))^2] = D * temperature^2 / D: the scores' std is the temperature.
    q, k, v = synthetic_qkv(1, 4, 256, 32, temperature=temperature, seed=3, dtype=np.float64)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(32)
    assert scores.std() == pytest.approx(temperature, rel=0.05)
    assert v.std() == pytest.approx(1.0, rel=0.05)


def test_higher_temperature_gives_peakier_softmax():
    def peak(temperature):
        q, k, _ = synthetic_qkv(1, 2, 128, 16, temperature=temperature, seed=0, dtype=np.float64)
        s = q @ np.swapaxes(k, -1, -2) / 4.0
        a = np.exp(s - s.max(-1, keepdims=True))
        return float((a / a.sum(-1, keepdims=True)).max(-1).mean())

    assert peak(0.5) < 0.1 < 0.5 < peak(6.0)


def test_clusters_put_three_quarters_of_the_energy_on_c_directions():
    # rows are sqrt(t) (sqrt(3/4) centre + sqrt(1/4) noise): the C centre directions carry
    # about 3/4 of the energy, against C / D of it for independent entries.
    def top_share(clusters):
        _, k, _ = synthetic_qkv(1, 1, 8, 64, S=2048, temperature=2.0, clusters=clusters, seed=4,
                                dtype=np.float64)
        s = np.linalg.svd(k[0, 0], compute_uv=False) ** 2
        return s[:4].sum() / s.sum()

    assert 0.7 < top_share(4) < 0.85
    assert top_share(None) < 0.15
    q, k, _ = synthetic_qkv(1, 1, 4096, 8, temperature=3.0, clusters=4, seed=5)
    assert q.var() == pytest.approx(3.0, rel=0.3)  # entries keep variance temperature


@pytest.mark.parametrize("kwargs, error, fragment", [
    (dict(clusters=0), ValueError, "clusters must be at least 1"),
    (dict(clusters=2.0), TypeError, "clusters must be an int"),
    (dict(batch=0), ValueError, "batch must be at least 1"),
    (dict(T=2.5), TypeError, "T must be an int"),
    (dict(S=0), ValueError, "S must be at least 1"),
    (dict(temperature=0.0), ValueError, "temperature must be a positive finite number"),
    (dict(temperature=float("inf")), ValueError, "temperature must be a positive"),
    (dict(seed=None), TypeError, "seed must be an int"),
    (dict(dtype=np.int32), ValueError, "dtype must be a floating-point type"),
])
def test_synthetic_rejects_bad_arguments(kwargs, error, fragment):
    args = dict(batch=1, heads=1, T=4, d=2)
    args.update(kwargs)
    sizes = [args.pop(n) for n in ("batch", "heads", "T", "d")]
    with pytest.raises(error, match=fragment):
        synthetic_qkv(*sizes, **args)
