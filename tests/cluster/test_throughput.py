"""Tests for qosched.cluster.throughput: interpolation, table reading and the bundled tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from qosched.cluster.throughput import PLACEHOLDER_RATE, ThroughputModel, interpolate, read_table
from qosched.core.errors import InputError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- interpolate ------------------------------------------------------------------------------

INTERPOLATE_CASES = [
    # 3 GPUs: halfway between 18 and 30.
    ("mean-of-neighbours", {1: 10.0, 2: 18.0, 4: 30.0}, (0.0, 10.0, 18.0, 24.0, 30.0)),
    # 2 and 3 GPUs: one and two thirds of the way from 10 to 30.
    ("wide-gap", {1: 10.0, 4: 30.0}, (0.0, 10.0, 10.0 + 20.0 / 3, 10.0 + 40.0 / 3, 30.0)),
    # 2 is given as unmeasured (0): neither 2 nor 3 may be interpolated next to it.
    ("gap-next-to-unmeasured", {1: 10.0, 2: 0.0, 4: 30.0}, (0.0, 10.0, 0.0, 0.0, 30.0)),
    # Nothing below the smallest measured count.
    ("below-smallest-measured", {2: 8.0}, (0.0, 0.0, 8.0)),
    ("single-gpu-only", {1: 5.0}, (0.0, 5.0)),
    ("nothing-measured", {}, (0.0,)),
    # Speeds may fall with more GPUs; interpolation follows them down.
    ("decreasing", {4: 40.0, 8: 20.0}, (0.0, 0.0, 0.0, 0.0, 40.0, 35.0, 30.0, 25.0, 20.0)),
]


@pytest.mark.parametrize(
    ("measured", "expected"),
    [case[1:] for case in INTERPOLATE_CASES],
    ids=[case[0] for case in INTERPOLATE_CASES],
)
def test_interpolate(measured, expected):
    assert interpolate(measured) == pytest.approx(expected)


def test_interpolate_gives_the_mean_of_the_neighbours_exactly():
    assert interpolate({1: 10.0, 2: 18.0, 4: 30.0})[3] == 24.0


def test_interpolate_has_no_speed_above_the_largest_measured_count():
    speeds = interpolate({1: 10.0, 2: 18.0, 4: 30.0})
    assert len(speeds) == 5


def test_interpolate_keeps_measured_values_unchanged():
    measured = {1: 1.1, 2: 2.3, 8: 7.7}
    speeds = interpolate(measured)
    assert [speeds[g] for g in measured] == [1.1, 2.3, 7.7]


# --- read_table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell",
    ["", " ", "nan", "NaN", "0", "0.0"],
    ids=["empty", "blank", "nan", "NaN", "zero", "zero-point-zero"],
)
def test_read_table_keeps_unmeasured_cells_as_zero(tmp_path, cell):
    path = write(tmp_path, "m.csv", f"global_batch_size,1,2,4\n32,10.0,{cell},30.0\n")
    assert read_table(path) == {32: {1: 10.0, 2: 0.0, 4: 30.0}}


def test_read_table_reads_every_row_and_column(tmp_path):
    path = write(
        tmp_path,
        "m.csv",
        "global_batch_size,1,2,4\n32,10.0,18.5,30.0\n64,5.0,9.25,16.0\n",
    )
    assert read_table(path) == {
        32: {1: 10.0, 2: 18.5, 4: 30.0},
        64: {1: 5.0, 2: 9.25, 4: 16.0},
    }


def test_read_table_skips_blank_lines(tmp_path):
    path = write(tmp_path, "m.csv", "global_batch_size,1,2\n\n32,10.0,18.0\n\n")
    assert read_table(path) == {32: {1: 10.0, 2: 18.0}}


def test_read_table_row_with_nothing_measured_is_kept_all_zero(tmp_path):
    path = write(tmp_path, "m.csv", "global_batch_size,1,2\n32,0,nan\n")
    assert read_table(path) == {32: {1: 0.0, 2: 0.0}}


# (id, cell in the "4" column of line 3)
BAD_CELLS = [
    ("negative", "-3.5"),
    ("non-numeric", "fast"),
    ("infinite", "inf"),
    ("negative-infinite", "-inf"),
    # outside 1e-6..1e6 iterations/s, where fits of 1 / speed and iterations = duration x speed
    # break down
    ("near-float-max", "1.7e308"),
    ("1e300", "1e300"),
    ("1e200", "1e200"),
    ("just-above-1e6", "1000001"),
    ("1e-300", "1e-300"),
    ("just-below-1e-6", "9e-7"),
]


@pytest.mark.parametrize("cell", [c for _, c in BAD_CELLS], ids=[i for i, _ in BAD_CELLS])
def test_read_table_bad_cell_names_file_line_and_column(tmp_path, cell):
    path = write(
        tmp_path,
        "speeds.csv",
        f"global_batch_size,1,2,4\n32,10.0,18.0,30.0\n64,5.0,9.0,{cell}\n",
    )
    with pytest.raises(InputError) as caught:
        read_table(path)
    message = str(caught.value)
    assert f"{path}:3" in message
    assert "'4'" in message
    assert cell in message


def test_read_table_non_numeric_batch_size_names_file_line_and_column(tmp_path):
    path = write(tmp_path, "speeds.csv", "global_batch_size,1\n32,10.0\nbig,5.0\n")
    with pytest.raises(InputError) as caught:
        read_table(path)
    message = str(caught.value)
    assert f"{path}:3" in message
    assert "global_batch_size" in message


# (id, file text): every one is wrong on line 1.
BAD_HEADERS = [
    ("empty-file", ""),
    ("wrong-first-column", "batch,1,2\n32,1.0,2.0\n"),
    ("non-integer-gpu-count", "global_batch_size,1,two\n32,1.0,2.0\n"),
    ("zero-gpu-count", "global_batch_size,0,1\n32,1.0,2.0\n"),
]


@pytest.mark.parametrize("text", [t for _, t in BAD_HEADERS], ids=[i for i, _ in BAD_HEADERS])
def test_read_table_bad_header_names_file_and_line_1(tmp_path, text):
    path = write(tmp_path, "speeds.csv", text)
    with pytest.raises(InputError) as caught:
        read_table(path)
    assert f"{path}:1" in str(caught.value)


def read_error(path) -> str:
    """The message of the InputError reading ``path`` raises."""
    with pytest.raises(InputError) as caught:
        read_table(path)
    return str(caught.value)


def test_read_table_accepts_the_speed_range_ends(tmp_path):
    path = write(tmp_path, "m.csv", "global_batch_size,1,2\n32,1e-6,1e6\n")
    assert read_table(path) == {32: {1: 1e-6, 2: 1e6}}


@pytest.mark.parametrize(
    "count", ["65537", "100000000000000"], ids=["one-above-the-cap", "a-hundred-trillion"]
)
def test_read_table_worker_count_above_the_cap_names_line_1_and_the_column(tmp_path, count):
    path = write(tmp_path, "speeds.csv", f"global_batch_size,1,2,{count}\n64,1,2,4\n")
    message = read_error(path)
    assert f"{path}:1: column 4:" in message
    assert "65,536" in message
    assert count in message


def test_read_table_accepts_the_largest_worker_count(tmp_path):
    path = write(tmp_path, "m.csv", "global_batch_size,1,65536\n64,1,2\n")
    assert read_table(path) == {64: {1: 1.0, 65536: 2.0}}


def test_read_table_repeated_worker_count_names_both_columns(tmp_path):
    path = write(tmp_path, "speeds.csv", "global_batch_size,1,1,4,8\n64,1,2,4,8\n")
    message = read_error(path)
    assert f"{path}:1: column 3:" in message
    assert "worker count 1 appears twice (first in column 2)" in message


@pytest.mark.parametrize("batch", ["0", "-64"], ids=["zero", "negative"])
def test_read_table_batch_size_below_1_names_file_line_and_column(tmp_path, batch):
    path = write(tmp_path, "speeds.csv", f"global_batch_size,1,2\n64,1,2\n{batch},1,2\n")
    message = read_error(path)
    assert f"{path}:3: field 'global_batch_size'" in message
    assert ">= 1" in message


@pytest.mark.parametrize(
    "text",
    ["global_batch_size,1,2,4,8\n", "global_batch_size,1,2\n\n,,\n"],
    ids=["header-only", "header-and-blank-lines"],
)
def test_read_table_without_rows_says_so_at_read_time(tmp_path, text):
    path = write(tmp_path, "speeds.csv", text)
    with pytest.raises(InputError) as caught:
        read_table(path)
    assert f"{path}:1: no rows" in str(caught.value)


# --- ThroughputModel.curve --------------------------------------------------------------------


@pytest.fixture
def small_model() -> ThroughputModel:
    return ThroughputModel(
        {
            "alpha": {32: {1: 10.0, 2: 18.0, 4: 30.0}, 64: {1: 6.0}},
            "beta": {16: {1: 3.0}},
        },
        source="test tables",
    )


def test_curve_interpolates_the_measured_row(small_model):
    curve = small_model.curve("alpha", 32)
    assert curve.speeds == (0.0, 10.0, 18.0, 24.0, 30.0)
    assert curve.measured == (1, 2, 4)
    assert curve.max_workers == 4


@pytest.mark.parametrize(
    ("workers", "rate"),
    [(0, 0.0), (1, 10.0), (3, 24.0), (4, 30.0), (5, 0.0), (64, 0.0), (-1, 0.0)],
    ids=["zero", "measured", "interpolated", "largest", "above-largest", "far-above", "negative"],
)
def test_curve_rate(small_model, workers, rate):
    assert small_model.curve("alpha", 32).rate(workers) == rate


@pytest.mark.parametrize(
    ("workers", "available"),
    [(0, False), (1, True), (3, True), (4, True), (5, False)],
    ids=["zero", "measured", "interpolated", "largest", "above-largest"],
)
def test_curve_available(small_model, workers, available):
    assert small_model.curve("alpha", 32).available(workers) is available


def test_curve_usable_counts(small_model):
    assert small_model.curve("alpha", 32).usable_counts() == (1, 2, 3, 4)


def test_curve_unknown_model_lists_known_models(small_model):
    with pytest.raises(InputError) as caught:
        small_model.curve("gamma", 32)
    message = str(caught.value)
    assert "'gamma'" in message
    assert "alpha, beta" in message
    assert caught.value.field == "model_name"


def test_curve_unknown_batch_size_lists_measured_batch_sizes(small_model):
    with pytest.raises(InputError) as caught:
        small_model.curve("alpha", 48)
    message = str(caught.value)
    assert "48" in message
    assert "32, 64" in message
    assert caught.value.field == "batch_size"


def test_model_lists_models_and_batch_sizes_sorted(small_model):
    assert small_model.models == ("alpha", "beta")
    assert small_model.batch_sizes("alpha") == (32, 64)
    assert small_model.batch_sizes("missing") == ()
    assert small_model.has("alpha", 64)
    assert not small_model.has("alpha", 48)


# --- tables read from files: where unmeasured cells sit ---------------------------------------


def test_table_without_a_column_interpolates_across_it(tmp_path):
    write(tmp_path, "m.csv", "global_batch_size,1,4\n32,10.0,30.0\n")
    curve = ThroughputModel.load(tmp_path).curve("m", 32)
    assert curve.speeds == pytest.approx((0.0, 10.0, 10.0 + 20.0 / 3, 10.0 + 40.0 / 3, 30.0))


@pytest.mark.parametrize("cell", ["", "nan", "0"], ids=["empty", "nan", "zero"])
def test_table_with_an_unmeasured_middle_cell_does_not_interpolate_next_to_it(tmp_path, cell):
    # Columns 1, 2, 4, 8 with 4 unmeasured: 3 and 5-7 sit next to the unmeasured cell.
    write(tmp_path, "m.csv", f"global_batch_size,1,2,4,8\n32,10.0,18.0,{cell},50.0\n")
    curve = ThroughputModel.load(tmp_path).curve("m", 32)
    assert curve.usable_counts() == (1, 2, 8)


@pytest.mark.parametrize("cell", ["", "nan", "0"], ids=["empty", "nan", "zero"])
def test_table_with_unmeasured_trailing_cells_stops_at_the_last_measured(tmp_path, cell):
    write(tmp_path, "m.csv", f"global_batch_size,1,2,4\n32,10.0,18.0,{cell}\n")
    curve = ThroughputModel.load(tmp_path).curve("m", 32)
    assert curve.usable_counts() == (1, 2)
    assert not curve.available(3)


def test_load_reads_every_csv_named_by_its_stem(tmp_path):
    write(tmp_path, "one.csv", "global_batch_size,1\n8,1.0\n")
    write(tmp_path, "two.csv", "global_batch_size,1\n8,2.0\n")
    write(tmp_path, "notes.txt", "not a table")
    assert ThroughputModel.load(tmp_path).models == ("one", "two")


def test_load_directory_without_tables_raises(tmp_path):
    with pytest.raises(InputError, match="no"):
        ThroughputModel.load(tmp_path)


def test_load_missing_directory_raises(tmp_path):
    with pytest.raises(InputError):
        ThroughputModel.load(tmp_path / "absent")


# --- bundled tables ---------------------------------------------------------------------------


def test_bundled_a100_has_the_seven_models(a100):
    assert a100.models == (
        "bert",
        "deepspeech2",
        "gpt2",
        "inception3",
        "resnet50",
        "resnet50_cifar10",
        "vgg16",
    )


def test_bundled_a100_resnet50_first_cell(a100):
    # The first data cell of data/throughputs/A100/resnet50.csv (batch 64, 1 GPU).
    assert a100.curve("resnet50", 64).rate(1) == 6.8429775823889685


def test_bundled_a100_resnet50_batch_sizes(a100):
    assert a100.batch_sizes("resnet50") == (64, 128, 256)


@pytest.mark.parametrize(
    ("workers", "available"),
    [(1, True), (8, True), (9, False), (16, False), (64, False)],
    ids=["1", "8-last-measured", "9", "16-zero-cell", "64-zero-cell"],
)
def test_bundled_a100_resnet50_cifar10_stops_at_8_workers(a100, workers, available):
    assert a100.curve("resnet50_cifar10", 64).available(workers) is available


def test_bundled_t4_loads():
    t4 = ThroughputModel.bundled("T4")
    assert t4.models == ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def test_bundled_unknown_table_set_raises():
    with pytest.raises(InputError, match="'X'"):
        ThroughputModel.bundled("X")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("global_batch_size,1,2\n32,10.0,18.0\n32,11.0,19.0\n", 3),
        ("global_batch_size,1,2\n32,10.0,18.0,25.0\n", 2),
    ],
    ids=["repeated-batch-size", "more-cells-than-columns"],
)
def test_read_table_rejects_ambiguous_rows(tmp_path, text, line):
    path = write(tmp_path, "m.csv", text)
    with pytest.raises(InputError, match=rf"m\.csv:{line}"):
        read_table(path)


# --- what real backends assume before a job reports progress -----------------------------------


def test_prior_curve_of_a_known_model_is_its_table():
    tables = ThroughputModel({"m": {64: {1: 1.0, 2: 1.8, 4: 3.0}}})
    curve = tables.prior_curve("m", 64, 4)
    assert curve.speeds == (0.0, 1.0, 1.8, 2.4, 3.0)  # 3 interpolated between 2 and 4
    assert curve.measured == (1, 2, 4)


def test_prior_curve_of_an_unknown_model_is_the_placeholder_per_worker():
    curve = ThroughputModel({}).prior_curve("my-script", 1, 3)
    assert curve.speeds == (0.0, PLACEHOLDER_RATE, 2 * PLACEHOLDER_RATE, 3 * PLACEHOLDER_RATE)
    assert curve.measured == (1, 2, 3)


def test_prior_curve_in_whole_pods_offers_only_multiples_of_the_pod():
    curve = ThroughputModel({}).prior_curve("my-script", 1, 5, step=2)
    assert curve.usable_counts() == (2, 4)
    assert curve.measured == (2, 4)
