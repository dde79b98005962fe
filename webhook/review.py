"""AdmissionReview (``admission.k8s.io/v1``, and v1beta1 which has the same shape) as msgspec types.

``decode_review`` turns a request body into an ``AdmissionRequest`` or raises ``ReviewError``,
which the server answers with HTTP 400 and the reason. A bare AdmissionRequest (the format
``kwctl`` and several policy test suites use) is accepted too and answered as a v1 review.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec
from msgspec import Struct, field

from webhook.quote import short

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class ReviewError(ValueError):
    """The body is not an AdmissionReview we can answer: ``path`` says where (JSON path)."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(f"{path}: {message}" if path != "$" else message)
        self.message = message
        self.path = path


class GroupVersionKind(Struct, frozen=True):
    kind: str
    group: str = ""
    version: str = ""


class GroupVersionResource(Struct, frozen=True):
    resource: str = ""
    group: str = ""
    version: str = ""


class UserInfo(Struct, frozen=True):
    username: str = ""
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)


class AdmissionRequest(Struct, frozen=True, rename="camel"):
    kind: GroupVersionKind
    operation: Operation
    uid: str = ""  # the apiserver always sends one; a hand-made review may not
    resource: GroupVersionResource | None = None
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    user_info: UserInfo = field(default_factory=UserInfo)
    # Kept as the JSON sent: the patch is computed against it and the recorded manifest is all of
    # it. Only a supported kind needs one; admit decodes the parts it reads into typed views then
    # (webhook/objects.py, webhook/podsets), so the review itself is decoded in one pass (some real
    # captures carry e.g. "oldObject": "None" on a CREATE, which no one reads).
    object: Any = None
    old_object: Any = None
    dry_run: bool = False
    options: Any = None


class Status(Struct, frozen=True, omit_defaults=True):
    code: int = 0
    message: str = ""
    reason: str = ""
    status: str = "Failure"


class AdmissionResponse(Struct, frozen=True, omit_defaults=True, rename="camel"):
    uid: str
    allowed: bool
    status: Status | None = None
    patch: str | None = None  # base64 of a JSONPatch document
    patch_type: Literal["JSONPatch"] | None = None
    warnings: list[str] | None = None
    audit_annotations: dict[str, str] | None = None


class AdmissionReview(Struct, frozen=True, omit_defaults=True, rename="camel"):
    api_version: str = "admission.k8s.io/v1"
    kind: str = "AdmissionReview"
    request: AdmissionRequest | None = None
    response: AdmissionResponse | None = None


class _ReviewOut(Struct, frozen=True, rename="camel"):
    """What the webhook sends back: apiVersion and kind always present, as the apiserver requires."""

    api_version: str
    kind: str
    response: AdmissionResponse


class _Envelope(Struct, frozen=True, rename="camel"):
    """What tells a review from a bare request before the strict decode."""

    api_version: Any = ""
    kind: Any = ""
    request: msgspec.Raw = msgspec.Raw(b"")
    operation: Any = None


class _Direct(Struct, frozen=True, rename="camel"):
    """A well-formed review, read in one pass (the common case); anything else takes the
    envelope path, which says what is wrong."""

    api_version: str = ""
    kind: str = ""
    request: AdmissionRequest | None = None


_review_decoder = msgspec.json.Decoder(AdmissionReview)
_direct_decoder = msgspec.json.Decoder(_Direct)
_request_decoder = msgspec.json.Decoder(AdmissionRequest)
_envelope_decoder = msgspec.json.Decoder(_Envelope)
_encoder = msgspec.json.Encoder()


def _error_from(err: msgspec.MsgspecError, *, prefix: str) -> ReviewError:
    text = str(err)
    marker = " - at `"
    if marker in text:
        message, path = text.rsplit(marker, 1)
        return ReviewError(message, path=prefix + path.rstrip("`")[1:])
    if isinstance(err, msgspec.ValidationError):
        return ReviewError(text, path=prefix or "$")
    return ReviewError(f"not JSON: {text}")


def decode_review(body: bytes) -> tuple[str, AdmissionRequest]:
    """(apiVersion to answer with, the request). Raises ``ReviewError`` for anything else."""
    if not body or body.isspace():  # what strip() would leave empty, without copying the body
        raise ReviewError("empty body: expected an AdmissionReview (admission.k8s.io/v1)")
    try:
        return _decode(body)
    except RecursionError:
        raise ReviewError("JSON nested too deeply") from None
    except UnicodeDecodeError as err:
        # msgspec checks UTF-8 only when it turns a JSON string into ``str``, and raises this
        # (not a MsgspecError) with the offset inside that string, not the body: find it in the body.
        raise ReviewError(f"not JSON: invalid UTF-8 at byte {_first_bad_utf8(body)} ({err.reason})") from None


def _first_bad_utf8(body: bytes) -> int:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start
    return 0  # only a part msgspec decoded on its own was bad; the body as a whole is fine


def _decode(body: bytes) -> tuple[str, AdmissionRequest]:
    try:
        direct = _direct_decoder.decode(body)
    except msgspec.MsgspecError:
        pass
    else:
        if direct.request is not None and direct.kind == "AdmissionReview" and direct.api_version in REVIEW_VERSIONS:
            return direct.api_version, direct.request
    try:
        envelope = _envelope_decoder.decode(body)
    except msgspec.MsgspecError as err:
        if isinstance(err, msgspec.ValidationError):
            raise ReviewError("expected a JSON object: an AdmissionReview (admission.k8s.io/v1)") from None
        raise _error_from(err, prefix="") from None
    request = bytes(envelope.request)
    if not request and envelope.operation is not None and isinstance(envelope.kind, dict):
        try:
            return REVIEW_VERSIONS[0], _request_decoder.decode(body)
        except msgspec.MsgspecError as err:
            raise _error_from(err, prefix="$") from None
    if envelope.kind != "AdmissionReview":
        raise ReviewError(f"kind is {short(envelope.kind)}, expected 'AdmissionReview'", path="$.kind")
    if envelope.api_version not in REVIEW_VERSIONS:
        raise ReviewError(
            f"apiVersion {short(envelope.api_version)} is not one of {', '.join(REVIEW_VERSIONS)}",
            path="$.apiVersion",
        )
    if not request or request == b"null":
        raise ReviewError("no request: an AdmissionReview sent to a webhook carries `request`", path="$.request")
    try:
        return envelope.api_version, _request_decoder.decode(request)
    except msgspec.MsgspecError as err:
        raise _error_from(err, prefix="$.request") from None


def encode_response(response: AdmissionResponse, *, api_version: str = REVIEW_VERSIONS[0]) -> bytes:
    return _encoder.encode(_ReviewOut(api_version=api_version, kind="AdmissionReview", response=response))


def decode_any_review(body: bytes) -> AdmissionReview:
    """Decode a whole review (request or response side); for tests and tools."""
    try:
        return _review_decoder.decode(body)
    except msgspec.MsgspecError as err:
        raise _error_from(err, prefix="$") from None


def encode_patch(ops: list[dict[str, Any]]) -> str:
    return base64.b64encode(_encoder.encode(ops)).decode("ascii")
