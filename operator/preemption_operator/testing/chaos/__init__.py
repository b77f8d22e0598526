"""The chaos harness: the operator as a black box under faults, and the promise it must keep.

"A ClusterQueue is never over-admitted and nothing is lost, whatever the API server, the
network or the other replica does." :class:`InvariantMonitor` follows every stored state of the
run's Workloads (one cluster-wide watch, re-listed when it breaks) and checks:

- I1: per ClusterQueue and per cohort, the quota reserved by unfinished Workloads with
  ``QuotaReserved=True`` and not ``Evicted=True`` never exceeds what the queue may use (nominal
  + borrowing within the cohort) or the cohort's nominal total (as in Kueue, a workload that fits
  may take what victims under way free beyond their preemptor's need); a Workload that takes
  quota is not marked Evicted, and a preemptor takes quota before its victims are gone only
  within the bounds counting every reservation;
- I2: an eviction count grows by one per eviction, and only from a state holding quota;
- I3: once a :class:`ForeignWriter` write succeeded, no later state shows an older value of
  its label, annotation or condition (checked at the end, :meth:`InvariantMonitor.check_foreign`);
- I4: after the faults stop, :func:`wait_settled`: the project's engine, run offline on what
  the API server holds, would admit or preempt nothing, and queue status counts match;
- I5: per ClusterQueue and per cohort, the cpu requested by the run's pods that run or may run
  (bound to a node and not Succeeded or Failed, being deleted included; or started by the
  operator and not yet bound; not those of a Workload I1 leaves out) never exceeds the same
  bounds as I1, whatever made the pods. A
  pod's queue is its own queue label (plain Pods, pod groups), else its JobSet's or its Job's
  (read from the API server), else the ``kueue.x-k8s.io/cluster-queue-name`` label the operator
  gives the pods it starts; a pod that runs on no queue is a violation;
- I6: per node, the cpu requested by the pods bound to it that may still run (any namespace;
  pods being deleted count until they are gone) never exceeds its allocatable cpu.

Load: :class:`WorkloadDriver` creates Workloads, batch/v1 Jobs, plain Pods, pod groups and
JobSets (several priorities), finishes admitted ones after a random run time (a Workload by its
Finished condition, a Job by marking its pods Succeeded, as a kubelet would; Pods and JobSets'
pods end by kwok's completion stage), deletes some (racing the operator if asked), and makes
again Pods the operator deleted (a preemption), as their maker would. The control plane runs
kube-controller-manager's job controller and the JobSet controller, so Jobs and JobSets create
and delete real pods; with kube-scheduler and kwok's nodes (preemption_operator.testing.cluster)
those pods are bound, run, and take their grace period to go. The operators serve their webhooks
behind a :class:`WebhookFront` (a queued Pod is gated at creation). docs/chaos.md has it all.
:class:`ChaosEnv` puts a run together (topology, monitor, operators, fault proxies) and the
fault families are functions over it (``kill_storm``, ``leader_stop_before_write``,
``leader_stall``, ``apiserver_outage``, ``error_injection``, ``foreign_and_racing_deletes``),
shared by tests/e2e/test_chaos.py (short) and benchmarks/chaos_soak.py (long). Figures
(kills survived, takeover and recovery times, foreign writes/s, violations) go to
:class:`Figures`.

Only the standard library talks to the API server here (http.client, one keep-alive
connection per thread and server), so the harness has no client library in common with the
operator.

Modules: ``api`` (the client, paths and labels), ``topology`` (the setup and the load's
objects), ``monitor`` (I1-I3, I5, I6), ``settled`` (I4), ``load`` (the driver and the foreign
writer), ``replicas`` (the webhook front), ``figures``, ``env`` (a run) and ``faults`` (the fault
families). What the suite and the soak use is imported from the package.
"""

from __future__ import annotations

from .env import ChaosEnv
from .faults import (
    apiserver_outage,
    error_injection,
    foreign_and_racing_deletes,
    kill_storm,
    leader_stall,
    leader_stop_before_write,
)
from .figures import Figures, Outage, Takeover
from .load import DriverConfig, ForeignWriter, WorkloadDriver
from .monitor import InvariantMonitor, Violation
from .replicas import HookMissing, WebhookFront
from .settled import settled_problems, status_problems, wait_settled
from .topology import NODES, QueueSpec, Topology

__all__ = [
    "NODES",
    "ChaosEnv",
    "DriverConfig",
    "Figures",
    "ForeignWriter",
    "HookMissing",
    "InvariantMonitor",
    "Outage",
    "QueueSpec",
    "Takeover",
    "Topology",
    "Violation",
    "WebhookFront",
    "WorkloadDriver",
    "apiserver_outage",
    "error_injection",
    "foreign_and_racing_deletes",
    "kill_storm",
    "leader_stall",
    "leader_stop_before_write",
    "settled_problems",
    "status_problems",
    "wait_settled",
]
