"""The adapter's only door to a Kubernetes API (kubernetes-asyncio): every call is checked
against ``rbac.API_CALLS``, has a timeout, and maps failures to what the caller acts on.

Objects are plain dicts through ``CustomObjectsApi`` (any group, ``batch`` included), which is
what lets one code path serve every job kind. Connection failures and timeouts raise
``Unreachable``; API errors raise ``ApiError`` with the status and the server's message. Neither
carries credentials: the kubeconfig is never logged or put into an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from reconciler.service.clusters import rbac
from reconciler.service.clusters.base import Unreachable

MERGE_PATCH = "application/merge-patch+json"
_MERGE: dict[str, Any] = {"_content_type": MERGE_PATCH}  # the generated client would pick json-patch


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str, *, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion is too old; list again."""


def _error(err: ApiException, what: str) -> ApiError:
    message = str(err.reason or "")
    body = getattr(err, "body", None)
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message", message)
    cls = Gone if err.status == 410 else ApiError
    return cls(int(err.status or 0), message, what=what)


class _CorePaths:
    """The ApiClient as ``CustomObjectsApi`` sees it, with the core group (plain Pods) routed to
    ``/api/v1/...``: that API writes ``/apis/{group}/{version}/...`` for every group."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._client = api_client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def call_api(
        self, resource_path: str, method: str, path_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        if isinstance(path_params, dict) and path_params.get("group") == "":
            resource_path = resource_path.replace("/apis/{group}/", "/api/", 1)
        return self._client.call_api(resource_path, method, path_params, *args, **kwargs)


class KubeApi:
    def __init__(
        self, api_client: client.ApiClient, *, role: rbac.Role, cluster: str, timeout_s: float = 10.0
    ) -> None:
        self.api_client = api_client
        self.role: rbac.Role = role
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._custom = client.CustomObjectsApi(_CorePaths(api_client))  # type: ignore[arg-type]
        self._core = client.CoreV1Api(api_client)
        self._version = client.VersionApi(api_client)

    async def _call(
        self, group: str, resource: str, verb: str, coro: Any, *, timeout_s: float | None = None
    ) -> Any:
        try:
            rbac.check(self.role, group, resource, verb)
        except rbac.UnlistedApiCall:
            coro.close()  # never sent
            raise
        what = f"{self.cluster}: {verb} {group or 'core'}/{resource}"
        try:
            return await asyncio.wait_for(coro, timeout_s or self.timeout_s)
        except ApiException as err:
            if err.status in (0, None, 502, 503, 504):
                raise Unreachable(f"{what}: {err.reason}") from None
            raise _error(err, what) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise Unreachable(f"{what}: {type(err).__name__}: {err}") from None

    # -- generic objects ----------------------------------------------------------------------

    async def list_objects(
        self, group: str, version: str, plural: str, *, namespace: str | None = None, label_selector: str = ""
    ) -> dict[str, Any]:
        if namespace is None:
            coro = self._custom.list_cluster_custom_object(
                group, version, plural, label_selector=label_selector
            )
        else:
            coro = self._custom.list_namespaced_custom_object(
                group, version, namespace, plural, label_selector=label_selector
            )
        result: dict[str, Any] = await self._call(group, plural, "list", coro)
        return result

    async def get(
        self, group: str, version: str, plural: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        coro = self._custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        try:
            result: dict[str, Any] = await self._call(group, plural, "get", coro)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return result

    async def create(
        self, group: str, version: str, plural: str, namespace: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        coro = self._custom.create_namespaced_custom_object(group, version, namespace, plural, body)
        result: dict[str, Any] = await self._call(group, plural, "create", coro)
        return result

    async def patch(
        self, group: str, version: str, plural: str, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        if not namespace:  # a cluster-scoped object (a WorkerCluster)
            coro = self._custom.patch_cluster_custom_object(group, version, plural, name, body, **_MERGE)
        else:
            coro = self._custom.patch_namespaced_custom_object(
                group, version, namespace, plural, name, body, **_MERGE
            )
        result: dict[str, Any] = await self._call(group, plural, "patch", coro)
        return result

    async def review(self, group: str, version: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a review (TokenReview, SubjectAccessReview): the answer is the object's status."""
        coro = self._custom.create_cluster_custom_object(group, version, plural, body)
        result: dict[str, Any] = await self._call(group, plural, "create", coro)
        return result

    async def patch_status(
        self, group: str, version: str, plural: str, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        if not namespace:
            coro = self._custom.patch_cluster_custom_object_status(group, version, plural, name, body, **_MERGE)
        else:
            coro = self._custom.patch_namespaced_custom_object_status(
                group, version, namespace, plural, name, body, **_MERGE
            )
        result: dict[str, Any] = await self._call(group, f"{plural}/status", "patch", coro)
        return result

    async def delete(
        self, group: str, version: str, plural: str, namespace: str, name: str, *, uid: str = ""
    ) -> bool:
        """Delete (background propagation, precondition on ``uid`` if given); False if absent."""
        options = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid) if uid else None
        )
        coro = self._custom.delete_namespaced_custom_object(
            group, version, namespace, plural, name, body=options
        )
        try:
            await self._call(group, plural, "delete", coro)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    async def watch(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        resource_version: str,
        label_selector: str = "",
        timeout_s: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) after ``resource_version`` until the server ends
        the watch (``timeout_s``). Raises ``Gone`` when the version is too old."""
        rbac.check(self.role, group, plural, "watch")
        what = f"{self.cluster}: watch {group or 'core'}/{plural}"
        w = watch.Watch()
        stream = w.stream(
            self._custom.list_cluster_custom_object,
            group,
            version,
            plural,
            label_selector=label_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            _request_timeout=timeout_s + 30,
        )
        try:
            async for event in stream:
                yield {"type": event["type"], "object": event["raw_object"]}
        except ApiException as err:
            if err.status in (0, None, 502, 503, 504):
                raise Unreachable(f"{what}: {err.reason}") from None
            raise _error(err, what) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise Unreachable(f"{what}: {type(err).__name__}: {err}") from None
        finally:
            await w.close()

    # -- core group and non-resource URLs -----------------------------------------------------

    async def version(self, *, timeout_s: float) -> dict[str, Any]:
        info = await self._call("", "/version", "get", self._version.get_code(), timeout_s=timeout_s)
        return {"gitVersion": getattr(info, "git_version", "")}

    async def list_nodes(self) -> list[dict[str, Any]]:
        result = await self._call("", "nodes", "list", self._core.list_node(_preload_content=False))
        return await _items(result)

    async def list_pods(self) -> list[dict[str, Any]]:
        coro = self._core.list_pod_for_all_namespaces(_preload_content=False)
        result = await self._call("", "pods", "list", coro)
        return await _items(result)

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        coro = self._core.read_namespaced_secret(name, namespace, _preload_content=False)
        try:
            result = await self._call("", "secrets", "get", coro)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        data: dict[str, Any] = await result.json()
        return data


async def _items(response: Any) -> list[dict[str, Any]]:
    data = await response.json()
    items: list[dict[str, Any]] = data.get("items") or []
    return items
