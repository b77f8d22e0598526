"""`what-if` (issue 31, item 3): what would become of a job submitted now, decided by the engine on
the state plus the job, without submitting it: admitted now (flavors, victims and their rule),
or why it waits, how many are ahead, and when, from the running workloads' stated maximum
execution times."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from builders import NOW, admitted, as_dict, cluster_queue, parse, pending, rfc3339, scenario
from preemption_operator.cli import cli
from preemption_operator.jobs.reconciler import maximum_execution_time
from preemption_operator.offline import what_if


def limited(builder: Any, seconds: int) -> dict[str, Any]:
    body = as_dict(builder)
    body["spec"]["maximumExecutionTimeSeconds"] = seconds
    return body


def new(name: str, cpu: int, priority: int) -> list[Any]:
    body = as_dict(pending(name, "cq", cpu, priority=priority))
    body["metadata"]["creationTimestamp"] = rfc3339(NOW)
    return parse([body])


def test_admitted_now_by_preempting_names_the_victim_rule_and_flavor() -> None:
    state = parse(
        scenario(
            [cluster_queue("cq", 2, within="LowerPriority")],
            admitted("low", "cq", 1, priority=1),
            admitted("mid", "cq", 1, priority=20),
        )
    )
    (prediction,) = what_if.predict(state, new("incoming", 1, 10), NOW)
    assert prediction.admitted and prediction.at == rfc3339(NOW)
    assert prediction.cluster_queue == "cq"
    assert prediction.flavors == {"main": {"cpu": "default"}}
    assert [(v.workload, v.reason, v.rule) for v in prediction.preempts] == [
        ("default/low", "InClusterQueue", "classic (InClusterQueue)")
    ]
    text = what_if.describe(prediction, NOW)
    assert "admitted now" in text
    assert "preempts default/low (ClusterQueue cq): InClusterQueue under classic (InClusterQueue)" in text


def test_waiting_says_why_and_how_many_are_ahead() -> None:
    state = parse(
        scenario(
            [cluster_queue("cq", 2)],
            admitted("a", "cq", 1),
            admitted("b", "cq", 1),
            pending("earlier", "cq", 1, priority=5),
        )
    )
    (prediction,) = what_if.predict(state, new("incoming", 1, 0), NOW)
    assert not prediction.admitted and prediction.at is None
    assert prediction.reason == "WaitingForQuota"
    assert prediction.message.startswith("couldn't assign flavors to pod set main: insufficient unused quota")
    assert prediction.ahead == 1  # earlier has the higher priority
    assert any("admission time not known" in note for note in prediction.notes)
    assert "1 pending workload(s) ahead of it in ClusterQueue cq" in what_if.describe(prediction, NOW)


def test_when_comes_from_the_running_workloads_maximum_execution_times() -> None:
    state = parse(
        scenario(
            [cluster_queue("cq", 2)],
            limited(admitted("short", "cq", 1, at=NOW - timedelta(minutes=10)), 20 * 60),
            limited(admitted("long", "cq", 1, at=NOW - timedelta(minutes=5)), 60 * 60),
            limited(pending("first", "cq", 1, priority=5), 60),
        )
    )
    (prediction,) = what_if.predict(state, new("incoming", 1, 0), NOW)
    # short ends in 10 minutes, and first (ahead of it) takes that cpu, for its 60 seconds; then
    # incoming, before long ends (in 55 minutes).
    assert prediction.at == rfc3339(NOW + timedelta(minutes=11))
    assert prediction.after == ["default/short", "default/first"]
    assert "admitted at " + rfc3339(NOW + timedelta(minutes=11)) + " (in 11m)" in what_if.describe(prediction, NOW)


def test_kueues_max_exec_time_label() -> None:
    label = "kueue.x-k8s.io/max-exec-time-seconds"
    assert maximum_execution_time({label: "600"}) == 600
    assert maximum_execution_time({label: "+5"}) == 5
    for bad in ("0", "-3", "ten", " 5", "2147483648", ""):
        assert maximum_execution_time({label: bad}) is None, bad
    assert maximum_execution_time({}) is None


JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "cq"}},
    "spec": {
        "suspend": True,
        "parallelism": 1,
        "completions": 1,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            }
        },
    },
}


def test_the_command_reads_a_job_and_state_files(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    state.write_text(
        yaml.safe_dump_all(
            scenario([cluster_queue("cq", 1, within="LowerPriority")], admitted("low", "cq", 1, priority=-1))
        )
    )
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB))
    now = ["--now", rfc3339(NOW)]
    result = CliRunner().invoke(cli, ["what-if", str(job), "--state", str(state), "-o", "json", *now])
    assert result.exit_code == 0, result.output
    (prediction,) = json.loads(result.output)
    assert prediction["owners"] == ["Job train"]
    assert prediction["admitted"] is True
    assert [v["workload"] for v in prediction["preempts"]] == ["default/low"]
    text = CliRunner().invoke(cli, ["what-if", str(job), "--state", str(state), *now])
    assert text.exit_code == 0 and "(Job train), ClusterQueue cq:" in text.output
    deployment = tmp_path / "other.yaml"
    deployment.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
    refused = CliRunner().invoke(cli, ["what-if", str(deployment), "--state", str(state), *now])
    assert refused.exit_code == 2 and "no queued job or Workload" in refused.output


def test_objects_read_from_a_cluster_settle_as_files_do() -> None:
    """A live object carries its resourceVersion; a simulated status change must not be taken for
    the version the cache already holds (the victim was preempted again every cycle)."""
    from preemption_operator.offline import simulate

    objects = scenario(
        [cluster_queue("cq", 2, within="LowerPriority")],
        admitted("low", "cq", 1, priority=1),
        admitted("mid", "cq", 1, priority=20),
    )
    for obj in objects:
        obj.setdefault("metadata", {})["resourceVersion"] = "100"
    sim = simulate.run(parse(objects), NOW, arriving=new("incoming", 1, 10))
    assert [(a["action"], a["workload"]) for a in sim.actions if a["action"] != "Pending"] == [
        ("Preempted", "default/low"),
        ("Admitted", "default/incoming"),
    ]


def test_a_topology_request_is_told_its_domain() -> None:
    from builders import RACK, TAS_FLAVOR, TOPOLOGY, node, resource_flavor, topology

    objects = [
        topology(RACK),
        resource_flavor(TAS_FLAVOR, topology=TOPOLOGY),
        node("n1", {RACK: "r1"}, cpu=2),
        node("n2", {RACK: "r2"}, cpu=4),
        *scenario([cluster_queue("cq", 8, flavor=TAS_FLAVOR)], flavors=()),
    ]
    body = as_dict(pending("wide", "cq", 1, count=3, required=RACK))
    body["metadata"]["creationTimestamp"] = rfc3339(NOW)
    (prediction,) = what_if.predict(parse(objects), parse([body]), NOW)
    assert prediction.admitted
    assert prediction.flavors == {"main": {"cpu": TAS_FLAVOR}}
    assert prediction.topology == {"main": [f"{RACK}=r2: 3 pod(s)"]}  # only r2 holds three
    assert f"    topology {RACK}=r2: 3 pod(s)" in what_if.describe(prediction, NOW)
