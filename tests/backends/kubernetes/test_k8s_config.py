"""The scheduler's settings, as ``qosched k8s run`` loads them from its ConfigMap: every value
checked at load, an error naming the field."""

from __future__ import annotations

import pytest

from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.cli.k8s import load_config
from qosched.core.errors import InputError


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("tick_s: .nan\n", "tick_s"),
        ("tick_s: .inf\n", "tick_s"),
        ("tick_s: '5'\n", "tick_s"),
        ("tick_s: true\n", "tick_s"),
        ("tick_s: 1.0e+300\n", "tick_s"),
        ("watch_timeout_s: .inf\n", "watch_timeout_s"),
        ("watch_timeout_s: '300'\n", "watch_timeout_s"),
        ("watch_timeout_s: 0\n", "watch_timeout_s"),
        ("lease_duration_s: true\n", "lease_duration_s"),
        ("lease_duration_s: 1000000000\n", "lease_duration_s"),
        ("lease_renew_deadline_s: .nan\n", "lease_renew_deadline_s"),
        ("lease_retry_s: 'soon'\n", "lease_retry_s"),
        ("restart_pause_s: .nan\n", "restart_pause_s"),
        ("http_port: true\n", "http_port"),
        ("http_port: 1.5\n", "http_port"),
        ("identity: ''\n", "identity"),
        ("identity: '   '\n", "identity"),
        ("lease_name: ''\n", "lease_name"),
        ("lease_name: Qosched_Lease\n", "lease_name"),
        ("lease_namespace: ''\n", "lease_namespace"),
        ("namespace: 5\n", "namespace"),
        ("scheduler_name: ''\n", "scheduler_name"),
        ("policy: null\n", "policy"),
    ],
    ids=[
        "tick-nan",
        "tick-inf",
        "tick-string",
        "tick-bool",
        "tick-1e300",
        "watch-timeout-inf",
        "watch-timeout-string",
        "watch-timeout-zero",
        "lease-bool",
        "lease-a-billion",
        "renew-nan",
        "retry-string",
        "restart-pause-nan",
        "port-bool",
        "port-fraction",
        "identity-empty",
        "identity-blank",
        "lease-name-empty",
        "lease-name-not-dns",
        "lease-namespace-empty",
        "namespace-number",
        "scheduler-name-empty",
        "policy-null",
    ],
)
def test_a_bad_setting_is_refused_at_load_naming_its_field(tmp_path, text, field):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load_config(path, identity=None if "identity" in text else "pod-a")
    assert error.value.field == field


def test_whole_numbers_written_as_floats_are_taken_as_ints(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("tick_s: 2\nlease_duration_s: 15.0\nhttp_port: 9090.0\nwatch_timeout_s: 30\n")
    config = load_config(path, identity="pod-a")
    assert (config.tick_s, config.lease_duration_s, config.http_port) == (2, 15, 9090)
    assert isinstance(config.lease_duration_s, int) and isinstance(config.http_port, int)


def test_the_defaults_are_valid():
    assert SchedulerConfig(identity="pod-a").lease_name == "qosched-scheduler"
