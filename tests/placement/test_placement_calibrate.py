"""Unit costs calibrated by runs: scales measured from a timeline, merged, applied, stored."""

from __future__ import annotations

import json

import pytest

from qosched.core.errors import InputError
from qosched.placement.calibrate import (
    Calibration,
    calibrated,
    measure_scales,
    merge,
    read_calibration,
    write_calibration,
)
from qosched.placement.ir import Problem, TenantGraph
from qosched.report.trace import Span

MACHINE = {"platform": "cpu-sets", "cpu": [0], "gpu": [1]}


def problem():
    a = TenantGraph.from_costs("a", [1e-3, 2e-3, 1e-5], [4e-3, 4e-3, 1e-5], [1e-4, 1e-4])
    b = TenantGraph.from_costs("b", [5e-3], [5e-3], [])
    return Problem((a, b))


def segment(tenant, track, lo, hi, duration):
    args = {"tenant": tenant, "request": 0, "units": [lo, hi]}
    return Span(f"{tenant} units", "run", track, 0.0, duration, args)


def test_scales_are_time_weighted_per_tenant_and_processor():
    spans = [
        segment("a", "cpu", 0, 2, 3.6e-3),  # 3 ms isolated -> 1.2x
        segment("a", "cpu", 0, 2, 4.2e-3),  # 1.4x: together 7.8 / 6 = 1.3x
        segment("a", "gpu", 2, 3, 1e-3),  # 10 us isolated: below the floor, left out
        segment("b", "gpu", 0, 1, 5.5e-3),  # 1.1x
        Span("message a#0", "run", "cpu", 0.0, 1.0, {"tenant": "a", "segment": 0}),
    ]
    got = measure_scales(spans, problem(), MACHINE)
    assert got.machine == MACHINE
    assert got.scales == {"a": {"cpu": pytest.approx(1.3)}, "b": {"gpu": pytest.approx(1.1)}}
    with pytest.raises(InputError, match="tenant 'c'"):
        measure_scales([segment("c", "cpu", 0, 1, 1e-3)], problem(), MACHINE)


def test_merging_takes_every_pair_and_averages_repeats():
    first = Calibration(MACHINE, {"a": {"cpu": 1.2}, "b": {"gpu": 1.1}})
    second = Calibration(MACHINE, {"a": {"cpu": 1.4, "gpu": 0.9}})
    got = merge([first, second])
    assert got.scales == {"a": {"cpu": pytest.approx(1.3), "gpu": 0.9}, "b": {"gpu": 1.1}}
    other = Calibration({"platform": "cuda", "gpu": 0}, {})
    with pytest.raises(InputError, match="different machines"):
        merge([first, other])


def test_calibrated_costs_scale_each_tenant_on_each_processor():
    got = calibrated(problem(), Calibration(MACHINE, {"a": {"gpu": 2.0}, "b": {"cpu": 0.5}}))
    a, b = got.tenants
    assert a.cpu_s == problem().tenants[0].cpu_s  # no cpu scale for a: unchanged
    assert a.gpu_s == pytest.approx((8e-3, 8e-3, 2e-5))
    assert a.transfer_s == problem().tenants[0].transfer_s  # copies are the link's, not scaled
    assert b.cpu_s == pytest.approx((2.5e-3,)) and b.gpu_s == (5e-3,)
    with pytest.raises(InputError, match=r"tenants \['z'\]"):
        calibrated(problem(), Calibration(MACHINE, {"z": {"cpu": 1.0}}))


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), "1.2", True])
def test_bad_scales_are_refused(scale):
    with pytest.raises(InputError) as caught:
        Calibration(MACHINE, {"a": {"cpu": scale}})
    assert caught.value.field == "scales"
    with pytest.raises(InputError, match="unknown processor"):
        Calibration(MACHINE, {"a": {"tpu": 1.0}})


def test_a_calibration_file_reads_back(tmp_path):
    path = tmp_path / "cal.json"
    original = Calibration(MACHINE, {"a": {"cpu": 1.25, "gpu": 0.75}})
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
                    "scales": {"a": {"cpu": -2}},
                }
            ),
            "scales",
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
