import math

import pytest

from qosched.core.errors import InputError
from qosched.hardware import GPUS, LINKS, Link, Processor, gpu, link


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("T4", "T4"),
        ("t4", "T4"),
        ("a100", "A100-SXM4-80GB"),
        ("A100-sxm4-80gb", "A100-SXM4-80GB"),
        (" H100 ", "H100-SXM5-80GB"),
        ("h200-SXM-141GB", "H200-SXM-141GB"),
        ("V100", "V100-SXM2-32GB"),
    ],
    ids=lambda v: repr(v),
)
def test_gpu_lookup_is_case_insensitive(query, expected):
    assert gpu(query).name == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [("pcie4", "PCIe4-x16"), ("PCIE3-X16", "PCIe3-x16"), ("nvlink4-h100", "NVLink4-H100")],
)
def test_link_lookup_is_case_insensitive(query, expected):
    assert link(query).name == expected


def test_unknown_gpu_lists_known_names():
    with pytest.raises(InputError, match=r"unknown GPU 'B300'.*A100-SXM4-80GB.*T4"):
        gpu("B300")


def test_unknown_link_lists_known_names():
    with pytest.raises(InputError, match=r"unknown link 'infiniband'.*PCIe4-x16"):
        link("infiniband")


@pytest.mark.parametrize("entry", list(GPUS.values()), ids=lambda p: p.name)
def test_every_gpu_has_positive_numbers_and_a_source(entry: Processor):
    assert entry.kind == "gpu"
    assert entry.peak_flops and all(v > 0 and math.isfinite(v) for v in entry.peak_flops.values())
    assert entry.memory_bandwidth > 0 and entry.memory_bytes > 0
    assert entry.sm_count is not None and entry.sm_count > 0
    assert "datasheet" in entry.source.lower()
    assert "float32" in entry.peak_flops and "float16" in entry.peak_flops
    # Tensor-core FP16 is always well above the CUDA-core FP32 rate on these parts.
    assert entry.peak_flops["float16"] > 4 * entry.peak_flops["float32"]


@pytest.mark.parametrize("entry", list(LINKS.values()), ids=lambda lk: lk.name)
def test_every_link_has_positive_numbers_and_a_source(entry: Link):
    assert entry.bandwidth > 0 and entry.latency_s >= 0 and entry.source.strip()
    assert "per direction" in entry.source


def test_pcie_bandwidth_follows_from_the_spec_rates():
    # 16 lanes x GT/s x 128/130 / 8 bits, per direction.
    assert link("pcie3").bandwidth == pytest.approx(15.754e9, rel=1e-4)
    assert link("pcie4").bandwidth == pytest.approx(31.508e9, rel=1e-4)
    assert link("pcie5").bandwidth == pytest.approx(63.015e9, rel=1e-4)


@pytest.mark.parametrize(
    ("name", "fp32_tflops", "fp16_dense_tflops", "bandwidth_gbs", "sms"),
    [
        ("T4", 8.1, 65, 320, 40),
        ("V100", 15.7, 125, 900, 80),
        ("A100", 19.5, 312, 2039, 108),
        ("H100", 67, 989.5, 3350, 132),
        ("H200", 67, 989.5, 4800, 132),
    ],
)
def test_gpu_numbers_match_the_datasheets(name, fp32_tflops, fp16_dense_tflops, bandwidth_gbs, sms):
    entry = gpu(name)
    assert entry.peak("float32") == pytest.approx(fp32_tflops * 1e12)
    assert entry.peak("float16") == pytest.approx(fp16_dense_tflops * 1e12)
    assert entry.memory_bandwidth == pytest.approx(bandwidth_gbs * 1e9)
    assert entry.sm_count == sms


def test_bfloat16_is_absent_where_the_hardware_has_none():
    assert "bfloat16" not in gpu("T4").peak_flops
    assert "bfloat16" not in gpu("V100").peak_flops
    assert gpu("A100").peak("bfloat16") == gpu("A100").peak("float16")


def test_unknown_dtype_lists_known_dtypes():
    with pytest.raises(InputError, match=r"no peak for dtype 'bfloat16'.*float16, float32"):
        gpu("T4").peak("bfloat16")


def test_peak_flops_cannot_be_mutated():
    with pytest.raises(TypeError):
        gpu("T4").peak_flops["float32"] = 1.0  # type: ignore[index]


def _cpu(**overrides):
    fields = dict(
        name="x",
        kind="cpu",
        peak_flops={"float32": 1e12},
        memory_bandwidth=1e11,
        memory_bytes=2**30,
        source="made up",
    )
    fields.update(overrides)
    return Processor(**fields)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kind": "tpu"}, "kind must be 'cpu' or 'gpu'"),
        ({"peak_flops": {}}, "non-empty mapping"),
        ({"peak_flops": {"float32": -1.0}}, r"peak_flops\['float32'\]"),
        ({"peak_flops": {"float32": math.inf}}, "positive finite"),
        ({"memory_bandwidth": 0}, "memory_bandwidth"),
        ({"memory_bytes": 1.5}, "memory_bytes"),
        ({"source": "  "}, "source"),
        ({"sm_count": 4}, "sm_count must be None for a CPU"),
        ({"kind": "gpu"}, "sm_count: expected a positive integer"),
        ({"name": ""}, "processor name"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_processor_validation(overrides, message):
    with pytest.raises(InputError, match=message):
        _cpu(**overrides)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bandwidth": 0.0, "latency_s": 0.0}, "bandwidth"),
        ({"bandwidth": 1e9, "latency_s": -1e-6}, "latency_s"),
        ({"bandwidth": 1e9, "latency_s": math.nan}, "latency_s"),
    ],
)
def test_link_validation(fields, message):
    with pytest.raises(InputError, match=message):
        Link(name="l", source="made up", **fields)


def test_processor_round_trips_through_to_dict():
    original = gpu("H100")
    assert Processor(**original.to_dict()) == original


def test_a_processor_survives_pickling_as_it_was_built():
    # What-if runs go to other processes with their GPU: every field back, still read-only.
    import pickle

    for entry in (gpu("a100-sxm4-80gb"), gpu("h100-sxm5-80gb")):
        back = pickle.loads(pickle.dumps(entry))
        assert back == entry and dict(back.peak_flops) == dict(entry.peak_flops)
        assert (back.sm_count, back.cores, back.source) == (
            entry.sm_count,
            entry.cores,
            entry.source,
        )
        with pytest.raises(TypeError):
            back.peak_flops["fp32"] = 1.0  # type: ignore[index]
