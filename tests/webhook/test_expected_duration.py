"""``kdispatch.io/expected-duration`` through the webhook: accepted and carried in the recorded
manifest (where the reconciler's forecast reads it), refused with a did-you-mean when unreadable."""

from __future__ import annotations

from eventlog import events as ev
from eventlog.kube.names import EXPECTED_DURATION_ANNOTATION
from reconciler.forecast import DurationLearner
from webhook import admit

from .test_admit import SETTINGS, _admitted, _job, _request


def test_an_expected_duration_reaches_the_forecast_through_the_recorded_manifest() -> None:
    stored = _admitted(_job(**{EXPECTED_DURATION_ANNOTATION: "2h"}))
    outcome = admit.validate(_request(stored), SETTINGS)
    assert outcome.allowed
    [record] = outcome.records
    assert isinstance(record.event, ev.JobSubmitted)
    learner = DurationLearner()
    learner.observe(ev.LogEntry(seq=1, at_ms=0, event=record.event))
    assert learner.durations().runtime_ms("team-a/train") == 2 * 3600_000


def test_an_unreadable_expected_duration_is_refused_with_what_is_accepted() -> None:
    outcome = admit.mutate(_request(_job(**{EXPECTED_DURATION_ANNOTATION: "2 hours"})), SETTINGS)
    assert not outcome.allowed and outcome.reason == "invalid-placement"
    assert outcome.response.status is not None
    message = outcome.response.status.message
    assert EXPECTED_DURATION_ANNOTATION in message and 'did you mean "2h"' in message and "1h30m" in message
