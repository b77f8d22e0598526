"""Serving certificates kept in Secrets, so no cert-manager is needed: the job webhooks and the
visibility API each have one. Every replica shares the Secret's certificate; the first to find it
missing, not serving the hosts or about to expire makes a new one, and racing replicas settle on
whichever write won. The CA goes wherever the API server must trust the server (a webhook
configuration's or an APIService's caBundle)."""

from __future__ import annotations

import base64
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..api.kinds import Kind
from ..k8s.api import ApiError, KubeApi
from ..k8s.certs import ServingCert, issue

log = logging.getLogger(__name__)

Secret = Kind("Secret", "", "v1", "secrets", True)


def _from_secret(secret: dict[str, Any]) -> ServingCert | None:
    data = secret.get("data") or {}
    try:
        return ServingCert(
            ca=base64.b64decode(data["ca.crt"]),
            cert=base64.b64decode(data["tls.crt"]),
            key=base64.b64decode(data["tls.key"]),
        )
    except (KeyError, ValueError):
        return None


def _secret_body(namespace: str, name: str, cert: ServingCert, version: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if version:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "kubernetes.io/tls",
        "data": {
            "ca.crt": base64.b64encode(cert.ca).decode(),
            "tls.crt": base64.b64encode(cert.cert).decode(),
            "tls.key": base64.b64encode(cert.key).decode(),
        },
    }


async def certificate(api: KubeApi, namespace: str, secret_name: str, hosts: list[str], what: str) -> ServingCert:
    """The certificate in Secret `namespace/secret_name`, made (or made anew) if it does not serve
    `hosts` or is about to expire. `what` names its server in the log."""
    path = Secret.path(secret_name, namespace)
    for _ in range(5):
        try:
            secret = await api.get(path)
        except ApiError as exc:
            if exc.code != 404:
                raise
            secret = None
        current = _from_secret(secret) if secret is not None else None
        if current is not None and current.fresh(hosts):
            return current
        made = issue(hosts)
        version = ((secret or {}).get("metadata") or {}).get("resourceVersion")
        body = _secret_body(namespace, secret_name, made, version)
        try:
            if secret is None:
                await api.create(Secret.path(namespace=namespace), body)
            else:
                await api.replace(path, body)
        except ApiError as exc:
            if exc.code == 409:
                continue  # another replica wrote one: use that
            raise
        log.info("made the %s certificate for %s (Secret %s/%s)", what, ", ".join(hosts), namespace, secret_name)
        return made
    raise RuntimeError(f"could not settle the {what} certificate in Secret {namespace}/{secret_name}")


def ssl_context(cert: ServingCert, client_ca: bytes | None = None) -> ssl.SSLContext:
    """A server context for `cert`; with `client_ca`, client certificates signed by it are
    verified when a client presents one (the aggregation layer's front proxy does)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # load_cert_chain reads files only: a private folder, gone right after.
    with tempfile.TemporaryDirectory(prefix="preemption-operator-cert-") as folder:
        cert_file, key_file = Path(folder, "tls.crt"), Path(folder, "tls.key")
        cert_file.write_bytes(cert.cert)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(cert.key)
        context.load_cert_chain(cert_file, key_file)
    if client_ca is not None:
        context.load_verify_locations(cadata=client_ca.decode())
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


async def keep(
    api: KubeApi,
    kind: Kind,
    name: str,
    want: dict[str, Any],
    update: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any] | None],
) -> None:
    """The cluster-scoped object `name` made as `want` if missing; else replaced by
    `update(want, have)` unless that says None (it is as wanted). Another writer's conflict is
    met by reading again (five tries)."""
    path = kind.path(name)
    for _ in range(5):
        try:
            have = await api.get(path)
        except ApiError as exc:
            if exc.code != 404:
                raise
            try:
                await api.create(kind.path(), want)
            except ApiError as created:
                if created.code == 409:
                    continue
                raise
            log.info("registered %s %s", kind.name, name)
            return
        body = update(want, have)
        if body is None:
            return
        try:
            await api.replace(path, body)
        except ApiError as exc:
            if exc.code == 409:
                continue
            raise
        log.info("updated %s %s", kind.name, name)
        return
