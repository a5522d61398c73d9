import json

import pytest

from qosched.core.errors import InputError
from qosched.core.trace import Span, chrome_trace, write_chrome_trace


def test_spans_become_complete_events_in_microseconds_on_named_tracks(tmp_path):
    spans = [
        Span("conv", "machine", "gpu", 0.001, 0.002, {"tenant": "a"}),
        Span("add", "machine", "cpu", 0.0025, 0.0005),
        Span("conv", "machine", "gpu", 0.004, 0.002),
    ]
    trace = json.loads(write_chrome_trace(spans, tmp_path / "t" / "run.json").read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["ts"] for e in events] == pytest.approx([1000, 2500, 4000])
    assert [e["dur"] for e in events] == pytest.approx([2000, 500, 2000])
    assert events[0]["tid"] == events[2]["tid"] != events[1]["tid"]
    assert events[0]["args"] == {"tenant": "a"}
    threads = {
        e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and "tid" in e
    }
    assert threads[events[0]["tid"]] == "gpu" and threads[events[1]["tid"]] == "cpu"


def test_same_track_name_in_two_processes_is_two_rows():
    trace = chrome_trace([Span("k", "gpu0", "stream 1", 0, 1), Span("k", "gpu1", "stream 1", 0, 1)])
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert events[0]["pid"] != events[1]["pid"] and events[0]["tid"] != events[1]["tid"]


def test_negative_times_are_refused():
    with pytest.raises(InputError, match="start and duration"):
        Span("k", "gpu", "s", -1.0, 1.0)
