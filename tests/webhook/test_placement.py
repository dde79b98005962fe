"""Placement annotations: the errors a person reads, aliases, the canonical form, idempotence."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from webhook import placement
from webhook.placement import PLACEMENT_ANNOTATION, PlacementError, canonical_json, parse

AFFINITY = "kdispatch.io/cluster-affinity"
TOLERATIONS = "kdispatch.io/cluster-tolerations"


def _affinity(expr: dict[str, object]) -> str:
    return json.dumps({"required": [{"matchExpressions": [expr]}]})


BAD = [
    (
        {AFFINITY: _affinity({"key": "region", "operator": "in", "values": ["eu"]})},
        'annotation kdispatch.io/cluster-affinity: at $.required[0].matchExpressions[0].operator: found "in"; '
        'accepted: In, NotIn, Exists, DoesNotExist, Gt, Lt; did you mean "In"?',
    ),
    (
        {AFFINITY: json.dumps({"requiredDuringSchedulingIgnoredDuringExecution": {"clusterSelectorTerm": []}})},
        "annotation kdispatch.io/cluster-affinity: at $.requiredDuringSchedulingIgnoredDuringExecution.clusterSelectorTerm: "
        'found unknown field "clusterSelectorTerm"; accepted: fields clusterSelectorTerms; did you mean "clusterSelectorTerms"?',
    ),
    (
        {TOLERATIONS: json.dumps([{"key": "gpu", "operator": "Exists", "effect": "NoSchedul"}])},
        'annotation kdispatch.io/cluster-tolerations: at $[0].effect: found "NoSchedul"; '
        'accepted: NoSchedule, PreferNoSchedule, NoExecute; did you mean "NoSchedule"?',
    ),
    (
        {TOLERATIONS: json.dumps([{"key": "gpu", "effect": "Evict"}])},
        'annotation kdispatch.io/cluster-tolerations: at $[0].effect: found "Evict"; accepted: NoSchedule, PreferNoSchedule, NoExecute',
    ),
    (
        {TOLERATIONS: json.dumps([{"key": "gpu", "operator": "Exists", "value": "x"}])},
        'annotation kdispatch.io/cluster-tolerations: at $[0].value: found "x"; accepted: an empty value with operator "Exists"',
    ),
    (
        {TOLERATIONS: json.dumps([{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 30}])},
        'annotation kdispatch.io/cluster-tolerations: at $[0].effect: found "NoSchedule"; accepted: "NoExecute" when tolerationSeconds is set',
    ),
    (
        {"kueue.x-k8s.io/dispatch-mode": "besteffort"},
        'annotation kueue.x-k8s.io/dispatch-mode: at $: found "besteffort"; accepted: MustBeAdmitted, BestEffort; did you mean "BestEffort"?',
    ),
    (
        {"kdispatch.io/preemption-policy": "Nevr"},
        'annotation kdispatch.io/preemption-policy: at $: found "Nevr"; accepted: PreemptLowerPriority, Never; did you mean "Never"?',
    ),
    (
        {AFFINITY: _affinity({"key": "gpus", "operator": "Gt", "values": ["many"]})},
        'annotation kdispatch.io/cluster-affinity: at $.required[0].matchExpressions[0].values: found ["many"]; '
        'accepted: exactly one integer value with operator Gt, e.g. ["8"]',
    ),
    (
        {AFFINITY: _affinity({"key": "zone", "operator": "In", "values": []})},
        "annotation kdispatch.io/cluster-affinity: at $.required[0].matchExpressions[0].values: found []; "
        "accepted: at least one value with operator In",
    ),
    (
        {AFFINITY: json.dumps({"preferred": [{"weight": 0, "preference": {"matchLabels": {"a": "b"}}}]})},
        "annotation kdispatch.io/cluster-affinity: at $.preferred[0].weight: found 0; accepted: an integer from 1 to 100",
    ),
    (
        {AFFINITY: "{not json"},
        'annotation kdispatch.io/cluster-affinity: at $: found "{not json"; accepted: JSON (JSON is malformed: object keys must be strings (byte 1))',
    ),
    (
        {"kdispatch.io/cluster-selecter": "a=b"},
        "annotation kdispatch.io/cluster-selecter: at $: found an unknown kdispatch annotation; accepted: "
        + ", ".join(placement.KNOWN_ANNOTATIONS)
        + '; did you mean "kdispatch.io/cluster-selector"?',
    ),
    (
        {"kdispatch.io/cluster-selector": "region"},
        'annotation kdispatch.io/cluster-selector: at $[0]: found "region"; accepted: "key=value" pairs separated by commas (or a JSON object)',
    ),
    (
        {"kdispatch.io/cluster-selector": '{"gpu": true}'},
        "annotation kdispatch.io/cluster-selector: at $['gpu']: found true; accepted: a label value (a string)",
    ),
    (
        {"kdispatch.io/nominate": "-2"},
        'annotation kdispatch.io/nominate: at $: found "-2"; accepted: a positive integer (1 to 1000): how many clusters to nominate',
    ),
    (
        {"kdispatch.io/cluster-names": "east,West_1"},
        'annotation kdispatch.io/cluster-names: at $[1]: found "West_1"; accepted: a cluster name (lower-case DNS name)',
    ),
    (
        {"kdispatch.io/cluster-selector": "a=b", "kueue.x-k8s.io/cluster-selector": "a=c"},
        "annotation kueue.x-k8s.io/cluster-selector: at $: found a value different from kdispatch.io/cluster-selector; "
        "accepted: the same placement in both, or only one of kdispatch.io/cluster-selector and kueue.x-k8s.io/cluster-selector",
    ),
    (
        {PLACEMENT_ANNOTATION: json.dumps({"dispatchMode": "BestEffort", "profle": "x"})},
        'annotation kdispatch.io/placement: at $.profle: found unknown field "profle"; accepted: fields clusterAffinity, '
        'clusterNames, clusterSelector, clusterTolerations, dispatchMode, nominate, preemptionPolicy, profile; did you mean "profile"?',
    ),
    (
        {"kdispatch.io/simulated-runtime": "30 seconds"},
        'annotation kdispatch.io/simulated-runtime: at $: found "30 seconds"; accepted: a duration up to a year, e.g. 30s, 5m, 1h30m, 250ms; '
        'did you mean "30s"?',
    ),
]


@pytest.mark.parametrize(("annotations", "message"), BAD)
def test_bad_annotations_explain_themselves(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(PlacementError) as err:
        parse(annotations)
        placement.parse_runtime_ms(annotations)
    assert str(err.value) == message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PlacementError) as err:
        parse({"kdispatch.io/dispatch-mode": "fast", AFFINITY: _affinity({"key": "a", "operator": "Has"})})
    assert [i.path for i in err.value.issues] == ["$.required[0].matchExpressions[0].operator", "$"]


def test_hostile_values_give_a_short_denial() -> None:
    annotations = {
        PLACEMENT_ANNOTATION: "[" * 100_000 + "]" * 100_000,
        TOLERATIONS: json.dumps([{"key": "a", "effect": "X"}] * 5000),
    }
    with pytest.raises(PlacementError) as err:
        parse(annotations)
    assert len(err.value.issues) == 5001
    lines = str(err.value).splitlines()
    assert lines[0].endswith("accepted: JSON nested less deeply")
    assert len(lines) == placement.MAX_REPORTED + 1 and lines[-1] == "... and 4981 more problems"


def test_kep_long_names_and_short_names_normalize_alike() -> None:
    long = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "clusterSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["us", "eu", "eu"]}]}]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 20, "preference": {"matchLabels": {"tier": "gold"}}}],
    }
    short = {
        "required": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["eu", "us"]}]}],
        "preferred": [{"weight": 20, "term": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}],
    }
    a = parse({"kueue.x-k8s.io/cluster-affinity": json.dumps(long)})
    b = parse({AFFINITY: json.dumps(short)})
    assert a == b
    assert a.cluster_affinity.required[0].match_expressions[0].values == ["eu", "us"]


def test_canonical_form_has_sorted_keys_and_every_default() -> None:
    p = parse({"kueue.x-k8s.io/cluster-selector": "region=eu, tier=gold", "kdispatch.io/nominate": "2"})
    assert canonical_json(p) == (
        '{"clusterAffinity":{"preferred":[],"required":[]},"clusterNames":[],"clusterSelector":{"region":"eu","tier":"gold"},'
        '"clusterTolerations":[],"dispatchMode":"MustBeAdmitted","nominate":2,"preemptionPolicy":"PreemptLowerPriority",'
        '"profile":"default"}'
    )


def test_aliases_and_selector_forms() -> None:
    p = parse(
        {
            "kueue.x-k8s.io/cluster-selector": '{"region": "eu"}',
            "kdispatch.io/cluster-selector": "region=eu",
            "kueue.x-k8s.io/cluster-tolerations": '{"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}',
            "kdispatch.io/cluster-names": '["b", "a", "b"]',
            "kdispatch.io/profile": "gpu",
        }
    )
    assert p == ev.Placement(
        cluster_selector={"region": "eu"},
        cluster_tolerations=[ev.Toleration(key="spot", operator="Exists", effect="NoExecute", toleration_seconds=60)],
        cluster_names=["a", "b"],
        profile="gpu",
    )


def test_per_field_annotations_override_the_canonical_one() -> None:
    base = canonical_json(parse({"kdispatch.io/dispatch-mode": "BestEffort", "kdispatch.io/profile": "a"}))
    p = parse({PLACEMENT_ANNOTATION: base, "kdispatch.io/profile": "b"})
    assert (p.dispatch_mode, p.profile) == ("BestEffort", "b")


def test_runtime_durations() -> None:
    ann = "kdispatch.io/simulated-runtime"
    assert [placement.parse_runtime_ms({ann: v}) for v in ("30s", "1h30m", "250ms", "1.5s", "1500")] == [
        30_000,
        5_400_000,
        250,
        1500,
        1500,
    ]
    assert placement.parse_runtime_ms({}) is None


# ---- properties ------------------------------------------------------------------------------------

_label = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
_expression = st.one_of(
    st.builds(lambda k, op, vs: {"key": k, "operator": op, "values": vs}, _label, st.sampled_from(["In", "NotIn"]), st.lists(_label, min_size=1, max_size=3)),
    st.builds(lambda k, op: {"key": k, "operator": op}, _label, st.sampled_from(["Exists", "DoesNotExist"])),
    st.builds(lambda k, op, n: {"key": k, "operator": op, "values": [str(n)]}, _label, st.sampled_from(["Gt", "Lt"]), st.integers(-99, 99)),
)
_term = st.builds(lambda exprs, labels: {"matchExpressions": exprs, "matchLabels": labels}, st.lists(_expression, max_size=3), st.dictionaries(_label, _label, max_size=2)).filter(
    lambda t: t["matchExpressions"] or t["matchLabels"]
)
_toleration = st.one_of(
    st.builds(lambda k, v, e: {"key": k, "operator": "Equal", "value": v, "effect": e}, _label, _label, st.sampled_from(["", "NoSchedule", "PreferNoSchedule"])),
    st.builds(lambda k, s: {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}, _label, st.integers(0, 3600)),
    st.just({"operator": "Exists"}),
)
_annotations = st.fixed_dictionaries(
    {},
    optional={
        "kdispatch.io/cluster-selector": st.dictionaries(_label, _label, max_size=3).map(lambda d: ",".join(f"{k}={v}" for k, v in d.items())),
        "kueue.x-k8s.io/cluster-affinity": st.builds(
            lambda req, pref: json.dumps({"required": req, "preferred": [{"weight": w, "preference": t} for w, t in pref]}),
            st.lists(_term, max_size=2),
            st.lists(st.tuples(st.integers(1, 100), _term), max_size=2),
        ),
        "kdispatch.io/cluster-tolerations": st.lists(_toleration, max_size=3).map(json.dumps),
        "kueue.x-k8s.io/dispatch-mode": st.sampled_from(["MustBeAdmitted", "BestEffort"]),
        "kdispatch.io/profile": _label,
        "kdispatch.io/nominate": st.integers(1, 10).map(str),
        "kdispatch.io/cluster-names": st.lists(_label, max_size=3).map(",".join),
        "kdispatch.io/preemption-policy": st.sampled_from(["PreemptLowerPriority", "Never"]),
    },
)


@settings(max_examples=150, deadline=None)
@given(_annotations)
def test_normalization_is_idempotent(annotations: dict[str, str]) -> None:
    first = parse(annotations)
    canonical = canonical_json(first)
    again = parse({**annotations, PLACEMENT_ANNOTATION: canonical})
    alone = parse({PLACEMENT_ANNOTATION: canonical})
    assert again == first == alone
    assert canonical_json(again) == canonical


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*placement.KNOWN_ANNOTATIONS, *placement.ALIAS_ANNOTATIONS, "kdispatch.io/x"]), st.text(max_size=40)))
def test_any_annotation_text_parses_or_explains(annotations: dict[str, str]) -> None:
    try:
        p = parse(annotations)
    except PlacementError as err:
        assert err.issues and all(i.annotation in annotations for i in err.issues)
        return
    assert parse({**annotations, PLACEMENT_ANNOTATION: canonical_json(p)}) == p


def test_large_annotation_values_are_not_kept_in_the_parse_cache() -> None:
    big = ",".join(f"k{i}=v{i}" for i in range(1000))  # ~10 KB, a valid selector
    before = placement._parse_cached.cache_info().currsize
    assert len(parse({"kdispatch.io/cluster-selector": big}).cluster_selector) == 1000
    assert placement._parse_cached.cache_info().currsize == before
