"""Reading data files (kernelkit._util.io.load_matrix): CSV headers as pandas writes them."""

import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit._util import io
from tests.conftest import TOL
from tests.cli_helpers import assert_clean_error, run_main


@pytest.fixture
def X(rng):
    return rng.normal(size=(6, 3))


def pandas_csv(path, X, **kwargs):
    pd.DataFrame(X, **kwargs.pop("frame", {})).to_csv(path, **kwargs)
    return path


# ----------------------------------------------------------------------------- load_matrix
@pytest.mark.parametrize("frame", [{}, {"columns": ["a", "b", "c"]}], ids=["0,1,2", "named"])
@pytest.mark.parametrize("index", [False, True], ids=["index=False", "index=True"])
def test_pandas_csv_reads_back_as_its_matrix(tmp_path, X, frame, index):
    # pandas' default column names 0,1,2 used to be read as a data row: n + 1 samples; with
    # index=True (pandas' default) the empty first field above the index was an error
    path = pandas_csv(tmp_path / "X.csv", X, frame=frame, index=index)
    first = path.read_text().splitlines()[0]
    assert first == ("," if index else "") + ("a,b,c" if frame else "0,1,2")
    np.testing.assert_array_equal(io.load_matrix(path, "X"), X)  # floats written as repr
    np.testing.assert_array_equal(io.load_matrix(path, "X", header=True), X)


def test_a_data_row_0_1_2_is_read_with_header_false(tmp_path):
    path = tmp_path / "X.csv"
    path.write_text("0,1,2\n3.5,4,5\n")
    np.testing.assert_array_equal(io.load_matrix(path, "X", header=False),
                                  [[0.0, 1.0, 2.0], [3.5, 4.0, 5.0]])
    np.testing.assert_array_equal(io.load_matrix(path, "X"), [[3.5, 4.0, 5.0]])  # pandas' names


def test_only_exactly_pandas_names_make_a_numeric_header(tmp_path):
    for text in ("0,2,1\n3,4,5\n", "1,2,3\n3,4,5\n", "0.0,1.0,2.0\n3,4,5\n"):
        path = tmp_path / "X.csv"
        path.write_text(text)
        assert io.load_matrix(path, "X").shape == (2, 3), text


def test_header_true_skips_a_numeric_first_line_and_false_refuses_names(tmp_path):
    path = tmp_path / "X.csv"
    path.write_text("7,8\n1,2\n")
    np.testing.assert_array_equal(io.load_matrix(path, "X", header=True), [[1.0, 2.0]])
    path.write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="non-numeric value 'x' at line 1, column 1"):
        io.load_matrix(path, "X", header=False)


def test_index_labels_are_left_out_whatever_they_hold(tmp_path, X):
    path = pandas_csv(tmp_path / "X.csv", X, frame={"index": list("uvwxyz")})
    assert path.read_text().splitlines()[1].startswith("u,")
    np.testing.assert_array_equal(io.load_matrix(path, "X"), X)


def test_one_column_csv(tmp_path, X):
    # pandas names a single column 0: a first line "0" may be that header or a data row
    path = pandas_csv(tmp_path / "x.csv", X[:, :1], index=False)
    message = (f"X file {str(path)!r}: the first line (line 1) is the single value 0: pandas' "
               "column name of a one-column DataFrame, or a data row; say which: header=True "
               "or header=False (kernelkit gram: --header or --no-header)")
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        io.load_matrix(path, "X")
    np.testing.assert_array_equal(io.load_matrix(path, "X", header=True), X[:, :1])
    path.write_text("0\n1\n")
    np.testing.assert_array_equal(io.load_matrix(path, "X", header=False), [[0.0], [1.0]])
    with_index = pandas_csv(tmp_path / "xi.csv", X[:, :1])  # ",0": the index marks a header
    np.testing.assert_array_equal(io.load_matrix(with_index, "X"), X[:, :1])


@pytest.mark.parametrize("header", ["yes", None, 1, "Auto"])
def test_header_must_be_auto_true_or_false(tmp_path, header):
    path = tmp_path / "X.csv"
    path.write_text("1,2\n")
    with pytest.raises(ValueError, match=re.escape(
            f"header must be 'auto', True or False; got {header!r}")):
        io.load_matrix(path, "X", header=header)


# ------------------------------------------------------------------------- kernelkit gram
@pytest.mark.parametrize("index", [False, True], ids=["index=False", "index=True"])
def test_gram_of_a_pandas_csv(tmp_path, capsys, X, index):
    path = pandas_csv(tmp_path / "X.csv", X, index=index)
    code, out, err = run_main(["gram", path, "--kernel", "rbf", "--param", "gamma=0.5",
                               "--device", "cpu", "--out", tmp_path / "K.npy"], capsys)
    assert code == 0, err
    assert "shape (6, 6)" in out
    np.testing.assert_allclose(np.load(tmp_path / "K.npy"), rbf_kernel(X, gamma=0.5),
                               **TOL["float64"])


def test_gram_no_header_reads_a_first_row_0_1_2_as_data(tmp_path, capsys, X):
    path = tmp_path / "X.csv"
    pandas_csv(path, X, index=False, header=False)
    path.write_text("0,1,2\n" + path.read_text())  # a first data row that looks like names
    data = np.vstack([[0.0, 1.0, 2.0], X])
    code, out, err = run_main(["gram", path, "--no-header", "--device", "cpu", "--out",
                               tmp_path / "K.npy"], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "K.npy"), rbf_kernel(data, gamma=1 / 3),
                               **TOL["float64"])
    code, out, err = run_main(["gram", path, "--header", "--y", path, "--device", "cpu",
                               "--out", tmp_path / "K2.npy"], capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "K2.npy"), rbf_kernel(X, gamma=1 / 3),
                               **TOL["float64"])


def test_gram_ambiguous_one_column_csv_is_a_clean_error(tmp_path, capsys):
    path = tmp_path / "x.csv"
    path.write_text("0\n1\n2\n")
    code, _, err = run_main(["gram", path, "--device", "cpu", "--out", tmp_path / "K.npy"],
                            capsys)
    assert_clean_error(code, err, "is the single value 0", "--header or --no-header")
    assert not (tmp_path / "K.npy").exists()
