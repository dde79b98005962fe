"""NetworkPolicy semantics (networking.k8s.io/v1), enough to ask "may A open a connection to B on
port P?" of a set of policies: isolation by selection, peers (podSelector, namespaceSelector,
both, ipBlock with except), ports (number or name, protocol), allowed iff the source's egress
and the destination's ingress both allow it."""

from __future__ import annotations

import ipaddress
from typing import Any

from msgspec import Struct

from tests.deploy.admission import selector_matches

Obj = dict[str, Any]


class Endpoint(Struct, frozen=True):
    """A pod (namespace + labels + named ports) or an address outside the cluster's pods."""

    namespace: str | None = None  # None: not a pod (an API server, an external address)
    labels: dict[str, str] = {}
    ip: str = "10.0.0.1"
    named_ports: dict[str, int] = {}

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None

    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace or ""}


def _selects(policy: Obj, pod: Endpoint) -> bool:
    return (
        pod.is_pod
        and policy["metadata"]["namespace"] == pod.namespace
        and selector_matches(policy["spec"].get("podSelector"), pod.labels)
    )


def _types(policy: Obj) -> list[str]:
    spec = policy["spec"]
    return list(spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"]))


def _peer_matches(peer: Obj, other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        inside = address in ipaddress.ip_network(block["cidr"])
        return inside and not any(address in ipaddress.ip_network(e) for e in block.get("except", []))
    if not other.is_pod:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], other.namespace_labels()):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selector_matches(peer["podSelector"], other.labels)


def _port_matches(rule: Obj, port: int, protocol: str, target: Endpoint) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        wanted = p["port"]
        number = target.named_ports.get(wanted) if isinstance(wanted, str) else wanted
        end = p.get("endPort", number)
        if number is not None and number <= port <= end:
            return True
    return False


def _allowed(
    policies: list[Obj], *, pod: Endpoint, other: Endpoint, port: int, protocol: str, direction: str
) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if _selects(p, pod) and direction in _types(p)]
    if not selecting:
        return True  # not isolated in this direction
    target = pod if direction == "Ingress" else other
    for policy in selecting:
        for rule in policy["spec"].get(key, []):
            peers = rule.get(peers_key)
            peer_ok = not peers or any(
                _peer_matches(peer, other, policy["metadata"]["namespace"]) for peer in peers
            )
            if peer_ok and _port_matches(rule, port, protocol, target):
                return True
    return False


def connects(policies: list[Obj], source: Endpoint, dest: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether ``source`` may open a connection to ``dest``:``port``."""
    egress = not source.is_pod or _allowed(
        policies, pod=source, other=dest, port=port, protocol=protocol, direction="Egress"
    )
    ingress = not dest.is_pod or _allowed(
        policies, pod=dest, other=source, port=port, protocol=protocol, direction="Ingress"
    )
    return egress and ingress
