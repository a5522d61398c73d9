"""The seal on admissions: it verifies for the job and decision it was made for, and for no
other object, decision or terms."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json

import pytest
from k8s_helpers import job_set

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.seal import KeyUnavailable, Seal
from qosched.cluster.admission import Admission

KEY = bytes(range(32))


def job(**changes) -> J.K8sJob:
    sts = job_set("j", annotations={J.DEADLINE: "2h", J.MODEL: "resnet50"})
    sts["metadata"].update(uid="uid-7", creationTimestamp="2026-12-01T00:00:00Z")
    return dataclasses.replace(J.read_job(sts, "gpu"), **changes)


def test_the_seal_is_an_hmac_of_the_job_and_its_decision():
    # 2026-12-01T00:00:00Z is 1796083200 s after the epoch; the deadline is 2 h later.
    terms = ["ml", "j", "uid-7", "guaranteed", 1000, 1796090400.0, False, "resnet50", 1, 1, None]
    text = json.dumps(terms, separators=(",", ":"))
    expected = hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()
    assert Seal(KEY).of(job(), Admission.GUARANTEED) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"uid": "uid-8"},  # the same name, another object
        {"name": "k"},
        {"namespace": "other"},
        {"admission": Admission.BEST_EFFORT},
        {"iterations": 10_000_000},
        {"deadline_at": 1796090401.0},
        {"best_effort": True},
        {"model": "gpt2"},
        {"batch_size": 64},
        {"requested_workers": 8},
        {"max_workers": 8},
        {"seal": None},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_seal_verifies_for_its_own_job_and_decision_only(changes):
    seal = Seal(KEY)
    signed = job(admission=Admission.GUARANTEED)
    signed = dataclasses.replace(signed, seal=seal.of(signed, Admission.GUARANTEED))
    assert seal.trusts(signed)
    assert not seal.trusts(dataclasses.replace(signed, **changes))
    assert not Seal(bytes(32)).trusts(signed)  # another key


def test_a_short_key_is_refused():
    with pytest.raises(KeyUnavailable, match="16 bytes"):
        Seal(b"short")
