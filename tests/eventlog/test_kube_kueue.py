"""Kueue objects -> QueuesConfigured: the real manifests decode, every bad config is named."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.kube.kueue import KUEUE_KINDS, QueueConfigError, decode_objects, load_queues, read_queues
from tests.paths import MANIFESTS, REPO

KUEUE = MANIFESTS / "kueue"
EXAMPLE = REPO / "deploy" / "examples" / "three-teams.yaml"


def _has_queue_kinds(path: Path) -> bool:
    text = path.read_text()
    return any(f"kind: {k}" in text for k in KUEUE_KINDS)


# The kueueviz examples are one set spread over several files: decoded as a directory below.
ALL_MANIFESTS = sorted(
    p for p in KUEUE.rglob("*.yaml") if not (p.parent.name == "kueueviz-examples" and _has_queue_kinds(p))
)


@pytest.mark.parametrize("path", ALL_MANIFESTS, ids=lambda p: str(p.relative_to(KUEUE)))
def test_every_kueue_manifest_decodes_or_is_named_as_holding_no_queue_config(path: Path) -> None:
    if _has_queue_kinds(path):
        loaded = read_queues(path)
        assert loaded.config.source == str(path)
        # other kinds in the same file are listed, not decoded
        others = {
            line.split(":", 1)[1].strip()
            for line in path.read_text().splitlines()
            if line.startswith("kind:")
        }
        if others - set(KUEUE_KINDS) - {"Namespace"}:
            assert loaded.skipped
    else:
        with pytest.raises(
            QueueConfigError, match=r"no queue configuration found.*skipped, not queue configuration"
        ):
            read_queues(path)


@pytest.mark.parametrize("folder", ["kueueviz-examples", "getting-started", "admission-fs"])
def test_kueue_sample_sets_decode_as_directories(folder: str) -> None:
    loaded = read_queues(KUEUE / folder)
    assert loaded.config.cluster_queues
    assert all(
        s.endswith(("Job/agi-", "Job/llm-", "Job/cancer-research-", "Job/sample-job-", "Job/sample-job"))
        for s in loaded.skipped
    )


def test_kueueviz_cohort_tree_and_classes() -> None:
    cfg = load_queues(KUEUE / "kueueviz-examples")
    cohorts = {c.name: c for c in cfg.cohorts}
    assert cohorts["research"].parent == "organization"
    assert cohorts["engineering"].parent == "organization"
    assert cfg.priority_classes == {
        "business-impacting": 1000,
        "human-critical": 1000000,
        "long-term-research": 1,
    }
    emergency = next(q for q in cfg.cluster_queues if q.name == "emergency-cluster-queue")
    assert emergency.preemption.reclaim_within_cohort in ("Any", "LowerPriority")


def test_three_team_example() -> None:
    cfg = load_queues(EXAMPLE)
    queues = {q.name: q for q in cfg.cluster_queues}
    assert list(queues) == ["ci", "product", "research"]
    research = queues["research"]
    assert research.cohort == "engineering"
    assert research.weight_milli == 2000
    assert research.allowed_priority_classes == ["low", "normal"]
    cpu, memory = research.resource_groups[0].flavors[0].resources
    assert (cpu.name, cpu.nominal, cpu.borrowing_limit, cpu.lending_limit) == ("cpu", 48_000, 32_000, None)
    assert memory.nominal == 192 * 2**30
    gpu = research.resource_groups[1].flavors[0].resources[0]
    assert (gpu.nominal, gpu.lending_limit) == (8, 4)
    assert research.preemption == ev.QueuePreemption(
        reclaim_within_cohort="Any",
        within_cluster_queue="LowerPriority",
        borrow_within_cohort="LowerPriority",
        borrow_max_priority_threshold=100,
    )
    assert research.namespace_selector == ev.LabelSelector(match_labels={"team": "research"})
    assert queues["ci"].queueing_strategy == "StrictFIFO"
    assert queues["ci"].namespace_selector == ev.LabelSelector(
        match_expressions=[ev.LabelRequirement(key="team", operator="In", values=["ci"])]
    )
    assert cfg.cohorts == [ev.CohortSpec(name="engineering")]
    assert cfg.priority_classes == {"critical": 100000, "low": 100, "normal": 1000}
    assert cfg.flavors == ["default", "gpu"]
    assert cfg.namespaces["ci"] == {"kubernetes.io/metadata.name": "ci", "team": "ci"}
    assert [(lq.namespace, lq.name, lq.cluster_queue) for lq in cfg.local_queues] == [
        ("ci", "default", "ci"),
        ("product", "default", "product"),
        ("research", "default", "research"),
    ]


def test_order_of_documents_and_files_does_not_matter(tmp_path: Path) -> None:
    docs = EXAMPLE.read_text().split("\n---\n")
    (tmp_path / "a.yaml").write_text("\n---\n".join(reversed(docs[1:])))
    (tmp_path / "b.yml").write_text(docs[0])
    (tmp_path / "notes.txt").write_text("not read")
    first, second = load_queues(EXAMPLE), load_queues(tmp_path)
    assert first.cluster_queues == second.cluster_queues
    assert first.local_queues == second.local_queues and first.cohorts == second.cohorts


def test_decode_objects_as_the_manager_watcher_hands_them() -> None:
    objs = [
        (
            "manager",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "a"},
                "spec": {"cohort": "c", "namespaceSelector": {}},
            },
        ),
        (
            "manager",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "ns"},
                "spec": {"clusterQueue": "a"},
            },
        ),
    ]
    cfg = decode_objects(objs, source="manager")
    assert (
        cfg.cluster_queues[0].cohort == "c" and cfg.cluster_queues[0].namespace_selector == ev.LabelSelector()
    )
    assert cfg.cohorts == [ev.CohortSpec(name="c")]  # implicit, as Kueue creates it
    assert decode_objects([], source="manager", allow_empty=True) == ev.QueuesConfigured(source="manager")
    with pytest.raises(QueueConfigError, match="no queue configuration found"):
        decode_objects([], source="manager")


# ---- errors ------------------------------------------------------------------------------------

CQ = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
spec:
  cohortName: all
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu", "memory"]
    flavors:
    - name: default
      resources:
      - name: cpu
        nominalQuota: 8
      - name: memory
        nominalQuota: 32Gi
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: default
"""


def _load(tmp_path: Path, text: str) -> QueueConfigError:
    path = tmp_path / "queues.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(QueueConfigError) as info:
        load_queues(path)
    return info.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            CQ.replace("nominalQuota: 32Gi", "nominalQuota: -1Gi"),
            [
                "queues.yaml:16: ClusterQueue/team-a: $.spec.resourceGroups[0].flavors[0].resources[1].nominalQuota:",
                "negative",
            ],
            id="negative-quantity",
        ),
        pytest.param(
            CQ.replace("nominalQuota: 32Gi", "nominalQuota: 32GB"),
            [
                ":16: ClusterQueue/team-a: $.spec.resourceGroups[0].flavors[0].resources[1].nominalQuota:",
                "did you mean '32G'",
            ],
            id="malformed-quantity",
        ),
        pytest.param(
            CQ.replace("nominalQuota: 8", "nominalQuota: 8\n        borowingLimit: 2"),
            [
                ":15: ClusterQueue/team-a: $.spec.resourceGroups[0].flavors[0].resources[0].borowingLimit: unknown field",
                "did you mean 'borrowingLimit'",
            ],
            id="unknown-field-honoured-place",
        ),
        pytest.param(
            CQ.replace("  cohortName: all\n", "  cohortName: all\n  fairSharing:\n    weight: -1\n"),
            [":8: ClusterQueue/team-a: $.spec.fairSharing.weight: -1 is negative", "0 or more"],
            id="negative-weight",
        ),
        pytest.param(
            CQ.replace("cohortName: all", "cohort: all"),
            [":6: ClusterQueue/team-a: $.spec.cohort: kueue.x-k8s.io/v1beta2 calls this field 'cohortName'"],
            id="v1beta1-spelling-in-v1beta2",
        ),
        pytest.param(
            CQ + "---\n" + CQ.split("---\n")[0],
            [
                ":26: ClusterQueue/team-a: $.metadata.name: a second ClusterQueue/team-a; the first is at",
                "queues.yaml:1",
            ],
            id="duplicate-name",
        ),
        pytest.param(
            CQ.replace("- name: default\n", "- name: defualt\n"),
            [
                ":11: ClusterQueue/team-a: $.spec.resourceGroups[0].flavors[0].name: no ResourceFlavor named 'defualt'",
                "did you mean 'default'",
            ],
            id="missing-flavor",
        ),
        pytest.param(
            CQ
            + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: q\n  namespace: ns\n"
            "spec:\n  clusterQueue: team-b\n",
            [
                ":29: LocalQueue/ns/q: $.spec.clusterQueue: no ClusterQueue named 'team-b'",
                "did you mean 'team-a'",
            ],
            id="localqueue-missing-clusterqueue",
        ),
        pytest.param(
            CQ.replace(
                "kind: ClusterQueue\nmetadata:\n  name: team-a\n",
                "kind: ClusterQueue\nmetadata:\n  name: team-a\n  annotations:\n"
                "    kdispatch.io/allowed-priority-classes: 'low, hihg'\n",
            )
            + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata:\n  name: low\nvalue: 1\n"
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata:\n  name: high\nvalue: 9\n",
            [
                ":6: ClusterQueue/team-a: $.metadata.annotations.kdispatch.io/allowed-priority-classes: "
                "no WorkloadPriorityClass named 'hihg'",
                "did you mean 'high'",
            ],
            id="allowed-class-missing",
        ),
        pytest.param(
            CQ.replace("cohortName: all", "cohortName: a")
            + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: a\nspec:\n  parentName: b\n"
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: b\nspec:\n  parentName: a\n",
            [
                ":28: Cohort/a: $.spec.parentName: the cohorts form a cycle: Cohort/a -> Cohort/b -> Cohort/a",
                "ClusterQueue team-a in it",
            ],
            id="cohort-cycle",
        ),
        pytest.param(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: a\nspec:\n  parentName: a\n",
            [":6: Cohort/a: $.spec.parentName: the cohort 'a' is its own parent"],
            id="cohort-own-parent",
        ),
        pytest.param(
            CQ.replace("  cohortName: all\n", "").replace(
                "nominalQuota: 8", "nominalQuota: 8\n        borrowingLimit: 2"
            ),
            [
                ": ClusterQueue/team-a: $.spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
                "is set but there is no cohort to borrow from"
            ],
            id="limit-without-cohort",
        ),
        pytest.param(
            CQ.replace("nominalQuota: 8", "nominalQuota: 8\n        lendingLimit: 9"),
            ["resources[0].lendingLimit: 9 is more than nominalQuota 8"],
            id="lending-above-nominal",
        ),
        pytest.param(
            CQ.replace("      - name: memory\n        nominalQuota: 32Gi\n", ""),
            [
                "$.spec.resourceGroups[0].flavors[0].resources: lists ['cpu']",
                "the covered resources ['cpu', 'memory']",
            ],
            id="resources-not-covered",
        ),
        pytest.param(
            CQ.replace(
                "  namespaceSelector: {}\n", "  namespaceSelector: {}\n  queueingStrategy: StrictFifo\n"
            ),
            ["$.spec.queueingStrategy: 'StrictFifo' is not accepted", "did you mean 'StrictFIFO'"],
            id="bad-enum",
        ),
        pytest.param(
            CQ.replace(
                "  namespaceSelector: {}\n",
                "  namespaceSelector: {}\n  preemption:\n    borrowWithinCohort:\n"
                "      policy: LowerPriority\n",
            ),
            ["$.spec.preemption.borrowWithinCohort.policy: LowerPriority needs reclaimWithinCohort"],
            id="borrow-without-reclaim",
        ),
        pytest.param(
            CQ.replace("kind: ClusterQueue", "kind: ClusterQueu"),
            [
                "queues.yaml:2: ClusterQueu/team-a: $.kind: 'ClusterQueu' is not a kind",
                "did you mean 'ClusterQueue'",
            ],
            id="misspelt-kind",
        ),
        pytest.param(
            CQ.replace("kind: ClusterQueue", "kind: clusterqueue"),
            ["$.kind: 'clusterqueue' is not a kind kdispatch reads", "did you mean 'ClusterQueue'"],
            id="kind-case",
        ),
        pytest.param(
            CQ.replace(
                "kueue.x-k8s.io/v1beta2\nkind: ClusterQueue", "kueue.x-k8s.io/v1beta3\nkind: ClusterQueue"
            ),
            [
                "queues.yaml:1: ClusterQueue/team-a: $.apiVersion: 'kueue.x-k8s.io/v1beta3' is not an apiVersion"
            ],
            id="unknown-version",
        ),
        pytest.param(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata:\n  name: p\nvalue: high\n",
            ["queues.yaml:5: WorkloadPriorityClass/p: $.value: 'high' is not a priority"],
            id="priority-value",
        ),
        pytest.param("", ["queues.yaml: the file is empty"], id="empty"),
        pytest.param("# nothing\n---\n", ["no queue configuration found"], id="only-comments"),
        pytest.param("kind: [\n", ["queues.yaml:2: invalid YAML"], id="not-yaml"),
    ],
)
def test_errors_name_file_line_object_and_field(tmp_path: Path, text: str, expected: list[str]) -> None:
    message = str(_load(tmp_path, text))
    for part in expected:
        assert part in message, message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_bytes(CQ.encode() + b"# caf\xe9\n")
    with pytest.raises(QueueConfigError, match=r"queues.yaml:22: not UTF-8 text: byte 0xe9"):
        load_queues(path)


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(QueueConfigError, match=r"holds no \*\.yaml"):
        load_queues(tmp_path)


def test_fields_kueue_defines_but_kdispatch_does_not_honour_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(
        CQ.replace(
            "  namespaceSelector: {}\n",
            "  namespaceSelector: {}\n  admissionChecks: [x]\n  flavorFungibility:\n    whenCanBorrow: Borrow\n"
            "  admissionScope:\n    admissionMode: UsageBasedAdmissionFairSharing\n",
        )
    )
    assert load_queues(path).cluster_queues[0].name == "team-a"


def test_a_configuration_encodes_the_same_once_read_back_from_the_log() -> None:
    """The leader compares encodings to decide whether to record it again: defaults written out in
    the YAML (``queueingStrategy: BestEffortFIFO``, ``weight: 1``) must encode as the log's do."""
    cfg = load_queues(EXAMPLE)
    back = codec.decode_entry(codec.encode(ev.LogEntry(seq=1, at_ms=1, event=cfg))).event
    assert codec.encode(back) == codec.encode(cfg)
