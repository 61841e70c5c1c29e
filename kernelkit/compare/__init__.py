"""Compare linear and kernel attention with softmax: accuracy, speed, memory, plots.

- :func:`compare`: errors of each method against float64 softmax on your q, k, v (or synthetic
  ones from :func:`kernelkit.compare.qkv.synthetic_qkv`), with context (uniform baseline,
  entropy, peakiness, SVD floor) and time / peak memory, as a :class:`CompareReport`;
- :func:`sweep`: time and peak memory against sequence length, and the crossover length where a
  method becomes faster than softmax;
- :func:`parse_method` / :func:`method_names`: the method specs (``"favor+:256"``,
  ``"kernel:rbf"``, ``"nystrom:64"``...);
- :func:`measure`: median time and peak memory of one call on the CPU or a GPU;
- :mod:`kernelkit.compare.metrics`: the metrics as small float64 NumPy functions;
- :mod:`kernelkit.compare.memory`: the host memory both tools plan with.

Importing this package does not import torch or matplotlib; they load on first use.

Examples
--------
>>> import numpy as np
>>> from kernelkit.compare import compare
>>> rng = np.random.default_rng(0)
>>> q, k, v = (rng.standard_normal((1, 2, 16, 8)) for _ in range(3))
>>> report = compare(q, k, v, ["softmax", "favor+:32", "nystrom:8"], measure=False)
>>> sorted(report.heatmaps)
['favor+:32', 'index', 'nystrom:8', 'softmax']
"""

from kernelkit.compare.comparison import compare
from kernelkit.compare.measurement import Measurement, measure
from kernelkit.compare.methods import Method, method_names, parse_method
from kernelkit.compare.report import CompareReport
from kernelkit.compare.sweeps import SweepReport, sweep

__all__ = ["compare", "CompareReport", "sweep", "SweepReport", "measure", "Measurement",
           "parse_method", "method_names", "Method"]
