"""Issue 15, item 8: `simulate --summary` for large runs; `--now` defaults to the newest time the
input names (not the wall clock); a workload created after `--now` waits."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from preemption_operator.cli import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["simulate", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_summary_counts_actions_per_cycle_and_queues_at_the_end() -> None:
    out = run(str(EXAMPLES / "hero-job"), "--summary")
    assert out.startswith("Summary (4 cycles):")
    lines = out.splitlines()
    header = lines[1].split()
    assert header == ["CYCLE", "ADMITTED", "PREEMPTED", "EVICTED", "PENDING"]
    total = next(line.split() for line in lines if line.strip().startswith("total"))
    assert total == ["total", "1", "2", "0", "5"]
    final = {line.split()[1]: line.split()[2:] for line in lines[lines.index("Final state:") + 2 :]}
    assert final["hero"] == ["1", "0", "0"]  # the hero runs
    assert final["research/research"] == ["0", "1", "1"]  # its victim waits, evicted once


def test_now_defaults_to_the_newest_time_in_the_input() -> None:
    default = run(str(EXAMPLES / "hero-job"), "--output", "json")
    explicit = run(str(EXAMPLES / "hero-job"), "--output", "json", "--now", "2026-01-01T10:00:00Z")
    # The hero example's newest time is the pending workload's creation, 10:00.
    assert default == explicit


def test_a_workload_created_after_now_waits(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "scenario"
    shutil.copytree(EXAMPLES / "hero-job", folder)
    out = run(str(folder), "--now", "2026-01-01T09:59:00Z")
    assert (
        "warning: Workload default/hero-job-xyz is created after --now (2026-01-01T10:00:00Z > "
        "2026-01-01T09:59:00Z): it waits" in out
    )
    assert "Preempted" not in out.split("Final state:")[0]


def test_pods_and_jobsets_are_read_as_the_workloads_the_operator_makes_and_explain_names_their_objects(
    tmp_path: Path,
) -> None:
    """Issue 26: `simulate` reads a JobSet and a pod group as the operator would, after its
    webhooks (the Pods need not carry the `managed` label a user never writes): the group is one
    Workload named after it that preempts the JobSet's; `explain` says whose Workload it is."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER_WITH_JOBSET)
    (tmp_path / "pending.yaml").write_text(POD_GROUP)
    out = run(str(tmp_path))
    assert "Preempted  ns/jobset-trainer-ab9c7  cq            InClusterQueue (by ns/eval)" in out, out
    assert "4      Admitted   ns/eval" in out, out
    result = CliRunner().invoke(cli, ["explain", str(tmp_path), "-w", "ns/eval"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == ["Workload ns/eval", "  of Pod eval-0, Pod eval-1"]


CLUSTER_WITH_JOBSET = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: trainer, namespace: ns, labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: low}}
spec:
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 3
        template:
          spec:
            containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"""

POD_GROUP = "---\n".join(
    f"""apiVersion: v1
kind: Pod
metadata:
  name: eval-{i}
  namespace: ns
  labels: {{kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: high, kueue.x-k8s.io/pod-group-name: eval}}
  annotations: {{kueue.x-k8s.io/pod-group-total-count: "2"}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
"""
    for i in range(2)
)
