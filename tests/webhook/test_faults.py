"""What a fault probe found (issue 18), each reproduced over the real server first."""

from __future__ import annotations

import json

import pytest

from tests.webhook.conftest import Webhook, review
from webhook.review import ReviewError, decode_review

_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "NAME", "namespace": "team-a"},
    "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "IMAGE"}]}}},
}
_GOOD = review(_JOB, uid="utf8", dry_run=True)


@pytest.mark.parametrize(
    ("body", "offset"),
    [
        (_GOOD.replace(b'"NAME"', b'"a\xff\xfeb"'), _GOOD.index(b'"NAME"') + 2),  # in a field read as str
        (_GOOD.replace(b'"IMAGE"', b'"\xc3"'), _GOOD.index(b'"IMAGE"') + 1),  # in the raw object, cut short
        (_GOOD.replace(b"admission.k8s.io/v1", b"adm\xff"), _GOOD.index(b"admission.k8s.io/v1") + 3),
    ],
    ids=["name", "object", "apiVersion"],
)
def test_invalid_utf8_inside_a_string_is_a_review_error_with_the_byte(body: bytes, offset: int) -> None:
    with pytest.raises(ReviewError, match=f"invalid UTF-8 at byte {offset}"):
        decode_review(body)


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_invalid_utf8_over_http_gets_400_with_the_reason(webhook: Webhook, path: str) -> None:
    body = _GOOD.replace(b'"NAME"', b'"a\xff\xfeb"')
    status, text = webhook.request("POST", path, body=body)
    assert status == 400, text
    assert "invalid UTF-8 at byte" in json.loads(text)["error"]
