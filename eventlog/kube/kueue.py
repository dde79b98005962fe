"""Kueue's own objects (ClusterQueue, LocalQueue, Cohort, WorkloadPriorityClass, ResourceFlavor,
plus v1 Namespace for namespace labels) decoded into the ``QueuesConfigured`` event, validated.

A team that already runs Kueue reuses its files: ``load_queues(PATH)`` reads one YAML file (any
number of ``---`` documents) or every ``*.yaml``/``*.yml`` of a directory (sorted, not recursive).
The manager watcher hands the objects it lists to ``decode_objects`` instead. Either way every
object is checked as Kueue's own validation would, plus what kdispatch needs on top:

- fields kdispatch honours are checked strictly: an unknown key there is an error with a
  did-you-mean (a typo must not silently change a quota); fields Kueue defines that kdispatch does
  not honour (``IGNORED``: admission checks, flavor fungibility, ...) are accepted and documented;
- quantities through ``eventlog.kube.quantity`` (negative or malformed ones refused), weights
  ``>= 0`` in thousandths, cohort trees without cycles, LocalQueues pointing at ClusterQueues that
  exist, no two objects of a kind with one name, flavors and priority classes that exist;
- beyond Kueue: ``kdispatch.io/allowed-priority-classes`` on a ClusterQueue lists the
  WorkloadPriorityClasses its namespaces may use (``names.ALLOWED_PRIORITY_CLASSES_ANNOTATION``).

Objects of other kinds (Jobs, Topologies, AdmissionChecks in the same file) are skipped, and
``read_queues`` says which. Errors (``QueueConfigError``) name the file and line, the object
(``ClusterQueue/team-a``), the field as a JSON path, what is accepted and a did-you-mean.

The result is deterministic whatever the order of files and documents: queues, cohorts and
local queues are sorted by name; resource groups and flavors keep their written order (Kueue
tries flavors in that order).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import msgspec
import yaml

from eventlog import events as ev
from eventlog.kube.names import ALLOWED_PRIORITY_CLASSES_ANNOTATION
from eventlog.kube.quantity import QuantityError, parse_nanos, to_units
from eventlog.kube.yamlpath import line_at

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # the served versions kdispatch reads, newest first
KUEUE_KINDS: dict[str, str] = {  # kind -> plural (the resource the manager watcher lists)
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "LocalQueue": "localqueues",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}
NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace

ACCEPTED_FILES = (
    "Kueue objects (apiVersion kueue.x-k8s.io/v1beta2 or v1beta1; kinds ClusterQueue, LocalQueue, "
    "Cohort, WorkloadPriorityClass, ResourceFlavor) and v1 Namespaces, as YAML documents"
)

# Fields Kueue defines that kdispatch accepts but does not act on (docs/tenancy.md lists them).
IGNORED: dict[str, frozenset[str]] = {
    "ClusterQueue.spec": frozenset(
        {
            "admissionChecks",
            "admissionChecksStrategy",
            "admissionScope",
            "flavorFungibility",
            "concurrentAdmissionPolicy",
        }
    ),
    "Cohort.spec": frozenset(),
    "LocalQueue.spec": frozenset({"fairSharing"}),
    "WorkloadPriorityClass": frozenset({"description"}),
}

_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_RECLAIM = ("Never", "LowerPriority", "Any")
_WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
_BORROW = ("Never", "LowerPriority")
_STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
_STOP = ("None", "Hold", "HoldAndDrain")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class QueueConfigError(ValueError):
    """``source[:line]: Kind/name: $.path: message``. ``obj`` and ``path`` are empty for a problem
    of the input as a whole (unreadable, not UTF-8, not YAML, empty)."""

    def __init__(
        self, message: str, *, source: str = "", line: int | None = None, obj: str = "", path: str = ""
    ) -> None:
        where = source + ("" if line is None else f":{line}")
        parts = [p for p in (where, obj, path) if p]
        super().__init__(": ".join([*parts, message]))
        self.message = message
        self.source = source
        self.line = line
        self.obj = obj
        self.path = path


@dataclass
class Document:
    """One object as read: where it came from (a file, or ``manager``), the object, and the YAML
    node it was built from when there is one (for line numbers)."""

    source: str
    obj: Any
    node: yaml.Node | None = None


@dataclass
class Loaded:
    config: ev.QueuesConfigured
    skipped: list[str] = field(default_factory=list)  # "source: Kind/name" of objects of other kinds


def load_queues(path: str | Path) -> ev.QueuesConfigured:
    """The queue configuration in a file or directory, validated (``QueueConfigError``)."""
    return read_queues(path).config


def read_queues(path: str | Path) -> Loaded:
    """``load_queues`` and the objects it skipped (other kinds), for the caller to mention."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        if not files:
            raise QueueConfigError(
                f"the directory holds no *.yaml or *.yml file; expected {ACCEPTED_FILES}", source=str(p)
            )
    else:
        files = [p]
    docs: list[Document] = []
    for f in files:
        docs.extend(read_documents(f))
    return decode_documents(docs, source=str(p))


def read_documents(path: Path) -> list[Document]:
    """The YAML documents of one file, each with its node (empty documents dropped)."""
    source = str(path)
    text = _read_text(path)
    loader = yaml.SafeLoader(text)
    docs: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            obj = loader.construct_document(node)
            if obj is not None:
                docs.append(Document(source, obj, node))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = err.problem or err.context or "not YAML"
        raise QueueConfigError(
            f"invalid YAML: {what}", source=source, line=None if mark is None else mark.line + 1
        ) from None
    except yaml.YAMLError as err:
        raise QueueConfigError(f"invalid YAML: {err}", source=source) from None
    finally:
        loader.dispose()
    return docs


def _read_text(path: Path) -> str:
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise QueueConfigError(f"cannot read it: {err.strerror or err}", source=source) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise QueueConfigError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} cannot be read ({err.reason}); save the file as UTF-8",
            source=source,
            line=data.count(b"\n", 0, err.start) + 1,
        ) from None
    if not text.strip():
        raise QueueConfigError(f"the file is empty; expected {ACCEPTED_FILES}", source=source)
    return text


def decode_objects(
    docs: Sequence[tuple[str, Any]], *, source: str = "", allow_empty: bool = False
) -> ev.QueuesConfigured:
    """Objects already parsed, as (where each came from, object) pairs: the manager watcher's
    listing. ``allow_empty``: no queue object at all is a configuration (tenancy off) rather
    than an error, as for a manager without Kueue objects."""
    return decode_documents(
        [Document(where, obj) for where, obj in docs], source=source, allow_empty=allow_empty
    ).config


def decode_documents(docs: Sequence[Document], *, source: str = "", allow_empty: bool = False) -> Loaded:
    b = _Builder()
    skipped: list[str] = []
    for doc in docs:
        if not b.add(doc):
            skipped.append(f"{doc.source}: {_describe(doc.obj)}")
    if b.empty and not allow_empty:
        others = f" (skipped, not queue configuration: {', '.join(skipped[:5])}{', ...' if len(skipped) > 5 else ''})"
        raise QueueConfigError(
            f"no queue configuration found{others if skipped else ''}; expected {ACCEPTED_FILES}",
            source=source,
        )
    return Loaded(b.finish(source), skipped)


def _describe(obj: Any) -> str:
    if not isinstance(obj, Mapping):
        return f"a {type(obj).__name__}, not an object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    return f"{obj.get('kind', '?')}/{name}"


# ---- one object, with where to point at -------------------------------------------------------


@dataclass
class _Obj:
    doc: Document
    kind: str
    name: str
    version: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"

    def fail(
        self,
        path: str,
        message: str,
        *,
        accepted: Iterable[str] | str | None = None,
        got: object = None,
        among: Iterable[str] = (),
    ) -> NoReturn:
        text = message
        if accepted is not None:
            text += f"; expected {accepted if isinstance(accepted, str) else ', '.join(accepted)}"
        if isinstance(got, str):
            text += did_you_mean(got, among)
        raise QueueConfigError(
            text, source=self.doc.source, line=_line(self.doc.node, path), obj=self.label, path=path
        )


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or ``''``; matches case-insensitively."""
    options = sorted(set(choices))
    lowered = {c.lower(): c for c in options}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def _line(node: yaml.Node | None, path: str) -> int | None:
    """The line of ``path`` (``$.spec.resourceGroups[0]``) in the object's YAML, or the nearest
    enclosing line that exists (a missing field points at the object holding it)."""
    return None if node is None else line_at(node, path, nearest=True)


# ---- checks of one value ----------------------------------------------------------------------


def _mapping(o: _Obj, value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        o.fail(path, f"is a {type(value).__name__}", accepted="a mapping")
    return value


def _list(o: _Obj, value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        o.fail(path, f"is a {type(value).__name__}", accepted="a list")
    return value


def _string(o: _Obj, value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        o.fail(path, f"{value!r} is not a name", accepted="a non-empty string")
    return value


def _choice(o: _Obj, value: Any, path: str, choices: Sequence[str]) -> Any:
    """``value``, one of ``choices`` (typed Any: each caller's Literal is that set of choices)."""
    if value not in choices:
        o.fail(path, f"{value!r} is not accepted", accepted=choices, got=str(value), among=choices)
    return value


def _fields(
    o: _Obj, value: Mapping[str, Any], path: str, honoured: Iterable[str], ignored: Iterable[str] = ()
) -> None:
    known, skip = set(honoured), set(ignored)
    for key in value:
        if key in known or key in skip:
            continue
        o.fail(
            f"{path}.{key}",
            f"unknown field {key!r}",
            accepted=f"one of {', '.join(sorted(known | skip))}",
            got=str(key),
            among=known | skip,
        )


def _name(o: _Obj, value: Any, path: str) -> str:
    name = _string(o, value, path)
    if len(name) > 253 or not _NAME.fullmatch(name):
        o.fail(
            path,
            f"{name!r} is not a valid name",
            accepted="lower-case letters, digits, '-' and '.' (a DNS subdomain)",
        )
    return name


# ---- building the event -----------------------------------------------------------------------


class _Builder:
    def __init__(self) -> None:
        self.queues: dict[str, tuple[_Obj, ev.ClusterQueueSpec, str | None]] = {}  # + allowed annotation
        self.cohorts: dict[str, tuple[_Obj, ev.CohortSpec]] = {}
        self.locals: dict[tuple[str, str], tuple[_Obj, ev.LocalQueueSpec]] = {}
        self.classes: dict[str, tuple[_Obj, int]] = {}
        self.flavors: dict[str, _Obj] = {}
        self.namespaces: dict[str, tuple[_Obj, dict[str, str]]] = {}

    @property
    def empty(self) -> bool:
        return not (
            self.queues or self.cohorts or self.locals or self.classes or self.flavors or self.namespaces
        )

    def add(self, doc: Document) -> bool:
        """Decode one object; False for a kind that is not queue configuration."""
        obj = doc.obj
        label = _describe(obj)
        o = _Obj(doc, *label.split("/", 1))
        if not isinstance(obj, Mapping):
            o.fail(
                "$",
                f"is a {type(obj).__name__}",
                accepted="a Kubernetes object (apiVersion, kind, metadata, ...)",
            )
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind == "Namespace" and api_version == "v1":
            self._namespace(o, obj)
            return True
        if kind not in KUEUE_KINDS:
            # Another kind (a Job, a Topology) is skipped; a slip of one of ours must not be.
            near = did_you_mean(kind, KUEUE_KINDS) if isinstance(kind, str) else ""
            if (
                near
                and isinstance(kind, str)
                and (
                    str(api_version).startswith(GROUP + "/")
                    or kind.lower() in {k.lower() for k in KUEUE_KINDS}
                )
            ):
                o.fail(
                    "$.kind",
                    f"{kind!r} is not a kind kdispatch reads",
                    accepted=sorted(KUEUE_KINDS),
                    got=kind,
                    among=KUEUE_KINDS,
                )
            return False
        group, _, version = str(api_version).partition("/")
        if group != GROUP or version not in VERSIONS:
            accepted = [f"{GROUP}/{v}" for v in VERSIONS]
            o.fail(
                "$.apiVersion",
                f"{api_version!r} is not an apiVersion kdispatch reads for {kind}",
                accepted=accepted,
                got=str(api_version),
                among=accepted,
            )
        o.version = version
        extra = {"value", "description"} if kind == "WorkloadPriorityClass" else set()
        _fields(o, obj, "$", _TOP | extra)
        meta = _mapping(o, obj.get("metadata"), "$.metadata")
        o.name = _name(o, meta.get("name"), "$.metadata.name")
        getattr(self, f"_{kind}")(o, obj, meta)
        return True

    def _first(self, o: _Obj, seen: _Obj | None) -> None:
        if seen is not None:
            line = _line(seen.doc.node, "$")
            there = seen.doc.source + (f":{line}" if line else "")
            o.fail(
                "$.metadata.name",
                f"a second {o.label}; the first is at {there}",
                accepted="one object per name",
            )

    # -- kinds ---------------------------------------------------------------------------------

    def _namespace(self, o: _Obj, obj: Mapping[str, Any]) -> None:
        meta = _mapping(o, obj.get("metadata"), "$.metadata")
        o.name = _name(o, meta.get("name"), "$.metadata.name")
        self._first(o, self.namespaces[o.name][0] if o.name in self.namespaces else None)
        labels = _labels(o, meta.get("labels"), "$.metadata.labels")
        self.namespaces[o.name] = (o, {**labels, NAMESPACE_LABEL: o.name})

    def _ResourceFlavor(self, o: _Obj, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        # Its spec (node labels, taints, topology) places pods within a cluster: not kdispatch's
        # concern, so accepted as it is.
        self._first(o, self.flavors.get(o.name))
        self.flavors[o.name] = o

    def _WorkloadPriorityClass(self, o: _Obj, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        self._first(o, self.classes[o.name][0] if o.name in self.classes else None)
        value = obj.get("value")
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
            o.fail(
                "$.value", f"{value!r} is not a priority", accepted="an integer (32-bit), higher goes first"
            )
        self.classes[o.name] = (o, value)

    def _LocalQueue(self, o: _Obj, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        # kubectl applies an object without a namespace into the context's, "default" unless set.
        namespace = _name(o, meta.get("namespace", "default"), "$.metadata.namespace")
        o.name = f"{namespace}/{o.name}"
        spec = _mapping(o, obj.get("spec"), "$.spec")
        _fields(o, spec, "$.spec", {"clusterQueue", "stopPolicy"}, IGNORED["LocalQueue.spec"])
        key = (namespace, o.name.split("/", 1)[1])
        self._first(o, self.locals[key][0] if key in self.locals else None)
        if "clusterQueue" not in spec:
            o.fail("$.spec.clusterQueue", "missing", accepted="the name of a ClusterQueue")
        cq = _name(o, spec.get("clusterQueue"), "$.spec.clusterQueue")
        stop = _choice(o, spec.get("stopPolicy", "None"), "$.spec.stopPolicy", _STOP)
        self.locals[key] = (
            o,
            ev.LocalQueueSpec(namespace=namespace, name=key[1], cluster_queue=cq, stop_policy=stop),
        )

    def _Cohort(self, o: _Obj, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        self._first(o, self.cohorts[o.name][0] if o.name in self.cohorts else None)
        spec = _mapping(o, obj.get("spec"), "$.spec")
        _fields(o, spec, "$.spec", {"parentName", "resourceGroups", "fairSharing"}, IGNORED["Cohort.spec"])
        parent = (
            _name(o, spec["parentName"], "$.spec.parentName") if spec.get("parentName") is not None else None
        )
        if parent == o.name:
            o.fail(
                "$.spec.parentName",
                f"the cohort {o.name!r} is its own parent",
                accepted="another Cohort, or no parentName",
            )
        groups = _resource_groups(o, spec.get("resourceGroups"), in_cohort=parent is not None, cohort=True)
        weight = _weight(o, spec.get("fairSharing"))
        self.cohorts[o.name] = (
            o,
            ev.CohortSpec(name=o.name, parent=parent, weight_milli=weight, resource_groups=groups),
        )

    def _ClusterQueue(self, o: _Obj, obj: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        self._first(o, self.queues[o.name][0] if o.name in self.queues else None)
        spec = _mapping(o, obj.get("spec"), "$.spec")
        # v1beta2 renamed spec.cohort to spec.cohortName: each version has its own spelling.
        cohort_field, other = ("cohortName", "cohort") if o.version == "v1beta2" else ("cohort", "cohortName")
        honoured = {
            cohort_field,
            "namespaceSelector",
            "resourceGroups",
            "fairSharing",
            "preemption",
            "queueingStrategy",
            "stopPolicy",
        }
        if other in spec:
            o.fail(
                f"$.spec.{other}",
                f"{GROUP}/{o.version} calls this field {cohort_field!r}",
                accepted=f"spec.{cohort_field} in {GROUP}/{o.version}",
            )
        _fields(o, spec, "$.spec", honoured, IGNORED["ClusterQueue.spec"])
        cohort = spec.get(cohort_field)
        cohort = _name(o, cohort, f"$.spec.{cohort_field}") if cohort not in (None, "") else None
        selector = None
        if spec.get("namespaceSelector") is not None:
            selector = _selector(o, spec["namespaceSelector"], "$.spec.namespaceSelector")
        groups = _resource_groups(o, spec.get("resourceGroups"), in_cohort=cohort is not None, cohort=False)
        annotations = _mapping(o, meta.get("annotations"), "$.metadata.annotations")
        allowed = annotations.get(ALLOWED_PRIORITY_CLASSES_ANNOTATION)
        if allowed is not None and not isinstance(allowed, str):
            o.fail(
                _annotation_path(), f"{allowed!r} is not a string", accepted="class names separated by commas"
            )
        queue = ev.ClusterQueueSpec(
            name=o.name,
            cohort=cohort,
            namespace_selector=selector,
            resource_groups=groups,
            weight_milli=_weight(o, spec.get("fairSharing")),
            preemption=_preemption(o, spec.get("preemption")),
            queueing_strategy=_choice(
                o, spec.get("queueingStrategy", "BestEffortFIFO"), "$.spec.queueingStrategy", _STRATEGIES
            ),
            stop_policy=_choice(o, spec.get("stopPolicy", "None"), "$.spec.stopPolicy", _STOP),
        )
        self.queues[o.name] = (o, queue, allowed)

    # -- the whole set -------------------------------------------------------------------------

    def finish(self, source: str) -> ev.QueuesConfigured:
        classes = {name: value for name, (_, value) in sorted(self.classes.items())}
        queues: list[ev.ClusterQueueSpec] = []
        for name in sorted(self.queues):
            o, queue, allowed = self.queues[name]
            for path, flavor in _flavor_refs(queue.resource_groups):
                if flavor not in self.flavors:
                    o.fail(
                        path,
                        f"no ResourceFlavor named {flavor!r}",
                        accepted=_known("ResourceFlavor", self.flavors),
                        got=flavor,
                        among=self.flavors,
                    )
            if allowed is not None:
                queue = _with_allowed(o, queue, allowed, classes)
            queues.append(queue)
        cohorts = self._cohort_tree()
        for cohort in cohorts:
            if cohort.name in self.cohorts:
                o = self.cohorts[cohort.name][0]
                for path, flavor in _flavor_refs(cohort.resource_groups):
                    if flavor not in self.flavors:
                        o.fail(
                            path,
                            f"no ResourceFlavor named {flavor!r}",
                            accepted=_known("ResourceFlavor", self.flavors),
                            got=flavor,
                            among=self.flavors,
                        )
        local_queues = []
        for key in sorted(self.locals):
            o, lq = self.locals[key]
            if lq.cluster_queue not in self.queues:
                o.fail(
                    "$.spec.clusterQueue",
                    f"no ClusterQueue named {lq.cluster_queue!r}",
                    accepted=_known("ClusterQueue", self.queues),
                    got=lq.cluster_queue,
                    among=self.queues,
                )
            local_queues.append(lq)
        config = ev.QueuesConfigured(
            cluster_queues=queues,
            cohorts=cohorts,
            local_queues=local_queues,
            priority_classes=classes,
            flavors=sorted(self.flavors),
            namespaces={
                name: dict(sorted(labels.items())) for name, (_, labels) in sorted(self.namespaces.items())
            },
            source=source,
        )
        return _canonical(config)  # type: ignore[no-any-return]

    def _cohort_tree(self) -> list[ev.CohortSpec]:
        """Every cohort named (declared, or only named by a ClusterQueue or a parentName, which
        Kueue creates implicitly with no quota of its own), checked for cycles."""
        specs = {name: spec for name, (_, spec) in self.cohorts.items()}
        for _, queue, _ in self.queues.values():
            if queue.cohort is not None:
                specs.setdefault(queue.cohort, ev.CohortSpec(name=queue.cohort))
        for name in list(specs):
            parent = specs[name].parent
            if parent is not None:
                specs.setdefault(parent, ev.CohortSpec(name=parent))
        for name in sorted(self.cohorts):
            chain = [name]
            parent = specs[name].parent
            while parent is not None:
                if parent in chain:
                    cycle = [*chain[chain.index(parent) :], parent]
                    users = sorted(q for q, (_, spec, _) in self.queues.items() if spec.cohort in cycle)
                    through = f" (ClusterQueue {', '.join(users)} in it)" if users else ""
                    self.cohorts[name][0].fail(
                        "$.spec.parentName",
                        "the cohorts form a cycle: " + " -> ".join(f"Cohort/{c}" for c in cycle) + through,
                        accepted="a tree: follow parentName from any cohort and reach a root (no parentName)",
                    )
                chain.append(parent)
                parent = specs[parent].parent
        return [specs[name] for name in sorted(specs)]


def _canonical(value: Any) -> Any:
    """``value`` with every field equal to its default holding the default itself: msgspec omits
    a default by identity, so a ``"BestEffortFIFO"`` or ``1000`` read from YAML would otherwise be
    encoded, and the same configuration would not encode the same once read back from the log."""
    if isinstance(value, msgspec.Struct):
        fields = {}
        for f in msgspec.structs.fields(value):
            item = _canonical(getattr(value, f.name))
            if f.default is not msgspec.NODEFAULT and item == f.default:
                item = f.default
            fields[f.name] = item
        return type(value)(**fields)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _known(kind: str, names: Iterable[str]) -> str:
    listed = sorted(names)
    if not listed:
        return f"a {kind} (none is defined)"
    shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
    return f"one of the {kind}s defined: {shown}"


def _annotation_path() -> str:
    return f"$.metadata.annotations.{ALLOWED_PRIORITY_CLASSES_ANNOTATION}"


def _with_allowed(
    o: _Obj, queue: ev.ClusterQueueSpec, raw: str, classes: Mapping[str, int]
) -> ev.ClusterQueueSpec:
    names = [n.strip() for n in raw.split(",")]
    if not any(names):
        o.fail(
            _annotation_path(),
            "lists no priority class",
            accepted="WorkloadPriorityClass names separated by commas (remove the annotation to allow any class)",
        )
    seen: list[str] = []
    for n in names:
        if not n:
            o.fail(
                _annotation_path(), f"{raw!r} has an empty name", accepted="names separated by single commas"
            )
        if n not in classes:
            o.fail(
                _annotation_path(),
                f"no WorkloadPriorityClass named {n!r}",
                accepted=_known("WorkloadPriorityClass", classes),
                got=n,
                among=classes,
            )
        if n not in seen:
            seen.append(n)
    return ev.ClusterQueueSpec(**{**_as_dict(queue), "allowed_priority_classes": seen})


def _as_dict(queue: ev.ClusterQueueSpec) -> dict[str, Any]:
    return {f: getattr(queue, f) for f in queue.__struct_fields__}


def _flavor_refs(groups: Sequence[ev.ResourceGroup]) -> Iterable[tuple[str, str]]:
    for i, group in enumerate(groups):
        for j, flavor in enumerate(group.flavors):
            yield f"$.spec.resourceGroups[{i}].flavors[{j}].name", flavor.name


def _labels(o: _Obj, value: Any, path: str) -> dict[str, str]:
    labels = _mapping(o, value, path)
    out: dict[str, str] = {}
    for k, v in labels.items():
        if not isinstance(k, str) or not isinstance(v, str):
            o.fail(
                f"{path}.{k}", f"{v!r} is not a label value", accepted="a string (quote numbers and booleans)"
            )
        out[k] = v
    return out


def _selector(o: _Obj, value: Any, path: str) -> ev.LabelSelector:
    raw = _mapping(o, value, path)
    _fields(o, raw, path, {"matchLabels", "matchExpressions"})
    expressions = []
    for i, item in enumerate(_list(o, raw.get("matchExpressions"), f"{path}.matchExpressions")):
        at = f"{path}.matchExpressions[{i}]"
        e = _mapping(o, item, at)
        _fields(o, e, at, {"key", "operator", "values"})
        key = _string(o, e.get("key"), f"{at}.key")
        op = _choice(o, e.get("operator"), f"{at}.operator", _OPERATORS)
        values = [str(v) for v in _list(o, e.get("values"), f"{at}.values")]
        if op in ("In", "NotIn") and not values:
            o.fail(f"{at}.values", f"{op} needs at least one value", accepted="a non-empty list")
        if op in ("Exists", "DoesNotExist") and values:
            o.fail(f"{at}.values", f"{op} takes no values", accepted="no values")
        expressions.append(ev.LabelRequirement(key=key, operator=op, values=values))
    return ev.LabelSelector(
        match_labels=_labels(o, raw.get("matchLabels"), f"{path}.matchLabels"), match_expressions=expressions
    )


def _weight(o: _Obj, value: Any) -> int:
    fair = _mapping(o, value, "$.spec.fairSharing")
    _fields(o, fair, "$.spec.fairSharing", {"weight"})
    if fair.get("weight") is None:
        return 1000
    path = "$.spec.fairSharing.weight"
    try:
        nanos = parse_nanos(fair["weight"])
    except QuantityError as err:
        o.fail(path, str(err))
    if nanos < 0:
        o.fail(
            path,
            f"{fair['weight']!r} is negative",
            accepted="a weight of 0 or more (a quantity such as 1, 2 or 0.5)",
        )
    return -(-nanos // 10**6)  # thousandths, rounded up as Kueue's MilliValue


def _preemption(o: _Obj, value: Any) -> ev.QueuePreemption:
    path = "$.spec.preemption"
    raw = _mapping(o, value, path)
    _fields(o, raw, path, {"reclaimWithinCohort", "withinClusterQueue", "borrowWithinCohort"})
    reclaim = _choice(o, raw.get("reclaimWithinCohort", "Never"), f"{path}.reclaimWithinCohort", _RECLAIM)
    within = _choice(o, raw.get("withinClusterQueue", "Never"), f"{path}.withinClusterQueue", _WITHIN)
    borrow = _mapping(o, raw.get("borrowWithinCohort"), f"{path}.borrowWithinCohort")
    _fields(o, borrow, f"{path}.borrowWithinCohort", {"policy", "maxPriorityThreshold"})
    policy = _choice(o, borrow.get("policy", "Never"), f"{path}.borrowWithinCohort.policy", _BORROW)
    threshold = borrow.get("maxPriorityThreshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int)):
        o.fail(
            f"{path}.borrowWithinCohort.maxPriorityThreshold",
            f"{threshold!r} is not a priority",
            accepted="an integer",
        )
    if policy != "Never" and reclaim == "Never":
        # As Kueue's validation: borrowing by preemption presumes reclaiming is allowed.
        o.fail(
            f"{path}.borrowWithinCohort.policy",
            f"{policy} needs reclaimWithinCohort to be other than Never",
            accepted="reclaimWithinCohort: LowerPriority or Any, or borrowWithinCohort.policy: Never",
        )
    return ev.QueuePreemption(
        reclaim_within_cohort=reclaim,
        within_cluster_queue=within,
        borrow_within_cohort=policy,
        borrow_max_priority_threshold=threshold,
    )


def _resource_groups(o: _Obj, value: Any, *, in_cohort: bool, cohort: bool) -> list[ev.ResourceGroup]:
    """Kueue's rules: every flavor lists exactly the covered resources, in their order; a resource
    and a flavor belong to one group only; limits only where there is a cohort to borrow from or
    lend to (for a Cohort, a parent), and a lending limit within the nominal quota."""
    groups: list[ev.ResourceGroup] = []
    covered_by: dict[str, int] = {}
    flavor_in: dict[str, str] = {}
    up = "a parent (spec.parentName)" if cohort else "a cohort (spec.cohortName)"
    for i, item in enumerate(_list(o, value, "$.spec.resourceGroups")):
        gp = f"$.spec.resourceGroups[{i}]"
        g = _mapping(o, item, gp)
        _fields(o, g, gp, {"coveredResources", "flavors"})
        covered = [
            _string(o, r, f"{gp}.coveredResources[{k}]")
            for k, r in enumerate(_list(o, g.get("coveredResources"), f"{gp}.coveredResources"))
        ]
        if not covered:
            o.fail(
                f"{gp}.coveredResources",
                "lists no resource",
                accepted="the resources this group's flavors give quota for, e.g. [cpu, memory]",
            )
        for k, r in enumerate(covered):
            if r in covered_by:
                o.fail(
                    f"{gp}.coveredResources[{k}]",
                    f"{r!r} is also covered by resourceGroups[{covered_by[r]}]",
                    accepted="each resource in one resource group only",
                )
            covered_by[r] = i
        flavors: list[ev.FlavorQuotas] = []
        for j, fitem in enumerate(_list(o, g.get("flavors"), f"{gp}.flavors")):
            fp = f"{gp}.flavors[{j}]"
            f = _mapping(o, fitem, fp)
            _fields(o, f, fp, {"name", "resources"})
            fname = _name(o, f.get("name"), f"{fp}.name")
            if fname in flavor_in:
                o.fail(
                    f"{fp}.name",
                    f"flavor {fname!r} is already used at {flavor_in[fname]}",
                    accepted="each flavor once per queue",
                )
            flavor_in[fname] = fp
            resources = [
                _resource(o, r, f"{fp}.resources[{k}]", in_cohort=in_cohort, up=up)
                for k, r in enumerate(_list(o, f.get("resources"), f"{fp}.resources"))
            ]
            names = [r.name for r in resources]
            if names != covered:
                o.fail(
                    f"{fp}.resources",
                    f"lists {names}",
                    accepted=f"the covered resources {covered}, each once and in that order (as Kueue requires)",
                )
            flavors.append(ev.FlavorQuotas(name=fname, resources=resources))
        groups.append(ev.ResourceGroup(covered_resources=covered, flavors=flavors))
    return groups


def _resource(o: _Obj, value: Any, path: str, *, in_cohort: bool, up: str) -> ev.ResourceQuota:
    r = _mapping(o, value, path)
    _fields(o, r, path, {"name", "nominalQuota", "borrowingLimit", "lendingLimit"})
    name = _string(o, r.get("name"), f"{path}.name")
    if "nominalQuota" not in r:
        o.fail(f"{path}.nominalQuota", "missing", accepted="a quantity, e.g. 8, 500m or 64Gi (0 for none)")

    def quantity(key: str) -> int | None:
        if r.get(key) is None:
            return None
        try:
            return to_units(name, r[key])
        except QuantityError as err:
            o.fail(f"{path}.{key}", str(err))

    nominal = quantity("nominalQuota")
    borrowing, lending = quantity("borrowingLimit"), quantity("lendingLimit")
    for key, limit in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
        if limit is not None and not in_cohort:
            o.fail(
                f"{path}.{key}",
                f"is set but there is no cohort to {'borrow from' if key == 'borrowingLimit' else 'lend to'}",
                accepted=f"{up}, or no {key}",
            )
    assert nominal is not None
    if lending is not None and lending > nominal:
        o.fail(
            f"{path}.lendingLimit",
            f"{r['lendingLimit']!r} is more than nominalQuota {r['nominalQuota']!r}",
            accepted="at most the nominal quota",
        )
    return ev.ResourceQuota(name=name, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)
