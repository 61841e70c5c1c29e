"""Softmax vs elu+1 vs FAVOR+ vs Nystrom attention on synthetic peaky attention (CPU, seconds).

    python examples/compare_attention.py [OUT_DIR [T]]

Prints the comparison table and writes the heatmaps and error-vs-feature-count plots (PNG and
SVG) to OUT_DIR, or to a new temporary directory. T is the sequence length (default 256: about
12 s of CPU time).
"""
import sys
import tempfile

from kernelkit.attention import compare
from kernelkit.attention.comparison.qkv import synthetic_qkv

out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kernelkit-compare-")
T = int(sys.argv[2]) if len(sys.argv) > 2 else 256

# Queries and keys gather around 16 centres with a high temperature: each query puts its
# weight on a few keys of its own cluster (peaky, structured attention).
q, k, v = synthetic_qkv(batch=1, heads=2, T=T, d=64, temperature=2.0, clusters=16, seed=0)
report = compare(
    q, k, v, ["softmax", "elu+1", "favor+:64", "favor+:256", "nystrom:64"],
    is_causal=True, seeds=(0, 1, 2), device="cpu",
)
print(report.to_markdown())
for path in report.plot(out_dir):
    print("wrote", path)
