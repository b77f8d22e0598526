"""Delegated authentication and authorization, for an API served behind kube-apiserver's
aggregation layer (what a generic API server's delegating authenticator and authorizer do).

- Who: kube-apiserver's front proxy connects with a client certificate signed by its
  request-header CA and names the user in headers (X-Remote-User, X-Remote-Group,
  X-Remote-Extra-*). The CA, the allowed certificate names and the header names are what
  kube-apiserver publishes in ConfigMap kube-system/extension-apiserver-authentication.
- May they: a SubjectAccessReview, its answer kept for ten seconds (the generic API server's
  default for both allowed and denied answers), so a page of requests costs one review."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .api import KubeApi

CONFIG_MAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
TTL_SECONDS = 10.0


class NotConfigured(Exception):
    """kube-apiserver publishes no request-header settings (no --requestheader-client-ca-file)."""


@dataclass(frozen=True)
class RequestHeaders:
    """kube-apiserver's front-proxy settings."""

    client_ca: bytes
    allowed_names: tuple[str, ...] = ()
    """Common names a front-proxy certificate may have; empty: any the CA signed."""
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_config_map(cls, data: Mapping[str, str]) -> RequestHeaders:
        ca = data.get("requestheader-client-ca-file")
        if not ca:
            raise NotConfigured(
                "ConfigMap kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: "
                "kube-apiserver runs without --requestheader-client-ca-file, so it cannot call an aggregated API"
            )

        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            text = data.get(key)
            if not text:
                return default
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"extension-apiserver-authentication: {key}: not a JSON list: {exc}") from None
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"extension-apiserver-authentication: {key}: not a JSON list of strings")
            return tuple(value)

        return cls(
            client_ca=ca.encode(),
            allowed_names=names("requestheader-allowed-names", ()),
            username_headers=names("requestheader-username-headers", cls.username_headers),
            group_headers=names("requestheader-group-headers", cls.group_headers),
            extra_prefixes=names("requestheader-extra-headers-prefix", cls.extra_prefixes),
        )


async def request_headers(api: KubeApi) -> RequestHeaders:
    found = await api.get(CONFIG_MAP)
    return RequestHeaders.from_config_map(found.get("data") or {})


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _common_name(peer: Mapping[str, Any] | None) -> str | None:
    """The subject's common name of a verified peer certificate (ssl's getpeercert() form)."""
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def authenticate(settings: RequestHeaders, peer: Mapping[str, Any] | None, headers: Any) -> User | None:
    """The user the front proxy names, if the connection is the front proxy's (a certificate the
    TLS layer verified against the request-header CA, with an allowed name). `headers` is a
    multi-valued mapping (getall/items), as aiohttp's request headers are."""
    name = _common_name(peer)
    if name is None or (settings.allowed_names and name not in settings.allowed_names):
        return None
    user = next((v for h in settings.username_headers for v in headers.getall(h, []) if v), None)
    if user is None:
        return None
    groups = tuple(v for h in settings.group_headers for v in headers.getall(h, []))
    extra: dict[str, tuple[str, ...]] = {}
    for header, value in headers.items():
        for prefix in settings.extra_prefixes:
            if header.lower().startswith(prefix.lower()):
                key = unquote(header[len(prefix) :]).lower()
                extra[key] = (*extra.get(key, ()), value)
    return User(user, groups, extra)


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do: a resource (with `resource` set) or a non-resource path."""

    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""

    def review(self) -> dict[str, Any]:
        if not self.resource:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attributes = {
            "verb": self.verb,
            "group": self.group,
            "version": self.version,
            "resource": self.resource,
            "subresource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
        }
        return {"resourceAttributes": {k: v for k, v in attributes.items() if v}}


class Authorizer:
    """SubjectAccessReviews, each answer kept for `ttl` seconds."""

    def __init__(self, api: KubeApi, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._ttl = ttl
        self._clock = clock
        self._answers: dict[tuple[Any, ...], tuple[float, bool, str]] = {}

    async def allowed(self, user: User, attributes: Attributes) -> tuple[bool, str]:
        """Whether `user` may, and the authorizer's reason."""
        extra = tuple(sorted((k, v) for k, v in user.extra.items()))
        key = (user.name, user.groups, extra, attributes)
        now = self._clock()
        cached = self._answers.get(key)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), **attributes.review()}
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = (await self._api.create(REVIEWS, body)).get("status") or {}
        answer = bool(status.get("allowed")) and not status.get("denied")
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        if len(self._answers) > 10_000:  # users come and go: drop what has expired
            self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
        self._answers[key] = (now + self._ttl, answer, reason)
        return answer, reason


class TokenAuthenticator:
    """Bearer tokens (a dashboard's login), checked with TokenReviews; each answer kept for `ttl`
    seconds, as the generic API server keeps them."""

    def __init__(self, api: KubeApi, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._ttl = ttl
        self._clock = clock
        self._answers: dict[str, tuple[float, User | None]] = {}

    async def user(self, token: str) -> User | None:
        now = self._clock()
        cached = self._answers.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = (await self._api.create(TOKEN_REVIEWS, body)).get("status") or {}
        found = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            extra = {str(k): tuple(v) for k, v in (info.get("extra") or {}).items()}
            found = User(str(info.get("username") or ""), tuple(info.get("groups") or ()), extra)
        if len(self._answers) > 10_000:
            self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
        self._answers[token] = (now + self._ttl, found)
        return found
