"""A training pod's side: progress annotations, checkpoint and resume, CPU limit from cgroups;
and the clear error when the Kubernetes extra is missing."""

from __future__ import annotations

import sys

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import trainer_client

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.kube import KubernetesMissing, require
from qosched.backends.kubernetes.progress import ProgressReporter
from qosched.backends.kubernetes.trainer import cpu_limit, train
from qosched.cli.main import main

pytestmark = pytest.mark.network


def test_training_reports_progress_and_resumes_from_its_checkpoint(tmp_path):
    with FakeApiServer() as api:
        api.create(
            "pods",
            {
                "metadata": {"name": "t-0", "namespace": "ml"},
                "spec": {"containers": [{"name": "train"}]},
            },
        )
        reporter = ProgressReporter(
            trainer_client(api.url, "ml", "t"), pod_name="t-0", namespace="ml", min_interval_s=0.0
        )
        options = {"checkpoint_every": 2, "limit": lambda: 1, "wait_at_end": False}
        assert train("cnn", 3, tmp_path, reporter, **options) == 3
        first = J.parse_progress(
            api.get("pods", "ml/t-0")["metadata"]["annotations"][J.PROGRESS], source="t"
        )
        assert first.iteration == 3 and first.active_s > 0
        assert train("cnn", 5, tmp_path, reporter, **options) == 5  # 2 more, not 5
        second = J.parse_progress(
            api.get("pods", "ml/t-0")["metadata"]["annotations"][J.PROGRESS], source="t"
        )
        assert second.iteration == 5 and second.active_s > first.active_s
        patches = [r for r in api.requests if r == ("PATCH", "/api/v1/namespaces/ml/pods/t-0")]
        assert len(patches) == 3 + 1 + 2 + 1  # one per iteration, one forced at each end


@pytest.mark.parametrize(
    ("iteration", "active_s"), [(3, float("nan")), (3, -1.0), (-1, 2.0), (2**53, 2.0)]
)
def test_a_report_the_scheduler_would_refuse_is_not_sent(iteration, active_s):
    class Recording:
        def __init__(self) -> None:
            self.sent: list[dict] = []

        def patch_namespaced_pod(self, name, namespace, body, **kwargs):
            self.sent.append(body)

    core = Recording()
    reporter = ProgressReporter(object(), pod_name="t-0", namespace="ml", min_interval_s=0.0)
    reporter.core = core  # what the reporter sends, recorded
    assert reporter.report(iteration, active_s) is False  # logged, and training goes on
    assert core.sent == []
    assert reporter.report(3, 2.0) is True and len(core.sent) == 1
    with pytest.raises(ValueError):
        J.Progress(iteration, active_s).to_text()


def test_only_the_jobs_first_pod_sends_reports():
    class Recording:
        def __init__(self) -> None:
            self.sent: list[str] = []

        def patch_namespaced_pod(self, name, namespace, body, **kwargs):
            self.sent.append(name)

    sent = {}
    for pod in ("t-0", "t-1", "t-10"):
        reporter = ProgressReporter(object(), pod_name=pod, namespace="ml", job="t")
        reporter.core = Recording()
        reporter.report(3, 2.0, force=True)
        sent[pod] = reporter.core.sent
    assert sent == {"t-0": ["t-0"], "t-1": [], "t-10": []}


@pytest.mark.parametrize(
    ("text", "cores"),
    [("max 100000", None), ("150000 100000", 2), ("400000 100000", 4), ("garbage", None)],
)
def test_cpu_limit_reads_cgroup_v2(tmp_path, text, cores):
    path = tmp_path / "cpu.max"
    path.write_text(text + "\n")
    assert cpu_limit(path) == cores


def test_without_the_extra_the_error_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed
    with pytest.raises(KubernetesMissing, match=r"qosched\[kubernetes\]"):
        require()
    assert main(["k8s", "run", "--once", "--host", "http://127.0.0.1:1"]) == 2
    assert "qosched[kubernetes]" in capsys.readouterr().err
    # commands that print manifests need no client at all
    assert main(["k8s", "manifests"]) == 0
