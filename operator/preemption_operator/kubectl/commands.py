"""The `list`, `stop` and `resume` commands (kueuectl's verbs, names, aliases and flags), parsing
their flags and printing; listing.py, control.py and cluster.py do the work."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from .listing import STATUSES

T = TypeVar("T")

ALIASES = {
    "cq": "clusterqueue",
    "clusterqueues": "clusterqueue",
    "lq": "localqueue",
    "localqueues": "localqueue",
    "workloads": "workload",
    "wl": "workload",
    "kwl": "workload",
    "kueueworkload": "workload",
    "kueueworkloads": "workload",
    "rf": "resourceflavor",
    "resourceflavors": "resourceflavor",
}


class _Aliased(click.Group):
    """Subcommands also answer to kueuectl's aliases and the plural."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, ALIASES.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        _, command, rest = super().resolve_command(ctx, args)
        return (command.name if command is not None else None), command, rest


def _with_cluster(work: Callable[[Any, str], Awaitable[T]]) -> T:
    """Runs `work(api, kubeconfig namespace)`; a missing kubeconfig or an API error is a message
    and exit status 1, never a traceback."""
    from ..k8s.api import ApiError, KubeApi, load_config
    from ..offline.manifests import ManifestError

    try:
        config = load_config()
    except Exception as exc:  # lightkube's ConfigError and friends
        click.echo(f"error: no usable kubeconfig: {exc}", err=True)
        sys.exit(1)

    async def run() -> T:
        api = KubeApi(config)
        try:
            return await work(api, config.namespace)
        finally:
            await api.close()

    try:
        return asyncio.run(run())
    except (ApiError, ManifestError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


NAMESPACE = click.option("--namespace", "-n", default=None, help="The namespace (default: the kubeconfig's).")
ALL_NAMESPACES = click.option("--all-namespaces", "-A", is_flag=True, help="Every namespace.")
SELECTOR = click.option("--selector", "-l", default=None, help="Only objects with these labels (kubectl's -l).")
NO_HEADERS = click.option("--no-headers", is_flag=True, help="No header row.")


def _print(table: Any, no_headers: bool, what: str, where: str = "") -> None:
    text = table.render(headers=not no_headers)
    if text:
        click.echo(text, nl=False)
    else:
        click.echo(f"No {what} found{where}.", err=True)


def _now() -> datetime:
    return datetime.now(UTC)


# -- list --------------------------------------------------------------------------------------


@click.group(name="list", cls=_Aliased)
def list_group() -> None:
    """List ClusterQueues, LocalQueues, Workloads or ResourceFlavors, with kueuectl's columns
    (workloads also with their preemption risk)."""


@list_group.command("clusterqueue")
@SELECTOR
@click.option("--active", type=click.BOOL, default=None, help="Only active (true) or inactive (false) ones.")
@NO_HEADERS
def list_cluster_queues(selector: str | None, active: bool | None, no_headers: bool) -> None:
    """ClusterQueues: cohort, pending and admitted workloads, active, age (alias: cq)."""
    from ..api import kinds
    from . import cluster, listing

    items = _with_cluster(lambda api, _: cluster.listed(api, kinds.ClusterQueue, selector=selector))
    _print(listing.cluster_queues(items, _now(), active), no_headers, "ClusterQueues")


@list_group.command("localqueue")
@NAMESPACE
@ALL_NAMESPACES
@click.option("--clusterqueue", "-c", default=None, help="Only those pointing at this ClusterQueue.")
@SELECTOR
@NO_HEADERS
def list_local_queues(
    namespace: str | None, all_namespaces: bool, clusterqueue: str | None, selector: str | None, no_headers: bool
) -> None:
    """LocalQueues: ClusterQueue, pending and admitted workloads, age (alias: lq)."""
    from ..api import kinds
    from . import cluster, listing

    async def work(api: Any, default: str) -> tuple[list[Any], str]:
        where = None if all_namespaces else namespace or default
        return await cluster.listed(api, kinds.LocalQueue, where, selector), where or ""

    items, where = _with_cluster(work)
    table = listing.local_queues(items, _now(), all_namespaces, clusterqueue)
    _print(table, no_headers, "LocalQueues", f" in namespace {where}" if where else "")


@list_group.command("workload")
@NAMESPACE
@ALL_NAMESPACES
@click.option("--clusterqueue", "-c", default=None, help="Only those admitted to this ClusterQueue.")
@click.option("--localqueue", "-q", default=None, help="Only those in this LocalQueue.")
@click.option(
    "--status",
    multiple=True,
    type=click.Choice(STATUSES, case_sensitive=False),
    help="Only workloads in this state (repeatable): all, pending, quotareserved, admitted, finished.",
)
@SELECTOR
@click.option(
    "--risk/--no-risk",
    default=True,
    show_default=True,
    help="The PREEMPTION RISK column: for each admitted workload, the pending ones that would take it and by which "
    "rule (one engine cycle on the whole cluster's state, with Kueue's default Configuration).",
)
@NO_HEADERS
def list_workloads(
    namespace: str | None,
    all_namespaces: bool,
    clusterqueue: str | None,
    localqueue: str | None,
    status: tuple[str, ...],
    selector: str | None,
    risk: bool,
    no_headers: bool,
) -> None:
    """Workloads: job, queues, status, position in queue, exec time, age and preemption risk
    (aliases: workloads, wl, kwl). Positions come from the visibility API, or from the engine's
    queue order over the same objects where the API is not served."""
    from ..api import kinds
    from ..k8s.api import ApiError
    from . import cluster, listing

    now = _now()
    notes: list[str] = []

    async def work(api: Any, default: str) -> tuple[Any, str]:
        where = None if all_namespaces else namespace or default
        items = await cluster.listed(api, kinds.Workload, where, selector)
        targets = {
            f"{lq['metadata'].get('namespace')}/{lq['metadata']['name']}": str(lq.get("spec", {}).get("clusterQueue"))
            for lq in await cluster.listed(api, kinds.LocalQueue)
        }
        waiting = {
            targets.get(f"{wl['metadata'].get('namespace')}/{(wl.get('spec') or {}).get('queueName')}", "")
            for wl in items
            if listing.workload_status(wl) == "pending"
        } - {""}
        objects = None
        try:
            positions = await cluster.served_positions(api, waiting)
        except ApiError as exc:
            notes.append(f"positions from the engine's queue order: the visibility API is not served ({exc})")
            objects = await cluster.engine_objects(api)
            positions = cluster.local_positions(objects, waiting)
        risks = None
        if risk and any(listing.workload_status(wl) in ("admitted", "quotaReserved") for wl in items):
            objects = objects if objects is not None else await cluster.engine_objects(api)
            risks = cluster.at_risk(objects, now)
        table = listing.workloads(
            items,
            targets,
            now,
            with_namespace=all_namespaces,
            positions=positions,
            risks=risks,
            statuses=status,
            cluster_queue=clusterqueue,
            local_queue=localqueue,
        )
        return table, where or ""

    table, where = _with_cluster(work)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    _print(table, no_headers, "Workloads", f" in namespace {where}" if where else "")


@list_group.command("resourceflavor")
@SELECTOR
@NO_HEADERS
def list_resource_flavors(selector: str | None, no_headers: bool) -> None:
    """ResourceFlavors: node labels, age (alias: rf)."""
    from ..api import kinds
    from . import cluster, listing

    items = _with_cluster(lambda api, _: cluster.listed(api, kinds.ResourceFlavor, selector=selector))
    _print(listing.resource_flavors(items, _now()), no_headers, "ResourceFlavors")


# -- stop and resume -----------------------------------------------------------------------------

DRY_RUN = click.option(
    "--dry-run",
    type=click.Choice(["none", "client", "server"]),
    default="none",
    show_default=True,
    help="client: only say what would change; server: the API server validates the change without storing it.",
)
KEEP = click.option(
    "--keep-already-running",
    is_flag=True,
    help="Hold: admit nothing new, but let the admitted workloads run (default: HoldAndDrain, which evicts them).",
)


def _change(name: str, namespace: str | None, dry_run: str, make: Callable[[str | None], Any]) -> None:
    from . import cluster

    async def work(api: Any, default: str) -> Any:
        change = make(namespace or default)
        await cluster.apply(api, change, dry_run)
        return change

    change = _with_cluster(work)
    click.echo(change.describe(dry_run))


def _verb(verb: str, help: str) -> click.Group:
    group = _Aliased(name=verb, help=help)
    stopping = verb == "stop"

    def add(target: str, doc: str, keep: bool, namespaced: bool) -> None:
        def command(
            name: str, namespace: str | None = None, keep_already_running: bool = False, dry_run: str = "none"
        ) -> None:
            from . import control

            def make(where: str | None) -> Any:
                if stopping:
                    return control.stop(target, name, where, keep_already_running)
                return control.resume(target, name, where)

            _change(name, namespace, dry_run, make)

        cmd = click.Command(target, callback=command, help=doc, params=[click.Argument(["name"])])
        if namespaced:
            NAMESPACE(cmd)
        if keep:
            KEEP(cmd)
        DRY_RUN(cmd)
        group.add_command(cmd)

    add(
        "clusterqueue",
        "Stop admitting to a ClusterQueue (spec.stopPolicy HoldAndDrain, or Hold with --keep-already-running)."
        if stopping
        else "Let a ClusterQueue admit again (spec.stopPolicy None).",
        stopping,
        False,
    )
    add(
        "localqueue",
        "Stop admitting from a LocalQueue (spec.stopPolicy HoldAndDrain, or Hold with --keep-already-running)."
        if stopping
        else "Let a LocalQueue admit again (spec.stopPolicy None).",
        stopping,
        True,
    )
    add(
        "workload",
        "Deactivate a workload (spec.active false: evicted if admitted, never admitted while so)."
        if stopping
        else "Activate a workload again (spec.active true).",
        False,
        True,
    )
    return group


stop = _verb("stop", "Stop a ClusterQueue, LocalQueue or Workload, as kueuectl does.")
resume = _verb("resume", "Resume a ClusterQueue, LocalQueue or Workload, as kueuectl does.")
