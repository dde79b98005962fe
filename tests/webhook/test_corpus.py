"""The real corpus: every manifest of a supported kind, and the real AdmissionReview samples."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eventlog.events import PodSet
from eventlog.kube import kinds, names
from tests.paths import DATA
from webhook import admit, jsonpatch, placement, podsets
from webhook.review import ReviewError, decode_any_review, decode_review, encode_response

CORPUS = DATA
K8S_VERSION = "1.33"  # Job.spec.managedBy is in the schema from 1.30 on


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """kubernetes-validate must work offline (it ships its schemas): any connection fails here."""

    def refuse(self: socket.socket, address: object) -> None:
        raise OSError(f"network disabled in this test (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def _supported_documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((CORPUS / "manifests").rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and kinds.lookup_api_version(str(doc.get("apiVersion")), str(doc.get("kind"))):
                out.append((f"{path.relative_to(CORPUS / 'manifests')}#{i}", doc))
    return out


DOCUMENTS = _supported_documents()


def _review(obj: dict[str, Any], *, operation: str = "CREATE", uid: str = "3f1c") -> bytes:
    info = kinds.lookup_api_version(obj["apiVersion"], obj["kind"])
    assert info is not None
    request = {
        "uid": uid,
        "kind": {"group": info.group, "version": info.version, "kind": info.kind},
        "resource": {"group": info.group, "version": info.version, "resource": info.plural},
        "operation": operation,
        "namespace": "team-a",
        "name": obj.get("metadata", {}).get("name", ""),
        "userInfo": {"username": "alice"},
        "object": obj,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def _opted_in(doc: dict[str, Any]) -> dict[str, Any]:
    """The manifest as a user of kdispatch submits it: with a queue label (many already have one)."""
    obj = json.loads(json.dumps(doc))
    obj.setdefault("metadata", {}).setdefault("labels", {}).setdefault(names.QUEUE_LABEL, "user-queue")
    return obj


def test_the_corpus_has_every_family_of_kinds() -> None:
    found = {doc["kind"] for _, doc in DOCUMENTS}
    assert {"Job", "JobSet", "RayJob", "RayCluster", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"} <= found
    assert {"TrainJob", "AppWrapper", "Pod"} <= found
    assert len(DOCUMENTS) >= 60


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_every_supported_manifest_is_admitted_held_and_normalized(name: str, doc: dict[str, Any]) -> None:
    obj = _opted_in(doc)
    info = kinds.lookup_api_version(obj["apiVersion"], obj["kind"])
    assert info is not None
    _, request = decode_review(_review(obj))
    outcome = admit.mutate(request, admit.Settings())
    assert outcome.allowed, outcome.response.status
    assert outcome.response.uid == "3f1c"

    if outcome.reason == "not-dispatchable":  # a RayJob on an existing RayCluster: left alone, with a warning
        assert obj["kind"] == "RayJob" and "clusterSelector" in obj["spec"]
        assert outcome.response.patch is None and outcome.response.warnings
        return

    ops = json.loads(base64.b64decode(outcome.response.patch or ""))
    patched = jsonpatch.apply(obj, ops)
    annotations = patched["metadata"]["annotations"]
    assert annotations[placement.PLACEMENT_ANNOTATION] == placement.canonical_json(placement.parse(annotations))
    assert admit.is_held(info, patched)
    if info.managed_by_path:
        node = patched
        for key in info.managed_by_path:
            node = node[key]
        assert node == names.MANAGED_BY
    assert podsets.pod_sets(info, patched) == podsets.pod_sets(info, obj)
    if info.group in ("", "batch"):  # built-in kinds: the patched object is still valid Kubernetes, strictly
        assert kubernetes_validate.validate(patched, K8S_VERSION, strict=True)

    _, again = decode_review(_review(patched))
    second = admit.mutate(again, admit.Settings())
    assert second.allowed and second.response.patch is None  # a normalized object needs no patch


MI, GI = 2**20, 2**30
HAND_CHECKED = {
    # parallelism 3, completions 3; one container: cpu "1", memory "200Mi"
    "kueue/jobs/sample-job.yaml#0": [PodSet(name="main", count=3, requests={"cpu": 1000, "memory": 200 * MI})],
    # workers: replicas 1 x min(1, 1), cpu 1; driver: replicas defaults to 1, cpu 2
    "kueue/jobs/sample-jobset.yaml#0": [
        PodSet(name="workers", count=1, requests={"cpu": 1000, "memory": 200 * MI}),
        PodSet(name="driver", count=1, requests={"cpu": 2000, "memory": 200 * MI}),
    ],
    # head: requests 1 / 2Gi (limits 5Gi ignored); small-group: 1 x 200m; default submitter 500m / 200Mi
    "kuberay/ray-job.sample.yaml#0": [
        PodSet(name="head", count=1, requests={"cpu": 1000, "memory": 2 * GI}),
        PodSet(name="small-group", count=1, requests={"cpu": 200}),
        PodSet(name="submitter", count=1, requests={"cpu": 500, "memory": 200 * MI}),
    ],
    # Master and Worker, one replica each, cpu 1 / 200Mi
    "kueue/jobs/sample-pytorchjob.yaml#0": [
        PodSet(name="master", count=1, requests={"cpu": 1000, "memory": 200 * MI}),
        PodSet(name="worker", count=1, requests={"cpu": 1000, "memory": 200 * MI}),
    ],
}


@pytest.mark.parametrize("name", sorted(HAND_CHECKED))
def test_pod_sets_of_real_manifests_checked_by_hand(name: str) -> None:
    doc = dict(DOCUMENTS)[name]
    info = kinds.lookup_api_version(doc["apiVersion"], doc["kind"])
    assert info is not None
    assert podsets.pod_sets(info, doc) == HAND_CHECKED[name]


REQUEST_SAMPLES = sorted(p for p in (CORPUS / "admissionreview").glob("*.json") if not p.name.startswith("k8sdocs-response"))
BROKEN = {"connaisseur-21_broken_admission_request.json", "connaisseur-25_null_request.json"}


@pytest.mark.parametrize("path", REQUEST_SAMPLES, ids=[p.name for p in REQUEST_SAMPLES])
@pytest.mark.parametrize("hook", [admit.mutate, admit.validate], ids=["mutate", "validate"])
def test_real_review_samples_get_well_formed_answers(path: Path, hook: Any) -> None:
    body = path.read_bytes()
    if path.name in BROKEN:
        with pytest.raises(ReviewError):
            decode_review(body)
        return
    api_version, request = decode_review(body)
    outcome = hook(request, admit.Settings())
    answer = decode_any_review(encode_response(outcome.response, api_version=api_version))
    raw = json.loads(body)
    sent = raw.get("request", raw)
    assert answer.api_version == raw.get("apiVersion", "admission.k8s.io/v1")
    assert answer.kind == "AdmissionReview"
    assert answer.response is not None and answer.response.uid == sent.get("uid", "")
    assert answer.response.allowed  # none of these opts in to kdispatch: allowed untouched
    assert answer.response.patch is None and not outcome.records


RESPONSE_SAMPLES = sorted((CORPUS / "admissionreview").glob("k8sdocs-response-*.json"))


@pytest.mark.parametrize("path", RESPONSE_SAMPLES, ids=[p.name for p in RESPONSE_SAMPLES])
def test_documented_responses_match_our_response_type(path: Path) -> None:
    review = decode_any_review(path.read_bytes())
    assert review.response is not None and review.request is None
    ours = json.loads(encode_response(review.response, api_version=review.api_version))
    assert ours == json.loads(path.read_bytes())  # what we would send has the documented shape
    with pytest.raises(ReviewError, match="no request"):
        decode_review(path.read_bytes())


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "empty body"),
        (b"null", "expected a JSON object"),
        (b"[1,2]", "expected a JSON object"),
        (b"{", "not JSON"),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"kind":{"kind":"Job"},"operation":"CREATE","object":{"a":'
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}}}",
            "nested too deeply",
        ),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2","request":{}}', "$.apiVersion"),
        (b'{"kind":"Pod","apiVersion":"v1"}', "$.kind"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE"}}', "kind"),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"kind":{"kind":"Job"},"operation":"PATCH"}}',
            "$.request.operation",
        ),
    ],
)
def test_malformed_reviews_say_what_is_wrong(body: bytes, fragment: str) -> None:
    with pytest.raises(ReviewError) as err:
        decode_review(body)
    assert fragment in str(err.value)
