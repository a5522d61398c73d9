"""``qosched k8s``: the scheduler's settings file, and the job command on a spec file."""

from __future__ import annotations

import pytest
import yaml

from qosched.cli.k8s import load_config
from qosched.cli.main import main
from qosched.core.errors import InputError


def test_config_file_sets_fields_and_flags_override(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("resource: cpu\npolicy: fifo\ntick_s: 2\nlease_duration_s: 10\n")
    config = load_config(path, identity="pod-a")
    assert (config.resource, config.policy, config.tick_s, config.identity) == (
        "cpu",
        "fifo",
        2,
        "pod-a",
    )
    assert config.table_set == "CPU"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("polcy: qos\n", "polcy"),
        ("resource: tpu\n", "resource"),
        ("lease_renew_deadline_s: 20\n", "lease_renew_deadline_s"),
        ("lease_duration_s: 1.5\n", "lease_duration_s"),
    ],
    ids=["unknown-key", "bad-resource", "renew-deadline-past-the-lease", "lease-not-whole"],
)
def test_bad_config_names_the_field(tmp_path, text, field):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        load_config(path)
    assert error.value.field == field


def test_job_command_prints_a_statefulset_with_the_spec_annotations(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: qosched/v1\nkind: TrainingJob\nmetadata:\n  name: j1\nspec:\n"
        "  command: [python, train.py]\n  work:\n    iterations: 500\n  deadline: 2h\n"
    )
    assert (
        main(
            [
                "k8s",
                "job",
                str(spec),
                "--image",
                "img:1",
                "--namespace",
                "ml",
                "--model",
                "resnet50",
                "--batch-size",
                "64",
                "--replicas",
                "2",
            ]
        )
        == 0
    )
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    notes = sts["metadata"]["annotations"]
    assert notes["qosched.io/iterations"] == "500" and notes["qosched.io/deadline"] == "2h"
    assert notes["qosched.io/model"] == "resnet50" and notes["qosched.io/batch-size"] == "64"
    assert sts["spec"]["replicas"] == 2
    pod = sts["spec"]["template"]["spec"]
    assert pod["schedulerName"] == "qosched"
    assert pod["containers"][0]["command"] == ["python", "train.py"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
