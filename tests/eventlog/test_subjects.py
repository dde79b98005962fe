"""Subject naming: reversible escaping (property-tested) and the layout a person filters on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eventlog import events as ev
from eventlog import subjects
from tests.eventlog import samples

FORBIDDEN = {".", "*", ">"}


@given(st.text())
def test_escape_is_reversible(token: str) -> None:
    assert subjects.unescape(subjects.escape(token)) == token


@given(st.text())
def test_escaped_token_is_a_valid_nats_token(token: str) -> None:
    escaped = subjects.escape(token)
    assert escaped != ""
    assert not FORBIDDEN & set(escaped)
    assert not any(ch.isspace() for ch in escaped)
    assert escaped.isascii() and escaped.isprintable()


@given(st.text(), st.text())
def test_distinct_tokens_stay_distinct(a: str, b: str) -> None:
    if a != b:
        assert subjects.escape(a) != subjects.escape(b)


@given(st.text(alphabet=st.characters(codec="ascii", exclude_characters=".*>~ \t\r\n"), min_size=1))
def test_plain_names_are_left_alone(token: str) -> None:
    if token.isprintable():
        assert subjects.escape(token) == token


def test_every_sample_has_a_filterable_subject_ending_in_its_key() -> None:
    for event in samples.INPUTS + samples.DECISIONS:
        subject = subjects.log_subject(event)
        tokens = subject.split(".")
        assert tokens[:2] == ["kd", "log"]
        assert all(t and not FORBIDDEN & set(t) for t in tokens), subject
        job = getattr(event, "job", None) or getattr(event, "preemptor", None)
        if isinstance(job, ev.JobRef):
            assert [subjects.unescape(t) for t in tokens[-2:]] == [job.namespace, job.name]
        elif isinstance(getattr(event, "cluster", None), str):
            assert subjects.unescape(tokens[-1]) == event.cluster  # type: ignore[attr-defined]


def test_job_filter_matches_the_job_subjects() -> None:
    job = ev.JobRef(namespace="ns.a", name="train.v1", uid="u")
    assert (
        subjects.log_subject(ev.Placed(job=job, cluster="c", attempt=1))
        == "kd.log.decision.placed.ns~2Ea.train~2Ev1"
    )
    assert subjects.job_filter("ns.a", "train.v1") == "kd.log.*.*.ns~2Ea.train~2Ev1"
