"""Pod sets of each supported kind, and the per-pod request rule (KINDS.md, "Per-pod request rule").

Mutating admission runs before the API server validates the object, so nothing here trusts the
shape of what it reads: a field of the wrong type raises ``PodSetError`` with its JSON path, which
the webhook turns into a denial a person can act on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from eventlog import events as ev
from eventlog.kube.kinds import KindInfo
from eventlog.kube.names import MIN_PARALLELISM_ANNOTATION, POD_GROUP_NAME, POD_GROUP_TOTAL
from eventlog.kube.quantity import QuantityError, parse_nanos, to_integer
from webhook.quote import short

Amounts = dict[str, int]  # nano-units


class PodSetError(ValueError):
    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.message = message
        self.path = path


class NotDispatchable(ValueError):
    """A supported kind in a form kdispatch cannot move to another cluster (allowed, left alone)."""


@dataclass(frozen=True, kw_only=True)
class PodSetSpec:
    name: str
    count: int
    spec: dict[str, Any]  # the pod spec
    path: str  # JSON path of ``spec`` in the object, for messages
    min_count: int | None = None
    sidecars: bool = True  # restartPolicy Always on init containers makes them sidecars
    pod_level: bool = True  # pod-level resources (spec.resources) apply


# ---- reading untrusted JSON ------------------------------------------------------------------


def _obj(parent: dict[str, Any], key: str, *, path: str) -> dict[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodSetError(f"expected an object, found {type(value).__name__}", path=f"{path}.{key}")
    return value


def _list(parent: dict[str, Any], key: str, *, path: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSetError(f"expected a list, found {type(value).__name__}", path=f"{path}.{key}")
    return value


def _int(parent: dict[str, Any], key: str, *, path: str, default: int | None) -> int | None:
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PodSetError(f"expected a non-negative integer, found {short(value)}", path=f"{path}.{key}")
    return value


def _str(parent: dict[str, Any], key: str, *, path: str, default: str = "") -> str:
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise PodSetError(f"expected a string, found {short(value)}", path=f"{path}.{key}")
    return value


def _items(values: list[Any], path: str) -> Iterable[tuple[dict[str, Any], str]]:
    for i, item in enumerate(values):
        if not isinstance(item, dict):
            raise PodSetError(f"expected an object, found {type(item).__name__}", path=f"{path}[{i}]")
        yield item, f"{path}[{i}]"


def _pod_spec(template: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    return _obj(template, "spec", path=path), f"{path}.spec"


# ---- the per-pod request rule ----------------------------------------------------------------


def _add(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def _max(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out[k], v) if k in out else v
    return out


def _amounts(raw: dict[str, Any], path: str) -> Amounts:
    out: Amounts = {}
    for name, value in raw.items():
        try:
            out[name] = parse_nanos(value)
        except QuantityError as err:
            raise PodSetError(str(err), path=f"{path}.{name}") from None
    return out


def _requests(holder: dict[str, Any], path: str) -> Amounts:
    """requests, with limits standing in for missing keys (Kueue's template adjustment)."""
    resources = _obj(holder, "resources", path=path)
    rpath = f"{path}.resources"
    requests = _amounts(_obj(resources, "requests", path=rpath), f"{rpath}.requests")
    for name, value in _amounts(_obj(resources, "limits", path=rpath), f"{rpath}.limits").items():
        requests.setdefault(name, value)
    return requests


def _pod_level_key(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(
    spec: dict[str, Any], *, path: str, sidecars: bool = True, pod_level: bool = True
) -> Amounts:
    """component-helpers ``PodRequests`` after Kueue's adjustments, exact."""
    try:
        return _pod_requests_unchecked(spec, sidecars=sidecars, pod_level=pod_level)
    except _Malformed:  # the careful reading below says where and what
        return _pod_requests_checked(spec, path=path, sidecars=sidecars, pod_level=pod_level)


class _Malformed(Exception):
    pass


def _plain_requests(holder: Any) -> Amounts:
    """``_requests`` without JSON paths (every admitted object pays for them otherwise)."""
    if not isinstance(holder, dict):
        raise _Malformed
    resources = holder.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise _Malformed
    requests, limits = resources.get("requests"), resources.get("limits")
    if (requests is not None and not isinstance(requests, dict)) or (limits is not None and not isinstance(limits, dict)):
        raise _Malformed
    try:
        out = {name: parse_nanos(value) for name, value in requests.items()} if requests else {}
        for name, value in (limits or {}).items():
            nanos = parse_nanos(value)  # parsed even when shadowed, as _requests does: a bad limit is denied
            out.setdefault(name, nanos)
    except QuantityError:
        raise _Malformed from None
    return out


def _plain_list(spec: dict[str, Any], key: str) -> list[Any]:
    values = spec.get(key)
    if values is None:
        return []
    if not isinstance(values, list):
        raise _Malformed
    return values


def _pod_requests_unchecked(spec: dict[str, Any], *, sidecars: bool, pod_level: bool) -> Amounts:
    """The same arithmetic as ``_pod_requests_checked``; raises ``_Malformed`` where it would raise."""
    total: Amounts = {}
    for c in _plain_list(spec, "containers"):
        total = _add(total, _plain_requests(c))
    running_sidecars: Amounts = {}
    init_max: Amounts = {}
    for ic in _plain_list(spec, "initContainers"):
        req = _plain_requests(ic)
        if sidecars and ic.get("restartPolicy") == "Always":
            total = _add(total, req)
            running_sidecars = _add(running_sidecars, req)
            use = running_sidecars
        else:
            use = _add(req, running_sidecars)
        init_max = _max(init_max, use)
    total = _max(total, init_max)
    if pod_level:
        for name, value in _plain_requests(spec).items():
            if _pod_level_key(name):
                total[name] = value
    overhead = spec.get("overhead")
    if overhead is None:
        return total
    if not isinstance(overhead, dict):
        raise _Malformed
    try:
        return _add(total, {name: parse_nanos(value) for name, value in overhead.items()})
    except QuantityError:
        raise _Malformed from None


def _pod_requests_checked(
    spec: dict[str, Any], *, path: str, sidecars: bool = True, pod_level: bool = True
) -> Amounts:
    total: Amounts = {}
    for c, cpath in _items(_list(spec, "containers", path=path), f"{path}.containers"):
        total = _add(total, _requests(c, cpath))
    running_sidecars: Amounts = {}
    init_max: Amounts = {}
    for ic, ipath in _items(_list(spec, "initContainers", path=path), f"{path}.initContainers"):
        req = _requests(ic, ipath)
        if sidecars and ic.get("restartPolicy") == "Always":
            total = _add(total, req)
            running_sidecars = _add(running_sidecars, req)
            use = running_sidecars
        else:
            use = _add(req, running_sidecars)
        init_max = _max(init_max, use)
    total = _max(total, init_max)
    if pod_level:
        for name, value in _requests(spec, path).items():
            if _pod_level_key(name):
                total[name] = value
    return _add(total, _amounts(_obj(spec, "overhead", path=path), f"{path}.overhead"))


def to_integers(amounts: Amounts) -> ev.Resources:
    return {name: to_integer(name, amounts[name]) for name in sorted(amounts)}


# ---- per kind ---------------------------------------------------------------------------------


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        return meta["annotations"]
    return {}


def _job_count(jspec: dict[str, Any], path: str) -> int:
    parallelism = _int(jspec, "parallelism", path=path, default=1)
    completions = _int(jspec, "completions", path=path, default=None)
    assert parallelism is not None
    return min(parallelism, completions) if completions is not None else parallelism


def _min_parallelism(obj: dict[str, Any]) -> int | None:
    raw = _annotations(obj).get(MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    path = f"$.metadata.annotations[{MIN_PARALLELISM_ANNOTATION!r}]"
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise PodSetError(f"expected a positive integer, found {short(raw)}", path=path)
    return int(raw)


def _batch_job(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = _obj(obj, "spec", path="$")
    template = _obj(spec, "template", path="$.spec")
    pspec, ppath = _pod_spec(template, "$.spec.template")
    return [
        PodSetSpec(
            name="main",
            count=_job_count(spec, "$.spec"),
            spec=pspec,
            path=ppath,
            min_count=_min_parallelism(obj),
        )
    ]


def _jobset_sets(spec: dict[str, Any], path: str) -> list[PodSetSpec]:
    out = []
    for rj, rpath in _items(_list(spec, "replicatedJobs", path=path), f"{path}.replicatedJobs"):
        replicas = _int(rj, "replicas", path=rpath, default=1)
        jtemplate = _obj(rj, "template", path=rpath)
        jspec = _obj(jtemplate, "spec", path=f"{rpath}.template")
        jpath = f"{rpath}.template.spec"
        parallelism = _int(jspec, "parallelism", path=jpath, default=1)
        completions = _int(jspec, "completions", path=jpath, default=parallelism)
        assert replicas is not None and parallelism is not None and completions is not None
        pspec, ppath = _pod_spec(_obj(jspec, "template", path=jpath), f"{jpath}.template")
        out.append(
            PodSetSpec(
                name=_str(rj, "name", path=rpath),
                count=replicas * min(parallelism, completions),
                spec=pspec,
                path=ppath,
            )
        )
    return out


def _jobset(obj: dict[str, Any]) -> list[PodSetSpec]:
    return _jobset_sets(_obj(obj, "spec", path="$"), "$.spec")


_RAY_AUTOSCALER = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}
_RAY_SUBMITTER = {
    "name": "ray-job-submitter",
    "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}
_GCS_FT_MIN = {"cpu": "200m", "memory": "256Mi"}


def _with_container(pspec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    containers = pspec.get("containers")
    return {**pspec, "containers": [*(containers if isinstance(containers, list) else []), container]}


def _ray_cluster_sets(
    rspec: dict[str, Any], path: str, *, ft_annotation: bool, head_extra: dict[str, Any] | None
) -> list[PodSetSpec]:
    head = _obj(rspec, "headGroupSpec", path=path)
    hspec, hpath = _pod_spec(
        _obj(head, "template", path=f"{path}.headGroupSpec"), f"{path}.headGroupSpec.template"
    )
    if rspec.get("enableInTreeAutoscaling") is True:
        options = _obj(rspec, "autoscalerOptions", path=path)
        resources = (
            options.get("resources") if isinstance(options.get("resources"), dict) else _RAY_AUTOSCALER
        )
        hspec = _with_container(hspec, {"name": "autoscaler", "resources": resources})
    if ft_annotation or rspec.get("gcsFaultToleranceOptions") is not None:
        hspec = _with_gcs_minimum(hspec, hpath)
    if head_extra is not None:
        hspec = _with_container(hspec, head_extra)
    out = [PodSetSpec(name="head", count=1, spec=hspec, path=hpath)]
    for wg, wpath in _items(_list(rspec, "workerGroupSpecs", path=path), f"{path}.workerGroupSpecs"):
        # The CRD defaults replicas to 0 before any webhook runs; a missing value means 0 here too.
        replicas = _int(wg, "replicas", path=wpath, default=0)
        hosts = _int(wg, "numOfHosts", path=wpath, default=1)
        assert replicas is not None and hosts is not None
        wspec, wspath = _pod_spec(_obj(wg, "template", path=wpath), f"{wpath}.template")
        out.append(
            PodSetSpec(
                name=_str(wg, "groupName", path=wpath),
                count=replicas * max(hosts, 1),
                spec=wspec,
                path=wspath,
            )
        )
    return out


def _with_gcs_minimum(hspec: dict[str, Any], path: str) -> dict[str, Any]:
    containers = _list(hspec, "containers", path=path)
    if not containers or not isinstance(containers[0], dict):
        return hspec
    first = containers[0]
    requests = _requests(first, f"{path}.containers[0]")
    raised = _max(requests, _amounts(_GCS_FT_MIN, "$"))
    requests_out = {k: _nano_quantity(v) for k, v in raised.items()}
    resources = {**_obj(first, "resources", path=f"{path}.containers[0]"), "requests": requests_out}
    return {**hspec, "containers": [{**first, "resources": resources}, *containers[1:]]}


def _nano_quantity(nanos: int) -> str:
    return f"{nanos}n"


def _raycluster(obj: dict[str, Any]) -> list[PodSetSpec]:
    ft = _annotations(obj).get("ray.io/ft-enabled") == "true"
    return _ray_cluster_sets(_obj(obj, "spec", path="$"), "$.spec", ft_annotation=ft, head_extra=None)


def _rayjob(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = _obj(obj, "spec", path="$")
    if spec.get("rayClusterSpec") is None:
        raise NotDispatchable(
            "this RayJob has no spec.rayClusterSpec (it runs on an existing RayCluster through "
            "spec.clusterSelector), so kdispatch cannot dispatch it to another cluster; it was left alone"
        )
    mode = _str(spec, "submissionMode", path="$.spec", default="K8sJobMode")
    rspec = _obj(spec, "rayClusterSpec", path="$.spec")
    sets = _ray_cluster_sets(
        rspec,
        "$.spec.rayClusterSpec",
        ft_annotation=False,
        head_extra=_RAY_SUBMITTER if mode == "SidecarMode" else None,
    )
    if mode == "K8sJobMode":
        submitter = spec.get("submitterPodTemplate")
        if isinstance(submitter, dict):
            sspec, spath = _pod_spec(submitter, "$.spec.submitterPodTemplate")
        else:
            sspec, spath = {"containers": [_RAY_SUBMITTER]}, "$.spec.submitterPodTemplate"
        sets.append(PodSetSpec(name="submitter", count=1, spec=sspec, path=spath))
    return sets


_KUBEFLOW: dict[str, tuple[str, tuple[str, ...]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("master", "worker")),
    "TFJob": ("tfReplicaSpecs", ("chief", "master", "ps", "worker", "evaluator")),
    "XGBoostJob": ("xgbReplicaSpecs", ("master", "worker")),
    "PaddleJob": ("paddleReplicaSpecs", ("master", "worker")),
    "JAXJob": ("jaxReplicaSpecs", ("worker",)),
    "MPIJob": ("mpiReplicaSpecs", ("launcher", "worker")),
}


def _kubeflow_sets(kind: str, spec: dict[str, Any], *, path: str) -> list[PodSetSpec]:
    field_name, order = _KUBEFLOW[kind]
    replicas = _obj(spec, field_name, path=path)
    by_lower = {str(k).lower(): k for k in replicas}
    out = []
    for role in order:
        key = by_lower.get(role)
        if key is None:
            continue
        rpath = f"{path}.{field_name}.{key}"
        rs = replicas[key]
        if not isinstance(rs, dict):
            raise PodSetError(f"expected an object, found {type(rs).__name__}", path=rpath)
        count = _int(rs, "replicas", path=rpath, default=1)
        assert count is not None
        pspec, ppath = _pod_spec(_obj(rs, "template", path=rpath), f"{rpath}.template")
        out.append(PodSetSpec(name=role, count=count, spec=pspec, path=ppath))
    return out


def _kubeflow(obj: dict[str, Any]) -> list[PodSetSpec]:
    return _kubeflow_sets(str(obj.get("kind")), _obj(obj, "spec", path="$"), path="$.spec")


def _trainjob(obj: dict[str, Any]) -> list[PodSetSpec]:
    # The runtime's other replicated jobs (initializers) need API reads; only the trainer nodes
    # are counted. See docs/webhook.md.
    trainer = _obj(_obj(obj, "spec", path="$"), "trainer", path="$.spec")
    nodes = _int(trainer, "numNodes", path="$.spec.trainer", default=1)
    assert nodes is not None
    node = {"name": "node", "resources": _obj(trainer, "resourcesPerNode", path="$.spec.trainer")}
    return [PodSetSpec(name="node", count=nodes, spec={"containers": [node]}, path="$.spec.trainer")]


def _pod(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = _obj(obj, "spec", path="$")
    count = 1
    total = _annotations(obj).get(POD_GROUP_TOTAL)
    if pod_group_name(obj) and total is not None:
        path = f"$.metadata.annotations[{POD_GROUP_TOTAL!r}]"
        if not isinstance(total, str) or not total.isascii() or not total.isdigit() or int(total) < 1:
            raise PodSetError(f"expected a positive integer, found {short(total)}", path=path)
        count = int(total)
    return [PodSetSpec(name="main", count=count, spec=spec, path="$.spec")]


def pod_group_name(obj: dict[str, Any]) -> str:
    """The Kueue pod group (annotation first, then label), or ''."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    for where in ("annotations", "labels"):
        values = meta.get(where)
        if isinstance(values, dict) and isinstance(values.get(POD_GROUP_NAME), str):
            return str(values[POD_GROUP_NAME])
    return ""


def _workload(obj: dict[str, Any]) -> list[PodSetSpec]:
    out = []
    for ps, path in _items(_list(_obj(obj, "spec", path="$"), "podSets", path="$.spec"), "$.spec.podSets"):
        count = _int(ps, "count", path=path, default=1)
        assert count is not None
        pspec, ppath = _pod_spec(_obj(ps, "template", path=path), f"{path}.template")
        out.append(
            PodSetSpec(
                name=_str(ps, "name", path=path, default="main"),
                count=count,
                spec=pspec,
                path=ppath,
                min_count=_int(ps, "minCount", path=path, default=None),
            )
        )
    return out


def _resolve(component: dict[str, Any], dotted: str, *, path: str) -> dict[str, Any]:
    """An AppWrapper ``podSets[].path`` such as ``template.spec.replicatedJobs[0].template``."""
    node: Any = component
    here = path
    for part in dotted.split("."):
        name, _, index = part.partition("[")
        if not isinstance(node, dict) or not isinstance(node.get(name), (dict, list)):
            raise PodSetError(f"path {short(dotted)} does not resolve at {short(name)}", path=path)
        node = node[name]
        here = f"{here}.{name}"
        if index:
            idx = index.rstrip("]")
            if not idx.isdigit() or not isinstance(node, list) or int(idx) >= len(node):
                raise PodSetError(f"path {short(dotted)}: bad index {short(idx)}", path=path)
            node = node[int(idx)]
    if not isinstance(node, dict):
        raise PodSetError(f"path {short(dotted)} is not an object", path=path)
    return node


def _appwrapper_inferred(template: dict[str, Any], path: str) -> list[tuple[int, dict[str, Any], str]]:
    kind = template.get("kind")
    spec = _obj(template, "spec", path=path)
    spath = f"{path}.spec"
    if kind == "Job":
        pspec, ppath = _pod_spec(_obj(spec, "template", path=spath), f"{spath}.template")
        return [(_job_count(spec, spath), pspec, ppath)]
    if kind == "JobSet":
        return [(s.count, s.spec, s.path) for s in _jobset_sets(spec, spath)]
    if kind in ("PyTorchJob",):
        return [(s.count, s.spec, s.path) for s in _kubeflow_sets(kind, spec, path=spath)]
    if kind in ("RayCluster", "RayJob"):
        rspec = spec if kind == "RayCluster" else _obj(spec, "rayClusterSpec", path=spath)
        rpath = spath if kind == "RayCluster" else f"{spath}.rayClusterSpec"
        head, hpath = _pod_spec(
            _obj(_obj(rspec, "headGroupSpec", path=rpath), "template", path=f"{rpath}.headGroupSpec"),
            f"{rpath}.headGroupSpec.template",
        )
        out = [(1, head, hpath)]
        for wg, wpath in _items(_list(rspec, "workerGroupSpecs", path=rpath), f"{rpath}.workerGroupSpecs"):
            replicas = _int(
                wg, "replicas", path=wpath, default=1
            )  # AppWrapper reads replicas only (no numOfHosts)
            assert replicas is not None
            wspec, wspath = _pod_spec(_obj(wg, "template", path=wpath), f"{wpath}.template")
            out.append((replicas, wspec, wspath))
        return out
    if kind == "Pod":
        return [(1, spec, spath)]
    if kind in ("Deployment", "StatefulSet"):
        replicas = _int(spec, "replicas", path=spath, default=1)
        assert replicas is not None
        pspec, ppath = _pod_spec(_obj(spec, "template", path=spath), f"{spath}.template")
        return [(replicas, pspec, ppath)]
    return []


def _appwrapper(obj: dict[str, Any]) -> list[PodSetSpec]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    base = str(meta.get("name") or meta.get("generateName") or "appwrapper")
    out: list[PodSetSpec] = []
    for comp, cpath in _items(
        _list(_obj(obj, "spec", path="$"), "components", path="$.spec"), "$.spec.components"
    ):
        declared = _list(comp, "podSets", path=cpath)
        if declared:
            found = []
            for ps, ppath in _items(declared, f"{cpath}.podSets"):
                replicas = _int(ps, "replicas", path=ppath, default=1)
                assert replicas is not None
                template = _resolve(comp, _str(ps, "path", path=ppath), path=f"{ppath}.path")
                pspec, spath = _pod_spec(template, f"{cpath}.{_str(ps, 'path', path=ppath)}")
                found.append((replicas, pspec, spath))
        else:
            found = _appwrapper_inferred(_obj(comp, "template", path=cpath), f"{cpath}.template")
        for count, pspec, spath in found:
            # AppWrapper rebuilds templates without restartPolicy or pod-level resources.
            out.append(
                PodSetSpec(
                    name=f"{base}-{len(out)}",
                    count=count,
                    spec=pspec,
                    path=spath,
                    sidecars=False,
                    pod_level=False,
                )
            )
    return out


_EXTRACTORS: dict[str, Callable[[dict[str, Any]], list[PodSetSpec]]] = {
    "Job": _batch_job,
    "JobSet": _jobset,
    "RayCluster": _raycluster,
    "RayJob": _rayjob,
    "TrainJob": _trainjob,
    "AppWrapper": _appwrapper,
    "Pod": _pod,
    "Workload": _workload,
    **{kind: _kubeflow for kind in _KUBEFLOW},
}


def extract(info: KindInfo, obj: dict[str, Any]) -> list[PodSetSpec]:
    """The pod sets of ``obj`` (a ``info.kind``), in the kind's fixed order; names are unique, as
    the dispatcher and the workers' quota refer to sets by name (a Ray worker group may not be
    called ``head``)."""
    sets = _EXTRACTORS[info.kind]({**obj, "kind": info.kind})
    seen: dict[str, PodSetSpec] = {}
    for s in sets:
        if s.name in seen:
            raise PodSetError(f"pod set name {short(s.name)} is used twice (also at {seen[s.name].path})", path=s.path)
        seen[s.name] = s
    return sets


def pod_sets(info: KindInfo, obj: dict[str, Any]) -> list[ev.PodSet]:
    return to_pod_sets(extract(info, obj))


def to_pod_sets(specs: Iterable[PodSetSpec]) -> list[ev.PodSet]:
    out = []
    for s in specs:
        requests = pod_requests(s.spec, path=s.path, sidecars=s.sidecars, pod_level=s.pod_level)
        out.append(
            ev.PodSet(name=s.name, count=s.count, requests=to_integers(requests), min_count=s.min_count)
        )
    return out
