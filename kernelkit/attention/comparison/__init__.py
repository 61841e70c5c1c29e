"""The comparison tool: linear and kernel attention against softmax (accuracy, speed, memory,
plots), re-exported as :func:`kernelkit.attention.compare` and :func:`kernelkit.attention.sweep`.

- :func:`compare` (:mod:`~kernelkit.attention.comparison.accuracy`): errors of each method
  against float64 softmax on your q, k, v (or synthetic ones from
  :func:`kernelkit.attention.comparison.qkv.synthetic_qkv`), with context (uniform baseline,
  entropy, peakiness, SVD floor) and time / peak memory, as a :class:`CompareReport`;
- :func:`sweep` (:mod:`~kernelkit.attention.comparison.sweeps`; its plan and time estimate in
  :mod:`~kernelkit.attention.comparison.sweep_plan`, its :class:`SweepReport` in
  :mod:`~kernelkit.attention.comparison.sweep_report`): time and peak memory against sequence
  length, and the crossover length where a method becomes faster than softmax;
- :func:`parse_method` / :func:`method_names`: the method specs (``"favor+:256"``,
  ``"kernel:rbf"``, ``"nystrom:64"``...);
- :func:`measure`: median time and peak memory of one call on the CPU or a GPU;
- :mod:`kernelkit.attention.comparison.metrics`: the metrics as small float64 NumPy functions;
- :mod:`kernelkit.attention.comparison.memory`: the host memory both tools plan with.

The methods run through the public attention functions (:mod:`kernelkit.attention._dispatch`,
with their ``backend=``), never through ``kernelkit_gpu``'s twins directly.
Importing this package does not import torch or matplotlib; they load on first use.

Examples
--------
>>> import numpy as np
>>> from kernelkit.attention.comparison import compare
>>> rng = np.random.default_rng(0)
>>> q, k, v = (rng.standard_normal((1, 2, 16, 8)) for _ in range(3))
>>> report = compare(q, k, v, ["softmax", "favor+:32", "nystrom:8"], measure=False)
>>> sorted(report.heatmaps)
['favor+:32', 'index', 'nystrom:8', 'softmax']
"""

from kernelkit.attention.comparison.accuracy import compare
from kernelkit.attention.comparison.measurement import Measurement, measure
from kernelkit.attention.comparison.methods import Method, method_names, parse_method
from kernelkit.attention.comparison.report import CompareReport
from kernelkit.attention.comparison.sweeps import SweepReport, sweep

__all__ = ["compare", "CompareReport", "sweep", "SweepReport", "measure", "Measurement",
           "parse_method", "method_names", "Method"]
