"""The operator end to end: `preemption-operator run` against a real kube-apiserver and etcd.

Each test has its own namespace, uniquely named ClusterQueues and its own operator process(es)
(see preemption_operator.testing.operator_process); nothing waits a fixed time: every wait polls with a timeout.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from builders import (
    CONFIG_ANNOTATION,
    KUEUE,
    KUEUE_ALPHA,
    NO_CLASSIC_PREEMPTION,
    WorkloadBuilder,
    cluster_queue,
    lower_priority_config,
    workload,
)
from preemption_operator.testing.control_plane import ControlPlane
from preemption_operator.testing.operator_process import OperatorPool, operator_command, wait_until
from preemption_operator.testing.workload_status import condition, is_true

from .scenario import (
    TEST_LABEL,
    Scenario,
    WorkloadMonitor,
    describe_conditions,
    describe_events,
    described,
    within_cluster_queue_priority,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

ADMITTED = "preemption_operator_admitted_workloads_total"
PREEMPTED = "preemption_operator_preempted_workloads_total"
EVICTED = "preemption_operator_evicted_workloads_total"
LEADER = "preemption_operator_leader"


def lease_holder(cluster: ControlPlane, name: str, namespace: str = "default") -> str | None:
    lease = json.loads(cluster.kubectl("get", "lease", name, "-n", namespace, "-o", "json", check=True).stdout)
    holder: str | None = (lease.get("spec") or {}).get("holderIdentity")
    return holder


# ---- scenarios -----------------------------------------------------------------------------------


def test_within_cluster_queue_priority(scenario: Scenario, operators: OperatorPool) -> None:
    op = operators.start()
    outcome = within_cluster_queue_priority(scenario, operators.diagnostics)
    cq = outcome["cq"]

    # /metrics: the counters of what happened, with Kueue's labels; and the probes.
    assert op.get("/healthz")[0] == 200
    assert op.get("/readyz")[0] == 200
    assert op.metric(ADMITTED, cluster_queue=cq) == 4  # low, mid, high, then incoming
    assert op.metric(PREEMPTED, preempting_cluster_queue=cq, reason="InClusterQueue") == 1
    assert op.metric(EVICTED, cluster_queue=cq, reason="Preempted", underlying_cause="") == 1
    assert op.metric(LEADER) == 1
    assert op.cycles() > 0

    # Kueue's own families, names and labels: Kueue's dashboards and alerts read them unchanged.
    role = {"replica_role": "leader"}
    assert op.metric("kueue_admitted_workloads_total", cluster_queue=cq, priority_class="", **role) == 4
    assert (
        op.metric("kueue_preempted_workloads_total", preempting_cluster_queue=cq, reason="InClusterQueue", **role) == 1
    )
    assert (
        op.metric(
            "kueue_evicted_workloads_total",
            cluster_queue=cq,
            reason="Preempted",
            underlying_cause="",
            priority_class="",
            **role,
        )
        == 1
    )
    quota = {"cohort": "", "cluster_queue": cq, "flavor": scenario.flavor, "resource": "cpu", **role}

    def gauges() -> bool:
        assert op.metric("kueue_cluster_queue_nominal_quota", **quota) == 6
        assert op.metric("kueue_cluster_queue_resource_usage", **quota) == 6  # mid, high, incoming
        assert op.metric("kueue_reserving_active_workloads", cluster_queue=cq, **role) == 3
        assert op.metric("kueue_pending_workloads", cluster_queue=cq, status="inadmissible", **role) == 1  # low
        assert op.metric("kueue_cluster_queue_status", cluster_queue=cq, status="active", **role) == 1
        return True

    wait_until(gauges, what="Kueue's queue gauges", diagnostics=op.tail)

    # The API server names our writes' field manager after our User-Agent ("unknown" without one).
    shown = scenario.kubectl(
        "get", "workload", "incoming", "-n", scenario.namespace, "-o", "json", "--show-managed-fields"
    )
    fields = json.loads(shown.stdout)["metadata"]["managedFields"]
    managers = {f["manager"] for f in fields if f.get("subresource") == "status"}
    assert managers == {"preemption-operator"}, managers
    assert op.stop() == 0, op.tail()
    assert "Traceback" not in op.log(), op.tail()


def test_hero_job_configurable_preemption(scenario: Scenario, operators: OperatorPool) -> None:
    """A PreemptionConfig lets a hero ClusterQueue preempt a lower-priority workload that another
    ClusterQueue of its cohort runs within its nominal quota (classic preemption never would)."""
    sc, ns = scenario, scenario.namespace
    cohort, config = sc.name("org"), sc.name("hero-config")
    sc.apply(
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": cohort}, "spec": {}},
        lower_priority_config(config),
    )
    team_cq, team = sc.queue("team", 4, cohort=cohort)
    hero_cq, hero = sc.queue(
        "hero", 0, cohort=cohort, preemption=NO_CLASSIC_PREEMPTION, annotations={CONFIG_ANNOTATION: config}
    )
    op = operators.start()

    with WorkloadMonitor(sc.cluster, ns) as monitor:
        sc.apply(
            workload("batch", namespace=ns, queue=team, cpu=2, priority=100),
            workload("standard", namespace=ns, queue=team, cpu=2, priority=1000),
        )
        monitor.wait_seen(["batch", "standard"])
        sc.wait_admitted("batch", "standard", diagnostics=operators.diagnostics)
        sc.apply(workload("hero-job", namespace=ns, queue=hero, cpu=2, priority=100000))
        wls = sc.wait_admitted("hero-job", diagnostics=operators.diagnostics)
        wait_until(lambda: is_true(sc.workload("batch"), "Evicted"), what="batch evicted")

    message = f"Preempted by {ns}/hero-job because of preemption config {config} rule hero-preempt-lower-priority/0"
    conditions = {c["Type"]: c for c in describe_conditions(sc.describe("batch"))}
    assert described(conditions["Evicted"]) == ("True", "Preempted", message)
    assert described(conditions["Preempted"]) == ("True", "ConfigurablePreemption", message)
    batch = sc.workload("batch")
    assert batch["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": config, "count": 1}
    ]
    assert not is_true(batch, "QuotaReserved")  # the cohort has no free cpu left for it

    assert wls["hero-job"]["status"]["admission"]["clusterQueue"] == hero_cq
    assert is_true(sc.workload("standard"), "Admitted")  # eligible, but not needed
    assert not monitor.ever_true("standard", "Evicted")
    assert monitor.max_evictions("batch") == 1
    assert monitor.max_admitted_cpu(team_cq, hero_cq) <= 4  # the cohort's quota

    assert op.metric(PREEMPTED, preempting_cluster_queue=hero_cq, reason="ConfigurablePreemption") == 1
    assert op.metric(EVICTED, cluster_queue=team_cq, reason="Preempted", underlying_cause=config) == 1
    assert op.metric(ADMITTED, cluster_queue=hero_cq) == 1

    # The config's status names the ClusterQueue that uses it.
    def config_status() -> dict[str, Any]:
        status: dict[str, Any] = sc.get("preemptionconfigs", config, namespaced=False).get("status") or {}
        assert status.get("clusterQueues") == [hero_cq], status
        return status

    status = wait_until(config_status, what="the PreemptionConfig status")
    assert (condition({"status": status}, "Valid") or {}).get("status") == "True"


def _engine_places_topology() -> bool:
    """Whether the engine does topology-aware placement: the topology-defragmentation example
    preempts `small-a` only if it does."""
    example = REPO_ROOT / "examples" / "topology-defragmentation"
    proc = subprocess.run(
        [*operator_command(), "simulate", str(example), "--output", "json", "--now", "2026-01-01T12:00:00Z"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    actions = json.loads(proc.stdout)["actions"]
    return any(a["action"] == "Preempted" and a["workload"] == "training/small-a" for a in actions)


RACK = "cloud.provider.com/topology-rack"
HOSTNAME = "kubernetes.io/hostname"
NODE_GROUP = "cloud.provider.com/node-group"
NODE_COUNT = "example.com/node-count"


def test_topology_defragmentation(scenario: Scenario, operators: OperatorPool) -> None:
    """examples/topology-defragmentation on a cluster: two small jobs on different racks fragment
    them; a job that needs a whole rack preempts the most recently admitted small one (quota fits,
    the topology does not) and is admitted on the rack that frees up."""
    # What the cluster run below needs of the engine, checked offline first for a clearer failure.
    assert _engine_places_topology(), "simulate of examples/topology-defragmentation does not preempt small-a"
    sc, ns = scenario, scenario.namespace
    group, topology, flavor, config = sc.name("tas"), sc.name("racks"), sc.name("tas-flavor"), sc.name("defrag")
    node = {f"{rack}{i}": sc.name(f"node-{rack}{i}") for rack in "ab" for i in (1, 2)}
    rack_of = {name: sc.name(f"rack-{key[0]}") for key, name in node.items()}
    sc.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOSTNAME}]},
        },
        *(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {HOSTNAME: name, RACK: rack_of[name], NODE_GROUP: group}},
                "spec": {},
                "status": {
                    "capacity": {"cpu": "4", "pods": "110"},
                    "allocatable": {"cpu": "4", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
            for name in node.values()
        ),
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            # These Nodes have no kubelet, so they keep the not-ready taint the API server gives a
            # new Node; TAS (Kueue's, and the operator's) keeps pods off taints they do not tolerate.
            "spec": {
                "nodeLabels": {NODE_GROUP: group},
                "topologyName": topology,
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": KUEUE_ALPHA,
            "kind": "PreemptionConfig",
            "metadata": {"name": config},
            "spec": {
                "rules": [
                    {
                        "name": "evict-smaller-jobs-for-large-topology",
                        "activationPolicy": {"trigger": "QuotaFeasibleAndInsufficientTopology"},
                        "candidateSelectors": [
                            {
                                "scope": "AnyClusterQueue",
                                "priority": {"mode": "Base", "comparison": "LessThanOrEqual"},
                                "numericLabels": [{"key": NODE_COUNT, "comparison": "LessThan", "fallbackValue": 0}],
                            }
                        ],
                    }
                ]
            },
        },
    )
    cq = sc.name("training")
    lower = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
    sc.apply(
        cluster_queue(cq, 16, flavor=flavor, preemption=lower, annotations={CONFIG_ANNOTATION: config}),
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "training", "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    )
    op = operators.start()

    def small(name: str, host: str) -> WorkloadBuilder:
        # Pinned to one node, so the racks are fragmented whatever the placement policy.
        return workload(
            name, namespace=ns, queue="training", cpu=2, priority=100, labels={NODE_COUNT: "1"},
            required=HOSTNAME, node_selector={HOSTNAME: host},
        )  # fmt: skip

    def placement(wl: dict[str, Any]) -> dict[str, int]:
        """Hostname -> pods, decoded from the topologyAssignment as Kueue encodes it."""
        assignment = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
        assert assignment["levels"][-1] == HOSTNAME, assignment
        out: dict[str, int] = {}
        for slice_ in assignment["slices"]:
            count, level = slice_["domainCount"], slice_["valuesPerLevel"][-1]
            if "universal" in level:
                hosts = [level["universal"]] * count
            else:
                each = level["individual"]
                hosts = [f"{each.get('prefix', '')}{root}{each.get('suffix', '')}" for root in each["roots"]]
            counts = slice_["podCounts"]
            pods = [counts["universal"]] * count if "universal" in counts else counts["individual"]
            for host, n in zip(hosts, pods, strict=True):
                out[host] = out.get(host, 0) + n
        return out

    with WorkloadMonitor(sc.cluster, ns) as monitor:
        sc.apply(small("small-b", node["b1"]))
        monitor.wait_seen(["small-b"])
        reserved_b = condition(sc.wait_admitted("small-b", diagnostics=op.tail)["small-b"], "QuotaReserved")
        assert reserved_b is not None
        # `small-a` must be the most recently reserved (reservation times have 1 s resolution).
        wait_until(
            lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > reserved_b["lastTransitionTime"],
            what="the next second",
        )
        sc.apply(small("small-a", node["a1"]))
        wls = sc.wait_admitted("small-a", diagnostics=op.tail)
        assert placement(wls["small-a"]) == {node["a1"]: 1}, wls["small-a"]["status"]
        assert placement(wls["small-b"]) == {node["b1"]: 1}, wls["small-b"]["status"]

        # 2 x 4 cpu on one rack: 12 of 16 cpu is within quota, but each rack has one free node.
        sc.apply(
            workload(
                "large-training",
                namespace=ns,
                queue="training",
                cpu=4,
                priority=100,
                labels={NODE_COUNT: "2"},
                count=2,
                required=RACK,
            )
        )
        wls = sc.wait_admitted("large-training", diagnostics=op.tail)
        wait_until(lambda: is_true(sc.workload("small-a"), "Evicted"), what="small-a evicted")

    message = (
        f"Preempted by {ns}/large-training because of preemption config {config} "
        "rule evict-smaller-jobs-for-large-topology/0"
    )
    conditions = {c["Type"]: c for c in describe_conditions(sc.describe("small-a"))}
    assert (conditions["Evicted"]["Status"], conditions["Evicted"]["Reason"]) == ("True", "Preempted")
    assert conditions["Evicted"]["Message"] == message
    assert (conditions["Preempted"]["Status"], conditions["Preempted"]["Reason"]) == ("True", "ConfigurablePreemption")
    assert conditions["Preempted"]["Message"] == message
    assert placement(wls["large-training"]) == {node["a1"]: 1, node["a2"]: 1}, wls["large-training"]["status"]
    assert is_true(sc.workload("small-b"), "Admitted")
    assert not monitor.ever_true("small-b", "Evicted")
    assert monitor.max_evictions("small-a") == 1
    assert monitor.max_admitted_cpu(cq) <= 16
    # No node was ever given more than its 4 cpu, in any stored state.
    cpu_per_pod = {"small-a": 2, "small-b": 2, "large-training": 4}
    for state in monitor.snapshot():
        used: dict[str, int] = {}
        for name, wl in state.items():
            if is_true(wl, "QuotaReserved") and (wl.get("status") or {}).get("admission"):
                for host, pods in placement(wl).items():
                    used[host] = used.get(host, 0) + pods * cpu_per_pod[name]
        assert all(cpu <= 4 for cpu in used.values()), used
    assert op.metric(PREEMPTED, preempting_cluster_queue=cq, reason="ConfigurablePreemption") == 1


# ---- robustness ----------------------------------------------------------------------------------

BLOCK_LABEL = "e2e.preemption-operator/block-admission"


def _block_admission(sc: Scenario) -> None:
    """A ValidatingAdmissionPolicy that refuses any status write giving a Workload of this
    namespace labelled BLOCK_LABEL an admission: the operator can evict for it but not admit it."""
    name = sc.name("block-admission")
    sc.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["kueue.x-k8s.io"],
                            "apiVersions": ["v1beta2"],
                            "operations": ["UPDATE"],
                            "resources": ["workloads/status"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": (
                            f"!(has(object.metadata.labels) && '{BLOCK_LABEL}' in object.metadata.labels "
                            "&& has(object.status) && has(object.status.admission))"
                        ),
                        "message": "e2e: admitting this workload is blocked",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": sc.namespace}}},
            },
        },
    )


def _admission_blocked(sc: Scenario, probe: str, cq: str) -> bool:
    """Whether the policy refuses (server-side dry run) an admission for the probe workload."""
    patch = {
        "status": {
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {"name": "main", "flavors": {"cpu": sc.flavor}, "resourceUsage": {"cpu": "1"}, "count": 1}
                ],
            }
        }
    }
    proc = sc.kubectl(
        "patch", "workload", probe, "-n", sc.namespace, "--subresource=status", "--type=merge",
        "--dry-run=server", "-p", json.dumps(patch), check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        return False
    assert "admitting this workload is blocked" in proc.stderr, proc.stderr
    return True


def test_restart_in_the_middle_of_a_preemption(
    cluster: ControlPlane, scenario: Scenario, operators: OperatorPool
) -> None:
    """The operator is SIGKILLed after it wrote the victim's eviction and before it could admit
    the preemptor (a ValidatingAdmissionPolicy refuses that write); a new operator finishes the
    job: no second eviction, never more admitted than the quota, the preemptor admitted."""
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 6, preemption={"withinClusterQueue": "LowerPriority"})
    first = operators.start("first")
    with WorkloadMonitor(cluster, ns) as monitor:
        sc.apply(
            workload("low", namespace=ns, queue=lq, cpu=2, priority=-1),
            workload("mid", namespace=ns, queue=lq, cpu=2, priority=0),
            workload("high", namespace=ns, queue=lq, cpu=2, priority=1),
        )
        monitor.wait_seen(["low", "mid", "high"])
        sc.wait_admitted("low", "mid", "high", diagnostics=operators.diagnostics)

        _block_admission(sc)
        blocked = {BLOCK_LABEL: "true"}
        sc.apply(workload("probe", namespace=ns, queue="no-such-queue", cpu=1, priority=0, labels=blocked))
        wait_until(lambda: _admission_blocked(sc, "probe", cq), what="the admission policy to take effect")

        sc.apply(workload("incoming", namespace=ns, queue=lq, cpu=2, priority=1, labels=blocked))
        wait_until(lambda: is_true(sc.workload("low"), "Evicted"), what="low evicted", diagnostics=first.tail)
        wait_until(
            lambda: "admitting this workload is blocked" in first.log(),
            what="the first operator to try (and fail) to admit incoming",
            diagnostics=first.tail,
        )
        assert not is_true(sc.workload("incoming"), "QuotaReserved")
        first.kill()

        sc.kubectl(
            "delete", "validatingadmissionpolicybindings,validatingadmissionpolicies", "-l", f"{TEST_LABEL}={ns}"
        )  # fmt: skip
        wait_until(lambda: not _admission_blocked(sc, "probe", cq), what="the admission policy to go away")

        second = operators.start("second")
        sc.wait_admitted("incoming", diagnostics=operators.diagnostics)
        # Give the new operator a full cycle over the settled state: it must change nothing more.
        before = second.cycles()
        sc.queue("nudge", 1)  # an unrelated ClusterQueue: every queue gets another look
        wait_until(lambda: second.cycles() > before, what="another cycle", diagnostics=second.tail)

    final = sc.workloads()
    assert all(is_true(final[n], "Admitted") for n in ("incoming", "mid", "high")), final
    assert not is_true(final["low"], "QuotaReserved")
    assert final["low"]["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": "", "count": 1}
    ]
    assert not monitor.errors, monitor.errors
    assert monitor.max_evictions("low") == 1, "low was evicted twice"
    for name in ("mid", "high", "incoming"):
        assert not monitor.ever_true(name, "Evicted"), f"{name} was evicted"
    assert monitor.max_admitted_cpu(cq) <= 6, "the ClusterQueue was over-admitted at some point"
    assert len(monitor.states) > 5  # the watch did follow the writes
    assert "preempted " not in second.log(), second.tail()


def test_two_replicas_one_leader(cluster: ControlPlane, scenario: Scenario, operators: OperatorPool) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 4)
    replicas = [operators.start("replica-a"), operators.start("replica-b")]

    def one_leader() -> Any:
        flags = {op.name: op.metric(LEADER) for op in replicas}
        assert sorted(flags.values()) == [0.0, 1.0], f"leader gauges: {flags}"
        return next(op for op in replicas if flags[op.name] == 1.0)

    leader = wait_until(one_leader, what="exactly one leader", diagnostics=operators.diagnostics)
    standby = next(op for op in replicas if op is not leader)
    assert (lease_holder(cluster, operators.lease_name) or "").startswith(f"{leader.name}_")

    sc.apply(workload("first", namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted("first", diagnostics=operators.diagnostics)
    assert leader.metric(ADMITTED, cluster_queue=cq) == 1
    # The standby keeps its cache warm but decides and writes nothing.
    assert standby.metric(ADMITTED, cluster_queue=cq) is None
    assert standby.cycles() == 0
    assert standby.metric(LEADER) == 0
    assert "became the leader" not in standby.log()

    leader.kill()  # no lease release: the standby must wait for the lease to expire
    killed_at = time.monotonic()
    wait_until(
        lambda: standby.metric(LEADER) == 1.0, timeout=15, what="the standby to take over", diagnostics=standby.tail
    )
    took = time.monotonic() - killed_at
    assert took < 15
    assert (lease_holder(cluster, operators.lease_name) or "").startswith(f"{standby.name}_")

    sc.apply(workload("second", namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted("second", timeout=15, diagnostics=standby.tail)
    assert standby.metric(ADMITTED, cluster_queue=cq) == 1
    assert standby.stop() == 0, standby.tail()
    # A graceful stop gives the lease up at once.
    assert lease_holder(cluster, operators.lease_name) is None


def test_invalid_preemption_config(scenario: Scenario, operators: OperatorPool) -> None:
    """A config the API server accepts but whose selector cannot be built: Valid=False naming the
    rule and selector, a Warning when a preemptor needs it, and other queues keep admitting."""
    sc, ns = scenario, scenario.namespace
    config = sc.name("broken-config")
    sc.apply(
        {
            "apiVersion": KUEUE_ALPHA,
            "kind": "PreemptionConfig",
            "metadata": {"name": config},
            "spec": {
                "rules": [
                    {
                        "name": "broken-rule",
                        "activationPolicy": {"trigger": "InsufficientQuota"},
                        "candidateSelectors": [
                            {"scope": "WithinClusterQueue"},
                            {
                                "scope": "WithinClusterQueue",
                                "labelSelector": {
                                    "matchExpressions": [{"key": "team", "operator": "invalid", "values": ["a"]}]
                                },
                            },
                        ],
                    }
                ]
            },
        }
    )
    never = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}
    guarded_cq, guarded = sc.queue("guarded", 2, preemption=never, annotations={CONFIG_ANNOTATION: config})
    other_cq, other = sc.queue("other", 4)
    op = operators.start()

    def invalid_status() -> dict[str, Any]:
        status = sc.get("preemptionconfigs", config, namespaced=False).get("status") or {}
        valid = condition({"status": status}, "Valid")
        assert valid is not None and valid["status"] == "False", status
        return valid

    valid = wait_until(invalid_status, what="Valid=False on the config", diagnostics=op.tail)
    assert valid["reason"] == "InvalidSelector"
    assert 'rule "broken-rule" candidateSelectors[1]' in valid["message"], valid
    assert '"invalid" is not a valid label selector operator' in valid["message"], valid
    table = sc.kubectl("get", "preempcfg", config).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert dict(zip(header, row, strict=False))["VALID"] == "False", table

    # The ClusterQueue that uses it says so in a condition of its own; Active stays Kueue's.
    def queue_condition() -> dict[str, Any]:
        cq = sc.get("clusterqueues", guarded_cq, namespaced=False)
        ready = condition(cq, "PreemptionConfigReady")
        assert ready is not None and ready["status"] == "False", cq.get("status")
        return {"ready": ready, "active": condition(cq, "Active")}

    conditions = wait_until(queue_condition, what="PreemptionConfigReady=False on the queue", diagnostics=op.tail)
    assert conditions["ready"]["reason"] == "InvalidConfig"
    assert conditions["ready"]["message"].startswith(f"PreemptionConfig {config} is invalid: "), conditions
    assert (conditions["active"] or {}).get("status") == "True"
    described = sc.kubectl("describe", "clusterqueue", guarded_cq).stdout
    assert "PreemptionConfigReady" in described and "InvalidConfig" in described, described

    # A preemptor of the annotated queue needs the config: a Warning Event says why it cannot.
    sc.apply(workload("resident", namespace=ns, queue=guarded, cpu=2, priority=0))
    sc.wait_admitted("resident", diagnostics=op.tail)
    sc.apply(workload("preemptor", namespace=ns, queue=guarded, cpu=2, priority=100))

    def warning() -> dict[str, Any]:
        events = sc.events_about("PreemptionConfig", config)
        assert events, "no Event about the config yet"
        return dict(events[0])

    event = wait_until(warning, what="a Warning Event on the config", diagnostics=op.tail)
    assert event["type"] == "Warning"
    assert event["reason"] == "InvalidPreemptionConfig"
    assert 'rule "broken-rule" candidateSelectors[1]' in event["message"], event
    assert not is_true(sc.workload("preemptor"), "QuotaReserved")
    assert is_true(sc.workload("resident"), "Admitted")

    # Unrelated queues are not held up by it.
    sc.apply(
        workload("unrelated-1", namespace=ns, queue=other, cpu=2, priority=0),
        workload("unrelated-2", namespace=ns, queue=other, cpu=2, priority=0),
    )
    sc.wait_admitted("unrelated-1", "unrelated-2", diagnostics=op.tail)
    assert op.metric(ADMITTED, cluster_queue=other_cq) == 2
    assert op.metric(ADMITTED, cluster_queue=guarded_cq) == 1
    assert not is_true(sc.workload("resident"), "Evicted")


# A quantity the CRD's pattern accepts and the models cannot represent.
HUGE = "1e9223372036854775807"


def test_invalid_objects_do_not_stop_the_operator(scenario: Scenario, operators: OperatorPool) -> None:
    sc, ns = scenario, scenario.namespace
    cq, lq = sc.queue("main", 4)
    # Already there when the operator starts (its initial list), and a ClusterQueue too.
    sc.apply(workload("bad-at-start", namespace=ns, queue=lq, cpu=HUGE, priority=0))
    bad_cq, bad_lq = sc.queue("bad", HUGE)
    sc.apply(workload("in-bad-queue", namespace=ns, queue=bad_lq, cpu=1, priority=0))
    op = operators.start()
    assert f"invalid object: Workload {ns}/bad-at-start" in op.log(), op.tail()
    assert f"invalid object: ClusterQueue {bad_cq}" in op.log(), op.tail()

    sc.apply(workload("ok-1", namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted("ok-1", diagnostics=op.tail)
    # Arriving through the watch.
    sc.apply(workload("bad-later", namespace=ns, queue=lq, cpu=HUGE, priority=0))
    wait_until(
        lambda: f"invalid object: Workload {ns}/bad-later" in op.log(),
        what="the watch to report the invalid workload",
        diagnostics=op.tail,
    )
    sc.apply(workload("ok-2", namespace=ns, queue=lq, cpu=1, priority=0))
    sc.wait_admitted("ok-2", diagnostics=op.tail)

    wls = sc.workloads()
    for name in ("bad-at-start", "bad-later"):
        assert not wls[name].get("status"), f"{name} was written: {wls[name].get('status')}"
    assert not is_true(wls["in-bad-queue"], "QuotaReserved")
    # People see why on the object itself, not only in the operator's log.
    warning = wait_until(
        lambda: [e for e in describe_events(sc.describe("bad-later")) if e["Reason"] == "InvalidObject"],
        what="a Warning Event on the invalid workload",
        diagnostics=op.tail,
    )
    assert warning[0]["Type"] == "Warning" and "is not a valid quantity" in warning[0]["Message"], warning
    assert op.alive() and op.get("/healthz")[0] == 200
    assert op.metric(ADMITTED, cluster_queue=cq) == 2
    assert "Traceback" not in op.log(), op.tail()


def test_settled_workloads_are_not_written(cluster: ControlPlane, scenario: Scenario, operators: OperatorPool) -> None:
    """Once the cluster settles, cycles (here forced by unrelated ClusterQueues, as the 30 s resync
    would) write nothing; and the operator keeps no state on the objects: no annotation on a
    Workload, no finalizer on anything."""
    sc, ns = scenario, scenario.namespace
    op = operators.start()
    outcome = within_cluster_queue_priority(sc, operators.diagnostics)
    cq = outcome["cq"]

    def versions() -> dict[str, str]:
        out = {f"Workload/{n}": w["metadata"]["resourceVersion"] for n, w in sc.workloads().items()}
        out[f"ClusterQueue/{cq}"] = sc.get("clusterqueues", cq, namespaced=False)["metadata"]["resourceVersion"]
        out["LocalQueue/main"] = sc.get("localqueues", "main")["metadata"]["resourceVersion"]
        return out

    # Settled: the queues' counters show the final state.
    def settled() -> bool:
        status = sc.get("clusterqueues", cq, namespaced=False).get("status") or {}
        assert (status.get("admittedWorkloads"), status.get("pendingWorkloads")) == (3, 1), status
        return True

    wait_until(settled, what="the ClusterQueue status", diagnostics=op.tail)
    before = versions()
    for i in range(3):
        cycles = op.cycles()
        nudge, _ = sc.queue(f"nudge-{i}", 1)

        def nudged(nudge: str = nudge, cycles: int = cycles) -> bool:
            status = sc.get("clusterqueues", nudge, namespaced=False).get("status") or {}
            assert condition({"status": status}, "Active") is not None, status
            assert op.cycles() > cycles
            return True

        wait_until(nudged, what=f"a cycle that saw {nudge}", diagnostics=op.tail)
    assert versions() == before

    # Workloads are only watched; only their status is ever written (kubectl apply keeps its own).
    for name, wl in sc.workloads().items():
        annotations = set(wl["metadata"].get("annotations") or {})
        assert annotations <= {"kubectl.kubernetes.io/last-applied-configuration"}, f"Workload {name}: {annotations}"
    objects = [*sc.workloads().values()]
    objects += [sc.get("clusterqueues", cq, namespaced=False), sc.get("localqueues", "main")]
    objects.append(json.loads(cluster.kubectl("get", "namespace", ns, "-o", "json", check=True).stdout))
    for obj in objects:
        meta = obj["metadata"]
        where = f"{obj['kind']} {meta['name']}"
        assert not meta.get("finalizers"), where


def test_a_queue_status_someone_else_writes_is_put_back(
    cluster: ControlPlane, scenario: Scenario, operators: OperatorPool
) -> None:
    """A settled ClusterQueue's status, changed by another client (as a replaced leader's late
    PATCH would), is written back to what its Workloads hold without any new cycle."""
    sc = scenario
    op = operators.start()
    cq, lq = sc.queue("main", 4)
    sc.apply(workload("one", namespace=sc.namespace, queue=lq, cpu=1))
    sc.wait_admitted("one", diagnostics=op.tail)

    def status() -> dict[str, Any]:
        return sc.get("clusterqueues", cq, namespaced=False).get("status") or {}

    def shows_one() -> bool:
        got = status()
        assert got.get("reservingWorkloads") == 1, got
        assert got["flavorsReservation"][0]["resources"][0]["total"] == "1", got
        return True

    wait_until(shows_one, what="the ClusterQueue status", diagnostics=op.tail)
    # Settled: the analysis of the new setup has ended too (its end publishes statuses again).
    wait_until(
        lambda: any(s.name == "preemption_operator_lint_runs_total" and s.value for s in op.samples()),
        what="the setup's analysis",
        diagnostics=op.tail,
    )
    wrong = status()
    wrong["reservingWorkloads"] = 3
    wrong["flavorsReservation"][0]["resources"][0]["total"] = "3"
    patch = json.dumps({"status": {k: wrong[k] for k in ("reservingWorkloads", "flavorsReservation")}})
    patched = cluster.kubectl(
        "patch", "clusterqueue", cq, "--subresource=status", "--type=merge", "-p", patch, "-o", "json", check=True
    )
    # The foreign write took (the API server's answer says so); reading it back instead raced the
    # operator, which may already have put it back.
    assert json.loads(patched.stdout)["status"]["reservingWorkloads"] == 3
    # Within about a second (the publisher's interval); before, only the next cycle did it,
    # which in a settled cluster is the 30 s resync.
    wait_until(shows_one, timeout=10, what="the ClusterQueue status written back", diagnostics=op.tail)


def test_no_events_are_sent_into_a_namespace_being_deleted(
    cluster: ControlPlane, scenario: Scenario, operators: OperatorPool
) -> None:
    """A namespace being deleted refuses new Events (403 "being terminated") but its Workloads
    are still scheduled: they are admitted, and no Event is sent there."""
    sc, ns = scenario, scenario.namespace
    op = operators.start()
    cq = sc.name("late")
    sc.apply(
        sc.flavor_object(),
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "main", "namespace": ns},
         "spec": {"clusterQueue": cq}},
        workload("w1", namespace=ns, queue="main", cpu=1, priority=0),
    )  # fmt: skip

    def waiting() -> bool:
        assert condition(sc.workload("w1"), "QuotaReserved") is not None, sc.workload("w1").get("status")
        return True

    wait_until(waiting, what="w1 pending on a missing ClusterQueue", diagnostics=op.tail)
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=True)

    def terminating() -> bool:
        phase = json.loads(cluster.kubectl("get", "namespace", ns, "-o", "json", check=True).stdout)["status"]
        assert phase.get("phase") == "Terminating", phase
        return True

    wait_until(terminating, what=f"namespace {ns} terminating")
    sc.apply(cluster_queue(cq, 4, flavor=sc.flavor))
    sc.wait_admitted("w1", diagnostics=op.tail)
    assert (op.metric("preemption_operator_events_total", outcome="namespace_closing") or 0) >= 1
    assert op.stop() == 0, op.tail()
    assert "POST events 403" not in op.log(), op.tail()
