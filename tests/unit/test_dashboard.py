"""The dashboard's data, its gate and its stream (issue 31, item 4), without a browser: what the
page is given (bars, cohort tree, positions, preemptions, lint verdicts), who is let in (a token
TokenReview knows, RBAC allowing every part shown), and the push of a new preemption."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from builders import admitted, cache_of, cluster_queue, cohort, cycle_applied, pending, preemption_config, scenario
from preemption_operator.api import kinds
from preemption_operator.controller import dashboard
from preemption_operator.controller.feeder import CacheFeeder
from preemption_operator.controller.timeline import Preemption, Timeline
from preemption_operator.engine.cache import Cache
from preemption_operator.engine.limits import PastPreemption
from preemption_operator.k8s import delegation


def setup() -> Any:
    return cache_of(
        scenario(
            [cluster_queue("a", 2, cohort="team", borrowing_limit=None), cluster_queue("b", 2, cohort="team")],
            admitted("one", "a", 2),
            admitted("two", "a", 1),  # one cpu borrowed from b
            pending("wait-low", "a", 1, priority=1),
            pending("wait-high", "a", 1, priority=5),
            cohorts=[cohort("team", parent="org"), cohort("org")],
            extra=[preemption_config("guard")],
        )
    )


def preemption(victim: str, at: float = 100.0) -> Preemption:
    return Preemption(at, "default/x", "a", victim, "a", "InClusterQueue", "", "Preempted to accommodate ...")


def test_the_state_has_the_bars_the_tree_the_positions_and_the_preemptions() -> None:
    timeline = Timeline()
    timeline.add(preemption("default/old", 1.0))
    timeline.add(preemption("default/new", 2.0))
    data = dashboard.state(setup(), timeline, now=5.0)
    queues = {q["name"]: q for q in data["clusterQueues"]}
    (bar,) = queues["a"]["quota"]
    assert (bar["flavor"], bar["resource"], bar["nominal"], bar["used"], bar["borrowed"]) == (
        "default",
        "cpu",
        2000,
        3000,
        1000,
    )
    assert bar["shown"] == {"nominal": "2", "used": "3", "borrowed": "1"}
    assert queues["a"]["cohort"] == "team" and queues["a"]["admitted"] == 2
    assert [(p["workload"], p["positionInClusterQueue"]) for p in queues["a"]["pending"]] == [
        ("default/wait-high", 0),
        ("default/wait-low", 1),
    ]
    assert {c["name"]: c["parent"] for c in data["cohorts"]} == {"org": "", "team": "org"}
    assert data["preemptionConfigs"] == [{"name": "guard", "flapFree": "Unknown", "reason": "", "message": ""}]
    assert [p["victim"] for p in data["preemptions"]] == ["default/new", "default/old"]  # newest first
    follower = dashboard.state(setup(), timeline, leading=False)
    assert [p["victim"] for p in follower["preemptions"]] == ["default/new", "default/old"]
    assert follower["leading"] is False


def test_a_standby_shows_the_preemptions_the_victims_statuses_record() -> None:
    """Only the leader decides, but `kubectl port-forward deploy/...` may reach a standby: its
    timeline is filled from the Workloads as they come in, the preemptor named by its UID."""
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("low", "cq", 4, priority=0),
        pending("high", "cq", 4, priority=10),
    )
    _, made, statuses = cycle_applied(objects)
    assert [c.action for c in made] == ["Preempted", "Pending"]  # the preemptor waits for the room
    victim = next(b for b in objects if b["metadata"]["name"] == "low")
    victim = {**victim, "metadata": {**victim["metadata"], "resourceVersion": "7"}, "status": statuses["default/low"]}
    timeline = Timeline()
    cache = Cache()
    feeder = CacheFeeder(cache, Waker())
    feeder.preempted = timeline.observe
    for body in objects:
        feeder.ingest(body["kind"], victim if body["metadata"]["name"] == "low" else body)
    (shown,) = dashboard.state(cache, timeline, leading=False)["preemptions"]
    assert (shown["preemptor"], shown["victim"], shown["reason"], shown["victim_cluster_queue"]) == (
        "default/high",
        "default/low",
        "InClusterQueue",
        "cq",
    )
    assert shown["message"].startswith("Preempted to accommodate a workload (UID: ")
    # A list showing the same status again adds nothing.
    again = {**victim, "metadata": {**victim["metadata"], "resourceVersion": "9"}}  # parsed again
    listed = [b for b in objects if b["kind"] == "Workload" and b["metadata"]["name"] != "low"] + [again]
    feeder.replace(kinds.Workload, listed, "9")
    assert len(timeline.items) == 1


def test_a_victim_preempted_again_by_the_same_preemptor_is_listed_twice() -> None:
    """The message is the same (Kueue's names the preemptor by UID): the time tells them apart."""
    timeline = Timeline()
    first, second = preemption("default/low", 1.0), preemption("default/low", 5.0)
    timeline.add(first)
    timeline.add(second)
    assert timeline.items == [first, second]


async def test_the_leader_shows_each_preemption_it_writes_once_with_the_preemptor_by_key() -> None:
    """Every replica reads preemptions from the victims' statuses, the leader too: the answer to
    its own eviction write comes in before the leader adds what it wrote, and both are one
    entry, kept with what the leader knows (the preemptor by key, not the UID of the message)."""
    import copy

    from preemption_operator.controller.metrics import Metrics
    from preemption_operator.controller.scheduling import Scheduling
    from preemption_operator.k8s.writer import StatusWriter
    from unit.fake_api import FakeApi

    class Events:
        def record(self, *args: Any) -> None:
            pass

    api = FakeApi()
    for body in scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("low", "cq", 4, priority=0),
        pending("high", "cq", 4, priority=10),
    ):
        api.put(body)
    timeline = Timeline()
    cache = Cache()
    s = Scheduling.build(
        cache, StatusWriter(api, fence=lambda: True), Events(), Metrics(), lambda: True, timeline=timeline
    )  # type: ignore[arg-type]
    s.feeder.preempted = timeline.observe
    for body in list(api.objects.values()):
        s.feeder.ingest(body["kind"], copy.deepcopy(body))
    s.loop.cycle()
    await s.decisions.idle()
    victim = api.objects[kinds.Workload.path("low", "default")]
    (shown,) = timeline.items
    assert (shown.victim, shown.preemptor) == ("default/low", "default/high")
    preempted = next(c for c in victim["status"]["conditions"] if c["type"] == "Preempted")
    assert shown.condition_at == datetime.fromisoformat(preempted["lastTransitionTime"]).timestamp()
    assert shown.at >= shown.condition_at  # when it was written, not only to the second
    # Its echo, or a list showing it again, adds nothing.
    again = copy.deepcopy(victim)
    again["metadata"]["resourceVersion"] = "999"
    s.feeder.ingest("Workload", again)
    assert len(timeline.items) == 1 and timeline.items[0].preemptor == "default/high"


def test_a_preemption_read_from_a_status_is_shown_while_this_replica_leads() -> None:
    """A new leader shows what its predecessor wrote last, even when the Workload comes in after
    it took over (before, a leader read no status: those were missing from its dashboard)."""
    timeline = Timeline()
    past = PastPreemption(datetime(2026, 12, 4, tzinfo=UTC), "default/low", "cq", None, "cq", "InClusterQueue")
    timeline.observe(past)
    assert [(p.victim, p.at) for p in timeline.items] == [("default/low", past.at.timestamp())]
    timeline.add(preemption("default/low", past.at.timestamp()))  # another message: another one
    assert len(timeline.items) == 2


def test_the_timeline_keeps_the_newest_in_time_order_once_each() -> None:
    timeline = Timeline(kept=2)
    for victim, at in (("default/b", 2.0), ("default/a", 1.0), ("default/c", 3.0)):
        timeline.add(preemption(victim, at))
    assert [p.victim for p in timeline.items] == ["default/b", "default/c"]  # oldest dropped
    version = timeline.version
    timeline.add(preemption("default/a", 1.0))  # a list brings the dropped one again: too old
    timeline.add(preemption("default/c", 3.0))  # kept already
    assert [p.victim for p in timeline.items] == ["default/b", "default/c"] and timeline.version == version


class Waker:
    def poke(self) -> None:
        pass

    def quota_released(self, cluster_queue: str) -> None:
        pass

    def config_changed(self) -> None:
        pass


class ReviewApi:
    """TokenReviews (tokens: token -> user) and SubjectAccessReviews (allowed users)."""

    def __init__(self, tokens: dict[str, str], allowed: set[str]) -> None:
        self.tokens, self.allowed, self.asked = tokens, allowed, 0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if path == delegation.TOKEN_REVIEWS:
            user = self.tokens.get(body["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user:
                status["user"] = {"username": user, "groups": ["system:authenticated"]}
            return {**body, "status": status}
        return {**body, "status": {"allowed": body["spec"]["user"] in self.allowed}}


CLOCK = [0.0]


def client(api: ReviewApi, timeline: Timeline | None = None) -> TestClient:
    tokens = delegation.TokenAuthenticator(api, clock=lambda: CLOCK[0])  # type: ignore[arg-type]
    gate = dashboard.Gate(tokens, delegation.Authorizer(api, clock=lambda: CLOCK[0]))  # type: ignore[arg-type]
    return TestClient(TestServer(dashboard.make_app(setup(), timeline or Timeline(), gate)))


async def test_only_a_token_whose_user_rbac_allows_gets_in() -> None:
    api = ReviewApi({"good": "alice", "meh": "bob"}, allowed={"alice"})
    async with client(api) as web:
        page = await web.get("/")
        assert page.status == 200 and "log in" in await page.text()
        assert (await web.get("/state")).status == 401
        refused = await web.post("/login", data={"token": "nope"}, allow_redirects=False)
        assert refused.status == 403 and "the token is not valid" in await refused.text()
        refused = await web.post("/login", data={"token": "meh"}, allow_redirects=False)
        assert refused.status == 403
        assert "User &quot;bob&quot; cannot list clusterqueues" in (await refused.text()).replace('"', "&quot;")
        assert (await web.get("/state", headers={"Authorization": "Bearer meh"})).status == 401
        let_in = await web.post("/login", data={"token": "good"}, allow_redirects=False)
        assert let_in.status == 303 and dashboard.COOKIE in let_in.cookies
        assert let_in.cookies[dashboard.COOKIE]["httponly"]
        page = await web.get("/")
        assert "<title>preemption-operator</title>" in await page.text()
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        state = await web.get("/state")
        assert state.status == 200 and {q["name"] for q in (await state.json())["clusterQueues"]} == {"a", "b"}
        # A bearer token works without a session (curl).
        assert (await web.get("/state", headers={"Authorization": "Bearer good"}, cookies={})).status == 200
        # alice's rights go: her session shows nothing more once the kept answer is ten seconds old.
        api.allowed.clear()
        assert (await web.get("/state")).status == 200
        CLOCK[0] += 10.5
        assert (await web.get("/state")).status == 401


async def test_a_new_preemption_is_pushed_at_once() -> None:
    api = ReviewApi({"good": "alice"}, allowed={"alice"})
    timeline = Timeline()
    async with client(api, timeline) as web:
        stream = await web.get("/events", headers={"Authorization": "Bearer good"})
        assert stream.headers["Content-Type"] == "text/event-stream"

        async def event() -> dict[str, Any]:
            while True:
                line = (await stream.content.readline()).decode()
                if line.startswith("data: "):
                    data: dict[str, Any] = json.loads(line.removeprefix("data: "))
                    return data

        first = await asyncio.wait_for(event(), 10)
        assert first["preemptions"] == []
        timeline.add(preemption("default/one"))
        pushed = await asyncio.wait_for(event(), 10)
        assert [p["victim"] for p in pushed["preemptions"]] == ["default/one"]
        stream.close()


@pytest.mark.looptime
async def test_the_stream_ends_when_the_viewers_rights_are_taken_away() -> None:
    api = ReviewApi({"good": "alice"}, allowed={"alice"})
    async with client(api) as web:
        stream = await web.get("/events", headers={"Authorization": "Bearer good"})
        assert (await stream.content.readline()).startswith(b"data: ")
        api.allowed.clear()
        CLOCK[0] += 10.5  # the kept answers expire
        async with asyncio.timeout(60):  # fake time: the stream looks again after ten seconds
            rest = await stream.content.read()
        assert rest.strip() == b""  # ended, nothing more sent


class Builds:
    """A state whose build takes `cost` seconds of loop time, counted as it is built."""

    def __init__(self, cost: float) -> None:
        self.now = 0.0
        self.version = 0
        self.cost = cost
        self.built: list[tuple[float, int]] = []  # (when it started, the version it showed)

    def build(self) -> dict[str, Any]:
        self.built.append((self.now, self.version))
        self.now += self.cost
        return {"at": self.now, "version": self.version, "built": len(self.built)}

    def page(self) -> dashboard.PageState:
        return dashboard.PageState(self.build, lambda: self.version, lambda: self.now, lambda: self.now)


def test_a_preemption_is_built_at_once_when_builds_are_cheap_and_the_state_sent_is_encoded_once() -> None:
    builds = Builds(cost=0.001)
    page = builds.page().current()
    assert json.loads(page.message) == {"at": 0.001, "version": 0, "built": 1}
    assert json.loads(page.content) == {"version": 0, "built": 1}  # what a page compares: no time
    builds.now += 0.01  # ten times the build's cost: the loop has had its share
    builds.version += 1
    assert page.behind and page.hold_seconds() == 0
    assert json.loads(page.current().message)["version"] == 1
    assert not page.behind
    builds.now += 0.1  # nothing new and not a quarter second old: not built again
    assert page.current().content == json.dumps({"built": 2, "version": 1}, sort_keys=True)
    builds.now += 0.2
    assert json.loads(page.current().content)["built"] == 3


def test_a_costly_build_holds_the_next_back_even_for_a_new_preemption() -> None:
    builds = Builds(cost=0.3)  # a very large cluster's build
    page = builds.page().current()
    builds.now += 0.5
    builds.version += 1
    # The next may start 3 s (0.3 / BUILD_SHARE) after the last one ended, 2.5 s from now.
    assert page.behind and page.hold_seconds() == pytest.approx(0.3 / dashboard.BUILD_SHARE - 0.5)
    assert json.loads(page.current().content)["version"] == 0  # held back: the old state still
    builds.now += page.hold_seconds() + 1e-9
    assert json.loads(page.current().content)["version"] == 1
    assert [version for _, version in builds.built] == [0, 1]


@given(
    cost=st.floats(min_value=0.0001, max_value=2.0),
    steps=st.lists(st.tuples(st.floats(min_value=0.0, max_value=1.0), st.booleans()), min_size=1, max_size=60),
)
def test_building_takes_at_most_its_share_of_the_loop(cost: float, steps: list[tuple[float, bool]]) -> None:
    """Whatever comes (preemptions as often as the page asks, a page asking all the time), the
    builds take no more than BUILD_SHARE of the time since the first one, plus the last one."""
    builds = Builds(cost)
    page = builds.page()
    for pause, preempted in steps:
        builds.now += pause
        builds.version += preempted
        page.current()
    spent = cost * len(builds.built)
    assert spent <= dashboard.BUILD_SHARE * (builds.now - builds.built[0][0]) + cost + 1e-9
