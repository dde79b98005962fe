"""The event contract: every type round-trips, and bad payloads raise a typed error with a path."""

from __future__ import annotations

import pytest

from eventlog import codec, subjects
from eventlog import events as ev


def test_every_type_is_in_exactly_one_union() -> None:
    assert set(ev.INPUT_TYPES).isdisjoint(ev.DECISION_TYPES)
    assert len(ev.ALL_TYPES) == len(set(ev.ALL_TYPES))


def test_every_type_has_a_subject_name() -> None:
    for cls in ev.ALL_TYPES:
        assert cls.__name__ in subjects._NAMES, cls


def test_wrong_field_type_names_the_path() -> None:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_event(
            b'{"type":"JobSubmitted","job":{"namespace":1,"name":"a","uid":"u"},"pod_sets":[]}'
        )
    assert info.value.path == "$.job.namespace"


def test_unknown_type_is_a_decode_error() -> None:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_event(b'{"type":"NoSuchEvent"}')
    assert info.value.path == "$.type"


def test_not_json_is_a_decode_error() -> None:
    with pytest.raises(codec.DecodeError, match="not JSON"):
        codec.decode_event(b"\xff\x00garbage")
