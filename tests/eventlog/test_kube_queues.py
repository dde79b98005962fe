"""Queue resolution (eventlog/kube/queues.py): Kueue's admission rules and LabelSelector semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import events as ev
from eventlog.kube import queues
from eventlog.kube.queues import Denied, Resolved, resolve

ALL = ev.LabelSelector()


def _config(**overrides: object) -> ev.QueuesConfigured:
    base: dict[str, object] = {
        "cluster_queues": [
            ev.ClusterQueueSpec(name="cq-a", namespace_selector=ev.LabelSelector(match_labels={"team": "a"})),
            ev.ClusterQueueSpec(name="cq-shared", namespace_selector=ALL, allowed_priority_classes=["low", "normal"]),
            ev.ClusterQueueSpec(name="cq-nobody"),  # nil selector: no namespace
            ev.ClusterQueueSpec(name="cq-held", namespace_selector=ALL, stop_policy="Hold"),
        ],
        "local_queues": [
            ev.LocalQueueSpec(namespace="team-a", name="training", cluster_queue="cq-a"),
            ev.LocalQueueSpec(namespace="team-a", name="default", cluster_queue="cq-shared"),
            ev.LocalQueueSpec(namespace="team-b", name="training", cluster_queue="cq-a"),
            ev.LocalQueueSpec(namespace="team-b", name="batch", cluster_queue="cq-shared"),
            ev.LocalQueueSpec(namespace="team-b", name="closed", cluster_queue="cq-nobody"),
            ev.LocalQueueSpec(namespace="team-b", name="paused", cluster_queue="cq-held", stop_policy="HoldAndDrain"),
        ],
        "priority_classes": {"low": 10, "normal": 100, "high": 1000},
        "namespaces": {"team-a": {"team": "a"}, "team-b": {"team": "b"}},
        "source": "queues.yaml",
    }
    return ev.QueuesConfigured(**{**base, **overrides})  # type: ignore[arg-type]


def _denied(result: Resolved | Denied, reason: str) -> str:
    assert isinstance(result, Denied), result
    assert result.reason == reason, result.message
    return result.message


def test_a_queue_label_resolves_to_its_cluster_queue_and_the_class_value() -> None:
    got = resolve(_config(), namespace="team-a", queue_name="training", priority_class="high")
    assert got == Resolved(local_queue="training", cluster_queue="cq-a", priority=1000, priority_class="high")


def test_no_label_goes_to_the_namespaces_default_queue_and_no_class_is_priority_0() -> None:
    got = resolve(_config(), namespace="team-a", queue_name=None, priority_class=None)
    assert got == Resolved(local_queue="default", cluster_queue="cq-shared", priority=0, priority_class=None)
    assert resolve(_config(), namespace="team-a", queue_name="", priority_class=None) == got


def test_a_missing_queue_gets_a_did_you_mean_among_the_namespaces_queues() -> None:
    message = _denied(resolve(_config(), namespace="team-b", queue_name="bacth", priority_class=None), "queue-not-found")
    assert 'no LocalQueue "bacth" in namespace "team-b"' in message
    assert 'did you mean "batch"?' in message
    # only the queues a job of team-b can use are offered as the fix
    assert 'Set the label kueue.x-k8s.io/queue-name to one of "batch", "paused".' in message


def test_a_namespace_without_queues_points_at_the_namespaces_that_have_one() -> None:
    message = _denied(resolve(_config(), namespace="team-c", queue_name="training", priority_class=None), "queue-not-found")
    assert 'namespace "team-c" has no LocalQueue' in message
    assert '(label kueue.x-k8s.io/queue-name); there is one in namespaces "team-a", "team-b". Submit the job in' in message
    assert 'add a LocalQueue named "training" in namespace "team-c"' in message
    message = _denied(resolve(_config(), namespace="team-c", queue_name="trainng", priority_class=None), "queue-not-found")
    assert 'did you mean "training" (in namespaces "team-a", "team-b")?' in message
    message = _denied(resolve(_config(), namespace="team-c", queue_name="batch", priority_class=None), "queue-not-found")
    assert 'there is one in namespace "team-b".' in message


def test_no_label_and_no_default_queue_says_how_to_fix_it() -> None:
    message = _denied(resolve(_config(), namespace="team-b", queue_name=None, priority_class=None), "no-default-queue")
    assert 'Add the label kueue.x-k8s.io/queue-name: <one of "batch", "paused">' in message
    assert 'ask the platform team to add a LocalQueue named "default" in namespace "team-b"' in message
    message = _denied(resolve(_config(), namespace="team-z", queue_name=None, priority_class=None), "no-default-queue")
    assert "<one of" not in message and 'namespace "team-z"' in message


def test_a_cluster_queue_whose_selector_does_not_select_the_namespace_is_denied() -> None:
    message = _denied(
        resolve(_config(), namespace="team-b", queue_name="training", priority_class=None), "namespace-not-selected"
    )
    assert 'ClusterQueue "cq-a", whose namespaceSelector {team=a} does not select namespace "team-b"' in message
    assert "kubernetes.io/metadata.name=team-b, team=b" in message
    assert 'one that does: "batch", "paused"' in message
    message = _denied(resolve(_config(), namespace="team-b", queue_name="closed", priority_class=None), "namespace-not-selected")
    assert "it selects no namespace" in message


def test_the_namespace_name_label_is_always_there() -> None:
    by_name = ev.LabelSelector(match_labels={queues.NAMESPACE_NAME_LABEL: "team-c"})
    config = _config(
        cluster_queues=[ev.ClusterQueueSpec(name="cq", namespace_selector=by_name)],
        local_queues=[ev.LocalQueueSpec(namespace="team-c", name="q", cluster_queue="cq")],
        namespaces={},
    )
    assert isinstance(resolve(config, namespace="team-c", queue_name="q", priority_class=None), Resolved)


def test_an_unknown_priority_class_gets_a_did_you_mean() -> None:
    message = _denied(resolve(_config(), namespace="team-a", queue_name="training", priority_class="hgih"), "priority-class-not-found")
    assert 'priority class "hgih" (label kueue.x-k8s.io/priority-class) is not a WorkloadPriorityClass; did you mean "high"?' in message
    assert '"high", "low", "normal"' in message
    message = _denied(
        resolve(_config(priority_classes={}), namespace="team-a", queue_name="training", priority_class="x", priority_source="priorityClassName"),
        "priority-class-not-found",
    )
    assert "(priorityClassName)" in message and "There are none" in message


def test_a_class_the_cluster_queue_does_not_allow_is_denied_with_the_allowed_ones() -> None:
    message = _denied(resolve(_config(), namespace="team-a", queue_name=None, priority_class="high"), "priority-class-not-allowed")
    assert 'ClusterQueue "cq-shared" (of LocalQueue "team-a/default") does not allow priority class "high"' in message
    assert 'it allows "low", "normal"' in message and queues.ALLOWED_CLASSES_ANNOTATION in message
    assert resolve(_config(), namespace="team-a", queue_name=None, priority_class="normal") == Resolved(
        local_queue="default", cluster_queue="cq-shared", priority=100, priority_class="normal"
    )
    none_allowed = _config(cluster_queues=[ev.ClusterQueueSpec(name="cq-shared", namespace_selector=ALL, allowed_priority_classes=[])])
    message = _denied(resolve(none_allowed, namespace="team-a", queue_name=None, priority_class="low"), "priority-class-not-allowed")
    assert "it allows none" in message


def test_a_local_queue_pointing_nowhere_is_denied() -> None:
    config = _config(local_queues=[ev.LocalQueueSpec(namespace="team-a", name="q", cluster_queue="gone")])
    message = _denied(resolve(config, namespace="team-a", queue_name="q", priority_class=None), "cluster-queue-not-found")
    assert 'ClusterQueue "gone", which does not exist in the queue configuration (queues.yaml)' in message


def test_a_stopped_queue_accepts_the_job_with_a_warning() -> None:
    got = resolve(_config(), namespace="team-b", queue_name="paused", priority_class=None)
    assert isinstance(got, Resolved) and got.cluster_queue == "cq-held"
    [warning] = got.warnings
    assert 'LocalQueue "team-b/paused" is stopped (stopPolicy HoldAndDrain) and ClusterQueue "cq-held" is stopped' in warning


def test_cluster_queue_of_never_denies() -> None:
    config = _config()
    assert queues.cluster_queue_of(config, namespace="team-a", queue_name=None) == "cq-shared"
    assert queues.cluster_queue_of(config, namespace="team-a", queue_name="training") == "cq-a"
    assert queues.cluster_queue_of(config, namespace="team-b", queue_name="training") is None  # not selected
    assert queues.cluster_queue_of(config, namespace="team-b", queue_name="nope") is None


# ---- LabelSelector semantics ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        (ev.LabelRequirement(key="t", operator="In", values=["a", "b"]), {"t": "a"}, True),
        (ev.LabelRequirement(key="t", operator="In", values=["a", "b"]), {"t": "c"}, False),
        (ev.LabelRequirement(key="t", operator="In", values=["a"]), {}, False),
        (ev.LabelRequirement(key="t", operator="NotIn", values=["a"]), {"t": "a"}, False),
        (ev.LabelRequirement(key="t", operator="NotIn", values=["a"]), {"t": "b"}, True),
        (ev.LabelRequirement(key="t", operator="NotIn", values=["a"]), {}, True),  # Kubernetes: absent key matches NotIn
        (ev.LabelRequirement(key="t", operator="Exists"), {"t": ""}, True),
        (ev.LabelRequirement(key="t", operator="Exists"), {}, False),
        (ev.LabelRequirement(key="t", operator="DoesNotExist"), {}, True),
        (ev.LabelRequirement(key="t", operator="DoesNotExist"), {"t": "a"}, False),
    ],
)
def test_each_operator(requirement: ev.LabelRequirement, labels: dict[str, str], matches: bool) -> None:
    assert queues.selector_matches(ev.LabelSelector(match_expressions=[requirement]), labels) is matches


_keys = st.sampled_from(["team", "env", "tier"])
_values = st.sampled_from(["a", "b", "c"])
_labels = st.dictionaries(_keys, _values, max_size=3)
_requirements = st.builds(
    ev.LabelRequirement,
    key=_keys,
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    values=st.lists(_values, max_size=3),
)
_selectors = st.builds(ev.LabelSelector, match_labels=_labels, match_expressions=st.lists(_requirements, max_size=3))


@given(labels=_labels)
def test_the_empty_selector_selects_all_and_nil_selects_nothing(labels: dict[str, str]) -> None:
    assert queues.selector_matches(ALL, labels)
    assert not queues.selector_matches(None, labels)


@given(selector=_selectors, labels=_labels)
def test_a_selector_is_the_conjunction_of_its_parts(selector: ev.LabelSelector, labels: dict[str, str]) -> None:
    parts = [ev.LabelSelector(match_labels={k: v}) for k, v in selector.match_labels.items()]
    parts += [ev.LabelSelector(match_expressions=[r]) for r in selector.match_expressions]
    assert queues.selector_matches(selector, labels) is all(queues.selector_matches(p, labels) for p in parts)


@given(requirement=_requirements, labels=_labels)
def test_not_in_and_does_not_exist_are_the_complements(requirement: ev.LabelRequirement, labels: dict[str, str]) -> None:
    opposite = {"In": "NotIn", "NotIn": "In", "Exists": "DoesNotExist", "DoesNotExist": "Exists"}[requirement.operator]
    flipped = ev.LabelRequirement(key=requirement.key, operator=opposite, values=requirement.values)  # type: ignore[arg-type]
    assert queues.requirement_matches(requirement, labels) is not queues.requirement_matches(flipped, labels)


@given(labels=_labels, key=_keys, value=_values)
def test_match_labels_is_in_with_one_value(labels: dict[str, str], key: str, value: str) -> None:
    as_labels = ev.LabelSelector(match_labels={key: value})
    as_in = ev.LabelSelector(match_expressions=[ev.LabelRequirement(key=key, operator="In", values=[value])])
    assert queues.selector_matches(as_labels, labels) is queues.selector_matches(as_in, labels)
