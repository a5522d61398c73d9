"""qosched.backends.local.web.listing: the job table's filter, sort and paging."""

from __future__ import annotations

from typing import Any

import pytest
from service_fakes import make_job

from qosched.backends.local.web import listing
from qosched.backends.local.web.listing import JobQuery
from qosched.core.errors import InputError

# In submission order, as the service lists them.
JOBS = [
    make_job("j-000001", "succeeded", name="alpha", finished_at=100.0, iterations_done=400),
    make_job("j-000002", "running", name="Beta", iterations_done=100, cpus=(0, 1)),
    make_job("j-000003", "queued", name="gamma"),
    make_job("j-000004", "failed", name="beta-two", finished_at=300.0, iterations_done=40),
    make_job("j-000005", "running", name="delta", iterations=None, cpus=(2,)),
    make_job("j-000006", "preempted", name="eps", iterations_done=300),
]


def ids(query: dict[str, list[str]]) -> list[str]:
    return [job["id"] for job in listing.table(JOBS, JobQuery.from_query(query))["jobs"]]


def test_by_default_running_then_waiting_then_finished_newest_first() -> None:
    assert ids({}) == ["j-000002", "j-000005", "j-000003", "j-000006", "j-000004", "j-000001"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"state": ["running"]}, ["j-000002", "j-000005"]),
        ({"state": ["queued,preempted"]}, ["j-000003", "j-000006"]),
        ({"state": ["finished"]}, ["j-000004", "j-000001"]),
        ({"state": ["active"]}, ["j-000002", "j-000005", "j-000003", "j-000006"]),
        ({"q": ["BETA"]}, ["j-000002", "j-000004"]),  # any case, anywhere in the name
        ({"q": ["j-000003"]}, ["j-000003"]),  # or the id
        ({"q": ["beta"], "state": ["failed"]}, ["j-000004"]),
        ({"q": ["nothing like it"]}, []),
        (
            {"q": [""], "state": [""]},
            ["j-000002", "j-000005", "j-000003", "j-000006", "j-000004", "j-000001"],
        ),
    ],
    ids=[
        "state",
        "two-states",
        "finished",
        "active",
        "text-name",
        "text-id",
        "both",
        "none",
        "blank",
    ],
)
def test_filter_by_state_and_text(query: dict[str, list[str]], expected: list[str]) -> None:
    assert ids(query) == expected


@pytest.mark.parametrize(
    ("sort", "order", "expected"),
    [
        ("name", "asc", ["j-000001", "j-000002", "j-000004", "j-000005", "j-000006", "j-000003"]),
        ("name", "desc", ["j-000003", "j-000006", "j-000005", "j-000004", "j-000002", "j-000001"]),
        ("id", "desc", ["j-000006", "j-000005", "j-000004", "j-000003", "j-000002", "j-000001"]),
        # 0/400 (j-3), 40/400, 100/400, 300/400, 400/400; j-5 has no iterations: last either way.
        (
            "progress",
            "asc",
            ["j-000003", "j-000004", "j-000002", "j-000006", "j-000001", "j-000005"],
        ),
        (
            "progress",
            "desc",
            ["j-000001", "j-000006", "j-000002", "j-000004", "j-000003", "j-000005"],
        ),
        # Equal keys keep submission order in both directions: 2 cores, 1, then none.
        ("cores", "desc", ["j-000002", "j-000005", "j-000001", "j-000003", "j-000004", "j-000006"]),
        # Finish: only j-1 (100) and j-4 (300) have one; the rest follow, in submission order.
        (
            "finish",
            "desc",
            ["j-000004", "j-000001", "j-000002", "j-000003", "j-000005", "j-000006"],
        ),
    ],
)
def test_sort_by_a_column(sort: str, order: str, expected: list[str]) -> None:
    assert ids({"sort": [sort], "order": [order]}) == expected


def test_outlook_sorts_the_latest_jobs_first() -> None:
    jobs = [
        make_job("j-1", "running", predicted_finish_at=500.0),  # 100 s early
        make_job("j-2", "running", predicted_finish_at=700.0),  # 100 s late
        make_job("j-3", "succeeded", finished_at=590.0),  # 10 s early
    ]
    page = listing.table(jobs, JobQuery(sort="outlook"))
    assert [job["id"] for job in page["jobs"]] == ["j-2", "j-3", "j-1"]


def test_a_page_is_cut_from_the_sorted_matches_and_says_how_many_there_are() -> None:
    page = listing.table(JOBS, JobQuery.from_query({"offset": ["2"], "limit": ["3"]}))
    assert [job["id"] for job in page["jobs"]] == ["j-000003", "j-000006", "j-000004"]
    assert (page["total"], page["matched"], page["offset"], page["limit"]) == (6, 6, 2, 3)
    filtered = listing.table(JOBS, JobQuery.from_query({"state": ["running"], "offset": ["5"]}))
    assert (filtered["jobs"], filtered["matched"], filtered["total"]) == ([], 2, 6)
    # Every state's count over all jobs, whatever the filter: the filter's buttons show them.
    assert filtered["states"] == {
        "queued": 1, "profiling": 0, "running": 2, "preempted": 1,
        "succeeded": 1, "failed": 1, "cancelled": 0, "declined": 0,
    }  # fmt: skip
    assert page["jobs"][0] == JOBS[2].to_json()


def test_the_default_query_is_the_first_fifty_in_the_default_order() -> None:
    assert JobQuery.from_query({}) == JobQuery()
    many = [make_job(f"j-{n:06d}", "queued") for n in range(1, 121)]
    page = listing.table(many, JobQuery())
    assert [job["id"] for job in page["jobs"]] == [f"j-{n:06d}" for n in range(1, 51)]
    assert (page["sort"], page["order"]) == ("active", "asc")


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-parameter", {"page": ["2"]}, "page", "unknown query parameter 'page'"),
    ("unknown-state", {"state": ["running,done"]}, "state", "no state 'done'; known: active"),
    ("unknown-column", {"sort": ["colour"]}, "sort", "no column 'colour'"),
    ("bad-order", {"order": ["up"]}, "order", "expected asc or desc"),
    ("zero-limit", {"limit": ["0"]}, "limit", "expected a whole number"),
    ("limit-over-most", {"limit": [str(listing.MAX_LIMIT + 1)]}, "limit", "<= 500"),
    ("negative-offset", {"offset": ["-1"]}, "offset", "expected a whole number >= 0"),
    ("huge-offset", {"offset": [str(2**64)]}, "offset", "below 2**53"),
    ("non-ascii-digits", {"offset": ["\u0663"]}, "offset", "expected a whole number"),
    ("long-text", {"q": ["x" * (listing.MAX_TEXT + 1)]}, "q", "at most 200 characters"),
]


@pytest.mark.parametrize(("query", "field", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_query_names_its_parameter(
    query: dict[str, list[str]], field: str, words: str
) -> None:
    with pytest.raises(InputError) as raised:
        JobQuery.from_query(query)
    assert raised.value.field == field
    assert words in str(raised.value)
