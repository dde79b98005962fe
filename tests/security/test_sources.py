"""Which producer may send which input type (``eventlog.subjects.SOURCE_TYPES``), as the
sequencer applies it to every inbox message (``eventlog.wire.inbox_item``)."""

from __future__ import annotations

from eventlog import codec, subjects
from eventlog import events as ev
from eventlog.wire import inbox_item

JOB = ev.JobRef(namespace="team-a", name="train", uid="u1")


def test_source_tokens_are_not_categories_and_name_input_types() -> None:
    assert not set(subjects.SOURCE_TYPES) & set(subjects.names_by_category())
    inputs = {t.__name__ for t in ev.INPUT_TYPES}
    for types in subjects.SOURCE_TYPES.values():
        assert types <= inputs


def test_each_source_sends_its_own_types_and_the_plain_layout_takes_every_input() -> None:
    admitted = ev.RemoteAdmitted(job=JOB, cluster="east", attempt=1)
    submitted = ev.JobSubmitted(job=JOB, pod_sets=[])
    cases = [
        ("kd.in.worker.remote.admitted.team-a.train", admitted, "RemoteAdmitted"),
        ("kd.in.webhook.job.submitted.team-a.train", submitted, "JobSubmitted"),
        ("kd.in.job.submitted.team-a.train", submitted, "JobSubmitted"),  # the reconciler's own
        ("kd.in.remote.admitted.team-a.train", admitted, "RemoteAdmitted"),
        ("kd.in.worker.job.submitted.team-a.train", submitted, "Rejected"),
        ("kd.in.webhook.remote.admitted.team-a.train", admitted, "Rejected"),
    ]
    for subject, event, kind in cases:
        item = inbox_item(seq=7, subject=subject, data=codec.encode(event))
        assert type(item.event).__name__ == kind, subject
        if isinstance(item.event, ev.Rejected):
            assert item.event.subject == subject and item.event.inbox_seq == 7
            assert "may not come from the" in item.event.reason
