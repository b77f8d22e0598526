"""The decision engine: pure functions from a cluster snapshot to admissions, evictions and reasons.

Nothing here imports kopf or a Kubernetes client, reads a clock or does I/O; the operator and
the `simulate` command feed it the same snapshots.
"""
