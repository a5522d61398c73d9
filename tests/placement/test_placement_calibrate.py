"""Unit costs calibrated by runs: unit times measured from a timeline, merged, applied, stored."""

from __future__ import annotations

import json

import pytest

from qosched.core.errors import InputError
from qosched.core.trace import Span
from qosched.placement.calibrate import (
    Calibration,
    calibrated,
    measure_unit_times,
    merge,
    read_calibration,
    scales,
    write_calibration,
)
from qosched.placement.ir import Problem, TenantGraph

MACHINE = {"platform": "cpu-sets", "cpu": [0], "gpu": [1]}


def problem():
    a = TenantGraph.from_costs("a", [1e-3, 2e-3, 1e-5], [4e-3, 4e-3, 1e-5], [1e-4, 1e-4])
    b = TenantGraph.from_costs("b", [5e-3], [5e-3], [])
    return Problem((a, b))


def segment(tenant, track, lo, hi, unit_s):
    args = {"tenant": tenant, "request": 0, "units": [lo, hi], "unit_s": unit_s}
    return Span(f"{tenant} units", "run", track, 0.0, sum(unit_s or [0.0]), args)


def test_each_unit_gets_the_median_of_its_timings():
    spans = [
        segment("a", "cpu", 0, 2, [1.1e-3, 2.0e-3]),
        segment("a", "cpu", 0, 2, [1.3e-3, 2.4e-3]),
        segment("a", "cpu", 0, 2, [1.2e-3, 9.9e-3]),  # an outlier: the median ignores it
        segment("a", "gpu", 2, 3, [5e-5]),
        segment("b", "gpu", 0, 1, None),  # a device segment without unit times: left out
        Span("message a#0", "run", "cpu", 0.0, 1.0, {"tenant": "a", "segment": 0}),
    ]
    got = measure_unit_times(spans, problem(), MACHINE)
    assert got.machine == MACHINE
    assert got.unit_s == {
        "a": {
            "cpu": (pytest.approx(1.2e-3), pytest.approx(2.4e-3), None),
            "gpu": (None, None, 5e-5),
        }
    }
    with pytest.raises(InputError, match="tenant 'c'"):
        measure_unit_times([segment("c", "cpu", 0, 1, [1e-3])], problem(), MACHINE)
    with pytest.raises(InputError, match="do not fit"):
        measure_unit_times([segment("a", "cpu", 0, 2, [1e-3])], problem(), MACHINE)


def test_measured_units_replace_their_costs_and_the_rest_scale_alike():
    # a on the cpu: units 0 and 1 measured at 1.5 and 3 ms (1.5x their 1 and 2 ms), unit 2 not:
    # it scales by the same 1.5x. Nothing measured for a on the gpu, nor for b: unchanged.
    cal = Calibration(MACHINE, {"a": {"cpu": (1.5e-3, 3e-3, None)}})
    a, b = calibrated(problem(), cal).tenants
    assert a.cpu_s == pytest.approx((1.5e-3, 3e-3, 1.5e-5))
    assert a.gpu_s == problem().tenants[0].gpu_s and b == problem().tenants[1]
    assert a.transfer_s == problem().tenants[0].transfer_s  # copies are the link's
    assert scales(problem(), cal) == {"a": {"cpu": pytest.approx(1.5)}}
    with pytest.raises(InputError, match=r"tenants \['z'\]"):
        calibrated(problem(), Calibration(MACHINE, {"z": {"cpu": (1.0,)}}))
    with pytest.raises(InputError, match="has 1 units, the model 3"):
        calibrated(problem(), Calibration(MACHINE, {"a": {"cpu": (1.0,)}}))


def test_merging_takes_every_unit_and_averages_repeats():
    first = Calibration(MACHINE, {"a": {"cpu": (1e-3, None, None)}, "b": {"gpu": (6e-3,)}})
    second = Calibration(MACHINE, {"a": {"cpu": (3e-3, 2e-3, None)}})
    got = merge([first, second])
    assert got.unit_s == {"a": {"cpu": (2e-3, 2e-3, None)}, "b": {"gpu": (6e-3,)}}
    with pytest.raises(InputError, match="different machines"):
        merge([first, Calibration({"platform": "cuda", "gpu": 0}, {})])
    with pytest.raises(InputError, match="not the same model"):
        merge([first, Calibration(MACHINE, {"a": {"cpu": (1e-3,)}})])


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), "1.2", True])
def test_bad_unit_times_are_refused(value):
    with pytest.raises(InputError) as caught:
        Calibration(MACHINE, {"a": {"cpu": (value,)}})
    assert caught.value.field == "unit_s"
    with pytest.raises(InputError, match="unknown processor"):
        Calibration(MACHINE, {"a": {"tpu": (1.0,)}})


def test_a_calibration_file_reads_back(tmp_path):
    path = tmp_path / "cal.json"
    original = Calibration(MACHINE, {"a": {"cpu": (1.25e-3, None), "gpu": (7.5e-4, 2e-3)}})
    write_calibration(original, path)
    assert read_calibration(path) == original


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("{", None, "not JSON"),
        (json.dumps({"format": "other"}), "format", "not a qosched-placement-calibration"),
        (
            json.dumps({"format": "qosched-placement-calibration", "version": 2}),
            "version",
            "expected version 1",
        ),
        (
            json.dumps(
                {
                    "format": "qosched-placement-calibration",
                    "version": 1,
                    "machine": MACHINE,
                    "unit_s": {"a": {"cpu": [1e-3, -2]}},
                }
            ),
            "unit_s",
            "positive finite",
        ),
    ],
)
def test_bad_calibration_files_name_the_file_and_field(tmp_path, text, field, message):
    path = tmp_path / "cal.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as caught:
        read_calibration(path)
    assert caught.value.source == str(path) and caught.value.field == field
