"""The dashboard (`run --dashboard-port`, off by default): one read-only page showing the cohort
tree with each ClusterQueue's nominal, borrowed and used quota, the pending workloads with their
positions, the recent preemptions (preemptor -> victim, rule, reason) and each PreemptionConfig's
FlapFree verdict, kept current without reloading (server-sent events).

Who may look is RBAC's answer for what it shows: a user logs in with a bearer token (a
TokenReview says who it is) and must be allowed to list ClusterQueues and Workloads in every
namespace and to read ClusterQueues' pending workloads through the visibility API (three
SubjectAccessReviews). A session is a random cookie; its user is checked again on every request
(answers kept ten seconds). Plain HTTP, bound to 127.0.0.1 by default: reach it with
`kubectl port-forward`, whose tunnel is the API server's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from ..api.quantity import format_amount
from ..api.visibility import GROUP as VISIBILITY_GROUP
from ..api.visibility import VERSION as VISIBILITY_VERSION
from ..engine import positions
from ..engine.cache import Cache
from ..k8s import delegation
from ..k8s.api import ApiError, KubeApi
from .timeline import Timeline

log = logging.getLogger(__name__)

COOKIE = "preemption-dashboard"
SESSION_SECONDS = 8 * 3600
PENDING_SHOWN = 20
"""Pending workloads listed per ClusterQueue (the count says how many more)."""
PUSH_SECONDS = 0.5
"""How often the state is looked at for changes (a preemption is pushed at once). One state is
built whatever the number of open pages."""
BUILD_SHARE = 0.1
"""The most of the event loop's time that building the state may take: the loop also schedules.
After a build that took d seconds the next waits at least d / BUILD_SHARE, so at a scale where a
build takes many milliseconds the page is refreshed less often instead of slowing decisions."""

REQUIRED = (
    delegation.Attributes("list", "kueue.x-k8s.io", "v1beta2", "clusterqueues"),
    delegation.Attributes("list", "kueue.x-k8s.io", "v1beta2", "workloads"),
    delegation.Attributes("get", VISIBILITY_GROUP, VISIBILITY_VERSION, "clusterqueues", "pendingworkloads"),
)
"""What a viewer must be allowed: the dashboard shows every queue and workload."""


@dataclass(frozen=True)
class DashboardSettings:
    port: int
    host: str = "127.0.0.1"


# -- what it shows ----------------------------------------------------------------------------


def _condition(obj: Any, kind: str) -> dict[str, Any] | None:
    for condition in ((obj.to_wire().get("status") or {}).get("conditions")) or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


_PREEMPTOR_UID = re.compile(r"\(UID: ([^,)]+)")
"""Kueue's preemption message names the preemptor by UID only."""


def _preemptions(cache: Cache, timeline: Timeline | None) -> list[dict[str, Any]]:
    """Newest first. A preemption read from a victim's status under classic preemption or fair
    sharing names its preemptor by UID: it is named by key while the cache has it."""
    items = [item.to_dict() for item in reversed(timeline.items)] if timeline is not None else []
    for item in items:
        if not item["preemptor"]:
            found = _PREEMPTOR_UID.search(item["message"])
            item["preemptor"] = (cache.workload_key(found[1]) or "") if found is not None else ""
    return items


def state(cache: Cache, timeline: Timeline | None, leading: bool = True, now: float | None = None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data (built from the cache, no I/O)."""
    tree = cache.tree()
    pending_by_queue = cache.pending_by_cluster_queue()
    queues = []
    for name, cq in sorted(tree.cluster_queues.items()):
        node = cq.node
        bars = []
        for fr in sorted(set(node.quotas) | set(node.usage)):
            flavor, resource = fr
            nominal = node.quotas[fr].nominal if fr in node.quotas else 0
            used = node.usage.get(fr, 0)
            borrowed = max(0, used - node.subtree_quota.get(fr, 0))
            bars.append(
                {
                    "flavor": flavor,
                    "resource": resource,
                    "nominal": nominal,
                    "used": used,
                    "borrowed": borrowed,
                    "shown": {
                        "nominal": format_amount(resource, nominal),
                        "used": format_amount(resource, used),
                        "borrowed": format_amount(resource, borrowed),
                    },
                }
            )
        ordered = pending_by_queue.get(name, [])
        pending = [
            {
                "workload": p.info.key,
                "localQueue": p.info.queue_name,
                "priority": p.info.priority,
                "positionInClusterQueue": p.in_cluster_queue,
                "positionInLocalQueue": p.in_local_queue,
            }
            for p in positions.in_cluster_queue(ordered, PENDING_SHOWN)
        ]
        queues.append(
            {
                "name": name,
                "cohort": cq.cohort or "",
                "active": cq.active,
                "inactiveReason": cq.inactive_reason,
                "admitted": len(cq.workloads),
                "pendingCount": len(ordered),
                "pending": pending,
                "quota": bars,
            }
        )
    cohorts = [
        {"name": name, "parent": node.parent.name if node.parent is not None else ""}
        for name, node in sorted(tree.cohorts.items())
    ]
    configs = []
    for name, config in sorted(cache.objects["PreemptionConfig"].items()):
        flap = _condition(config, "FlapFree")
        configs.append(
            {
                "name": name,
                "flapFree": (flap or {}).get("status", "Unknown"),
                "reason": (flap or {}).get("reason", ""),
                "message": (flap or {}).get("message", ""),
            }
        )
    preemptions = _preemptions(cache, timeline)
    return {
        "at": now if now is not None else time.time(),
        "cohorts": cohorts,
        "clusterQueues": queues,
        "preemptionConfigs": configs,
        "preemptions": preemptions,
        "leading": leading,
    }


class PageState:
    """The state every open page is sent, built once for all of them: again as soon as a
    preemption came, or once it is PUSH_SECONDS / 2 old, but never sooner after the last build
    than that build's cost allows (BUILD_SHARE). Encoded once per build."""

    def __init__(
        self,
        build: Callable[[], dict[str, Any]],
        version: Callable[[], int],
        clock: Callable[[], float],
        cost_clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`version`: the timeline's (a new preemption moves it); `clock`: the loop's time;
        `cost_clock`: what a build's cost is read on."""
        self._build, self._version, self._clock, self._cost_clock = build, version, clock, cost_clock
        self._built_at = -math.inf
        self._built_version = -1
        self._cost = 0.0
        self.content = ""
        """The state without its time, encoded: a page is sent the state when this changed."""
        self.message = ""
        """The whole state, encoded, as sent."""

    @property
    def behind(self) -> bool:
        """A preemption came since the last build."""
        return self._version() != self._built_version

    def hold_seconds(self) -> float:
        """How long until a build may start (0: now)."""
        return max(0.0, self._built_at + self._cost / BUILD_SHARE - self._clock())

    def current(self) -> PageState:
        """Builds the state again if it is due."""
        age = self._clock() - self._built_at
        if self.hold_seconds() == 0.0 and (self.behind or age >= PUSH_SECONDS / 2):
            version, started = self._version(), self._cost_clock()
            data = self._build()
            at = data.pop("at")
            self.content = json.dumps(data, sort_keys=True)
            self.message = f'{{"at": {json.dumps(at)}, {self.content[1:]}'
            self._cost = self._cost_clock() - started
            self._built_at, self._built_version = self._clock(), version
        return self


# -- who may look -----------------------------------------------------------------------------


class Gate:
    """Logins (token -> user), sessions (cookie -> user) and the RBAC check of a user."""

    def __init__(self, tokens: delegation.TokenAuthenticator, authorizer: delegation.Authorizer) -> None:
        self.tokens = tokens
        self.authorizer = authorizer
        self.sessions: dict[str, tuple[float, delegation.User]] = {}

    async def allowed(self, user: delegation.User) -> str | None:
        """None if the user may look, else what they may not do."""
        for attributes in REQUIRED:
            ok, why = await self.authorizer.allowed(user, attributes)
            if not ok:
                what = (
                    f"{attributes.resource}/{attributes.subresource}" if attributes.subresource else attributes.resource
                )
                return f'User "{user.name}" cannot {attributes.verb} {what} in API group "{attributes.group}"' + (
                    f": {why}" if why else ""
                )
        return None

    async def login(self, token: str) -> tuple[str | None, str]:
        """(session id, "") or (None, why not)."""
        user = await self.tokens.user(token)
        if user is None:
            return None, "the token is not valid"
        refused = await self.allowed(user)
        if refused is not None:
            return None, refused
        session = secrets.token_urlsafe(32)
        now = time.monotonic()
        self.sessions = {k: v for k, v in self.sessions.items() if v[0] > now}
        self.sessions[session] = (now + SESSION_SECONDS, user)
        log.info("dashboard: %s logged in", user.name)
        return session, ""

    async def user_of(self, request: web.Request) -> delegation.User | None:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            user = await self.tokens.user(header.removeprefix("Bearer ").strip())
        else:
            found = self.sessions.get(request.cookies.get(COOKIE, ""))
            user = found[1] if found is not None and found[0] > time.monotonic() else None
        if user is None or await self.allowed(user) is not None:
            return None
        return user


# -- the server -------------------------------------------------------------------------------


def _page(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(
    cache: Cache, timeline: Timeline | None, gate: Gate, leading: Callable[[], bool] = lambda: True
) -> web.Application:
    dashboard, login_page = _page("dashboard.html"), _page("dashboard_login.html")
    headers = {
        "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' "
        "'unsafe-inline'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }

    def login_form(message: str = "", status: int = 200) -> web.Response:
        text = login_page.replace("{{message}}", message.replace("&", "&amp;").replace("<", "&lt;"))
        return web.Response(text=text, content_type="text/html", status=status, headers=headers)

    async def index(request: web.Request) -> web.Response:
        if await gate.user_of(request) is None:
            return login_form()
        return web.Response(text=dashboard, content_type="text/html", headers=headers)

    async def login(request: web.Request) -> web.Response:
        form = await request.post()
        token = str(form.get("token") or "").strip()
        try:
            session, why = await gate.login(token) if token else (None, "give a token")
        except ApiError as exc:
            return login_form(f"could not check the token: {exc}", 503)
        if session is None:
            return login_form(f"Not logged in: {why}", 403)
        response = web.HTTPSeeOther("/")
        response.set_cookie(COOKIE, session, httponly=True, samesite="Strict", max_age=SESSION_SECONDS)
        raise response

    async def guarded(request: web.Request) -> delegation.User:
        try:
            user = await gate.user_of(request)
        except ApiError as exc:
            raise web.HTTPServiceUnavailable(text=f"could not check access: {exc}") from None
        if user is None:
            raise web.HTTPUnauthorized(text="log in first (or send Authorization: Bearer <token>)")
        return user

    page = PageState(
        lambda: state(cache, timeline, leading()),
        lambda: timeline.version if timeline is not None else 0,
        lambda: asyncio.get_running_loop().time(),
    )

    async def snapshot(request: web.Request) -> web.Response:
        await guarded(request)
        return web.Response(
            text=page.current().message, content_type="application/json", headers={"Cache-Control": "no-store"}
        )

    async def events(request: web.Request) -> web.StreamResponse:
        """Server-sent events: the state each time it changes (a new preemption at once)."""
        await guarded(request)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        clock = asyncio.get_running_loop()
        sent, checked = "", clock.time()
        while True:
            # Taken before the state is built: a preemption from here on wakes the wait below.
            changed = timeline.changed if timeline is not None else None
            page.current()
            if page.content != sent:
                try:
                    await response.write(f"data: {page.message}\n\n".encode())
                except ConnectionError:  # the page was closed
                    return response
                sent = page.content
            if clock.time() - checked >= delegation.TTL_SECONDS:  # rights taken away end the stream
                try:
                    if await gate.user_of(request) is None:
                        return response
                except ApiError:
                    return response
                checked = clock.time()
            hold = page.hold_seconds()
            if page.behind:
                await asyncio.sleep(hold)  # a preemption held back by the last build's cost
            elif changed is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), max(PUSH_SECONDS, hold))
            else:
                await asyncio.sleep(max(PUSH_SECONDS, hold))

    async def logout(_: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/")
        response.del_cookie(COOKIE)
        raise response

    app = web.Application(client_max_size=64 * 1024)
    app.router.add_get("/", index)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/state", snapshot)
    app.router.add_get("/events", events)
    return app


async def serve(
    api: KubeApi, settings: DashboardSettings, cache: Cache, timeline: Timeline | None, leading: Callable[[], bool]
) -> web.AppRunner:
    gate = Gate(delegation.TokenAuthenticator(api), delegation.Authorizer(api))
    runner = web.AppRunner(make_app(cache, timeline, gate, leading), access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    log.info("serving the dashboard on http://%s:%d", settings.host, settings.port)
    return runner
