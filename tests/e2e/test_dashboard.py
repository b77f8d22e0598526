"""The dashboard in a real browser (issue 31, items 4 and 5): headless Chromium (Debian's package,
driven over the DevTools protocol) logs in with a bearer token, sees the cohort tree, the quota
bars, the pending positions and the PreemptionConfigs of a scenario, and sees a preemption
appear, without reloading, within a second of the operator writing it. A token whose user RBAC
does not allow is refused. The screenshot is kept in test-artifacts/dashboard.png.

Chromium comes from hack/setup-chromium.sh (make test runs it); without it this test skips,
and fails in CI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builders import CONFIG_ANNOTATION, cluster_queue, cohort, lower_priority_config, pending, quota
from preemption_operator.testing.browser import Browser, find_chromium, poll
from preemption_operator.testing.control_plane import ControlPlane, free_port
from preemption_operator.testing.operator_process import OperatorPool

from .conftest import in_ci
from .scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO_ROOT / "test-artifacts" / "dashboard.png"


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        problem = "no chromium: run hack/setup-chromium.sh (it installs Debian's chromium package when it can)"
        if in_ci():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return found


def log_in(token: str) -> str:
    return f"document.getElementById('token').value = {json.dumps(token)};document.querySelector('form').submit(); true"


async def test_dashboard_in_a_browser(
    scenario: Scenario, cluster: ControlPlane, operators: OperatorPool, chromium: str
) -> None:
    """Shows the queues of a scenario, and a preemption within a second, in a real browser."""
    sc, ns = scenario, scenario.namespace
    # Short names (the screenshot is the README's); sc.apply labels them for the cleanup.
    ml, config = "ml", "ml-protection"
    a, b, solo, flavor = "training", "inference", "batch", "on-demand"
    sc.apply(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}},
        cohort(ml, cpu={flavor: quota(2)}),
        lower_priority_config(config),
        cluster_queue(a, 2, flavor=flavor, cohort=ml, borrowing_limit=0, within="LowerPriority",
                      annotations={CONFIG_ANNOTATION: config}),
        cluster_queue(b, 2, flavor=flavor, cohort=ml),
        cluster_queue(solo, 1, flavor=flavor),
        *(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": q, "namespace": ns}, "spec": {"clusterQueue": q}}
            for q in (a, b, solo)
        ),
    )  # fmt: skip
    port = free_port()
    op = operators.start(extra_args=[f"--dashboard-port={port}"])
    sc.apply(pending("low", a, 1, priority=1, namespace=ns), pending("other", a, 1, priority=2, namespace=ns))
    sc.apply(*(pending(f"serve-{i}", b, 1, namespace=ns) for i in (1, 2, 3)))  # one borrowed from the cohort
    sc.apply(pending("busy", solo, 1, namespace=ns))
    sc.wait_admitted("low", "other", "busy", "serve-1", "serve-2", "serve-3", diagnostics=op.tail)
    sc.apply(pending("next-1", solo, 1, priority=3, namespace=ns), pending("next-2", solo, 1, namespace=ns))

    # A user RBAC does not let see the queues: a ServiceAccount of this namespace, with no roles.
    sc.kubectl("create", "serviceaccount", "viewer", "-n", ns)
    viewer = sc.kubectl("create", "token", "viewer", "-n", ns).stdout.strip()

    async with Browser(chromium) as browser:
        url = f"http://127.0.0.1:{port}/"
        await browser.open(url)
        assert await browser.evaluate("document.title") == "preemption-operator: log in"
        await browser.evaluate(log_in(viewer), navigates=True)
        refused = await browser.evaluate("document.getElementById('message').textContent")
        assert refused.startswith(f'Not logged in: User "system:serviceaccount:{ns}:viewer" cannot list clusterqueues')
        await browser.evaluate(log_in(cluster.token), navigates=True)
        assert await browser.evaluate("document.title") == "preemption-operator"

        async def shown() -> dict[str, Any]:
            view: dict[str, Any] = await browser.evaluate(
                """({
                  queues: [...document.querySelectorAll('[data-cq]')].map(e => e.dataset.cq),
                  inCohort: [...document.querySelectorAll('[data-cohort] [data-cq]')].map(e => e.dataset.cq),
                  pending: [...document.querySelectorAll('[data-cq] tr[data-pending]')].map(
                    r => [r.closest('[data-cq]').dataset.cq, r.dataset.pending, r.cells[0].textContent]),
                  bars: [...document.querySelectorAll('[data-cq] [data-resource]')].map(
                    e => [e.closest('[data-cq]').dataset.cq, e.textContent]),
                  configs: [...document.querySelectorAll('[data-config]')].map(e => e.textContent),
                  live: document.getElementById('live').textContent,
                })"""
            )
            assert {a, b, solo} <= set(view["queues"]), view
            assert {a, b} <= set(view["inCohort"]) and solo not in view["inCohort"], view
            assert [p for p in view["pending"] if p[0] == solo] == [
                [solo, f"{ns}/next-1", "0"],
                [solo, f"{ns}/next-2", "1"],
            ], view
            assert [solo, f"{flavor} / cpu: 1 used of 1"] in view["bars"], view
            assert [b, f"{flavor} / cpu: 3 used of 2, 1 borrowed"] in view["bars"], view
            assert any(c.startswith(config) and "FlapFree=" in c for c in view["configs"]), view
            assert view["live"] == "live"
            return view

        await poll(shown, what="the scenario's queues on the page")
        await browser.evaluate("window.marker = 'same page'")  # a reload would lose it

        # A preemption: urgent needs low's place in training (which may not borrow; its LowerPriority
        # policy and urgent's higher priority).
        sc.apply(pending("urgent", a, 1, priority=10, namespace=ns))

        async def preemption() -> list[Any]:
            found: list[Any] = await browser.evaluate(
                f"""[...document.querySelectorAll('[data-victim="{ns}/low"]')].map(e => {{
                    const key = `${{e.dataset.preemptor}}>${{e.dataset.victim}}@${{e.dataset.at}}`;
                    return [e.dataset.preemptor, e.textContent, Number(e.dataset.at), window.seen[key]];
                }})"""
            )
            return found

        async def debug() -> str:
            return str(await browser.evaluate("document.getElementById('timeline').textContent")) + op.tail()

        try:
            (row,) = await poll(preemption, what="the preemption on the page")
        except AssertionError:
            raise AssertionError(await debug()) from None
        preemptor, text, decided, seen = row
        assert preemptor == f"{ns}/urgent"
        assert "InClusterQueue" in text
        assert seen - decided <= 1.0, f"shown {seen - decided:.2f}s after it was written"
        assert await browser.evaluate("window.marker") == "same page"
        assert not [line for line in browser.console if line.startswith("uncaught")], browser.console

        async def settled() -> bool:
            # For the screenshot: urgent admitted, and lint's verdict on the config in.
            return bool(
                await browser.evaluate(
                    f"""!document.querySelector('[data-pending="{ns}/urgent"]')
                        && !document.querySelector('[data-config] .flap.Unknown')"""
                )
            )

        await poll(settled, what="urgent admitted and the config analysed")
        shot = await browser.screenshot(SCREENSHOT)
        assert shot.stat().st_size > 10_000
