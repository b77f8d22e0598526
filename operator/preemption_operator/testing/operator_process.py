"""`preemption-operator run` as a child process, for the e2e tests and the benchmarks.

- :class:`OperatorProcess`: one operator (its own free metrics port, log file and Lease identity),
  started against a kubeconfig, waited for on ``/readyz``, stopped with SIGTERM or killed with
  SIGKILL. :class:`OperatorPool` starts several and stops whatever is left at teardown.
- :func:`wait_until`: polling with a timeout, never a fixed sleep.

Failures are raised as AssertionError, which pytest reports as a test failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from .control_plane import ControlPlane, die_with_parent_hook, free_port, log_tail

T = TypeVar("T")

# ---- waiting -----------------------------------------------------------------------------------


def wait_until(
    check: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Calls ``check`` until it returns a truthy value (returned) or the timeout passes.

    ``check`` may raise AssertionError to say why it is not there yet; the last reason and the
    ``diagnostics`` (operator logs, say) are in the failure message."""
    __tracebackhide__ = True
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            result = check()
            if result:
                return result
            last = f"got {result!r}"
        except AssertionError as exc:
            last = str(exc)
        if time.monotonic() > deadline:
            extra = f"\n{diagnostics()}" if diagnostics is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {last}{extra}")
        time.sleep(interval)


# ---- the operator process ----------------------------------------------------------------------


def operator_command() -> list[str]:
    """`preemption-operator` from the running virtualenv (else `python -m preemption_operator`)."""
    script = Path(sys.executable).parent / "preemption-operator"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "preemption_operator"]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class OperatorProcess:
    """One `preemption-operator run`, its HTTP endpoints and its log."""

    def __init__(
        self,
        name: str,
        kubeconfig: Path,
        workdir: Path,
        *,
        lease_name: str,
        lease_namespace: str = "default",
        lease_seconds: int = 4,
        leader_election: bool = True,
        base_env: dict[str, str] | None = None,
        extra_args: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.lease_name = lease_name
        self.lease_namespace = lease_namespace
        self.port = free_port()
        self.log_path = workdir / f"operator-{name}.log"
        self.argv = [
            *operator_command(),
            "run",
            "--metrics-host=127.0.0.1",
            f"--metrics-port={self.port}",
            f"--lease-namespace={lease_namespace}",
            f"--lease-name={lease_name}",
            f"--lease-seconds={lease_seconds}",
            *([] if leader_election else ["--no-leader-election"]),
            *extra_args,
        ]
        env = dict(base_env if base_env is not None else os.environ)
        for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"):
            env.pop(var, None)
        env["KUBECONFIG"] = str(kubeconfig)
        env["POD_NAME"] = name  # the Lease identity is "<POD_NAME>_<random>"
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    # -- life cycle

    def start(self) -> OperatorProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap()
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            preexec_fn=die_with_parent_hook(),  # dies with the test run
        )
        return self

    def wait_ready(self, timeout: float = 30.0) -> OperatorProcess:
        """Until /readyz answers 200 (the cache is synced)."""

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"operator {self.name} exited with {self.returncode}")
            return self.get("/readyz")[0] == 200

        wait_until(ready, timeout=timeout, interval=0.1, what=f"operator {self.name} /readyz", diagnostics=self.tail)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait; SIGKILL if it does not exit in time (and fail). Returns the exit status."""
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"operator {self.name} ignored SIGTERM for {timeout:.0f}s\n{self.tail()}"
                ) from None
        self._reap()
        return self.popen.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the Lease is not released)."""
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        self._reap()

    def _reap(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- what it says

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"--- operator {self.name} ({state}), last {lines} log lines:\n{log_tail(self.log_path, lines)}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError as exc:
            return 0, str(exc)

    def samples(self) -> list[Sample]:
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics of {self.name}: HTTP {status}: {body[:300]}"
        return [
            Sample(s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(body)
            for s in family.samples
        ]

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of one sample (labels must match exactly), None when absent."""
        for s in self.samples():
            if s.name == name and s.labels == labels:
                return s.value
        return None

    def cycles(self) -> int:
        return int(self.metric("preemption_operator_scheduling_cycle_duration_seconds_count") or 0)


class OperatorPool:
    """The operators of one test: started on demand, all stopped at teardown."""

    def __init__(self, cluster: ControlPlane, workdir: Path, lease_name: str | None = None) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.lease_name = lease_name or f"e2e-{secrets.token_hex(4)}"
        self.started: list[OperatorProcess] = []

    def start(
        self,
        name: str = "op",
        *,
        kubeconfig: Path | None = None,
        ready: bool = True,
        **kwargs: Any,
    ) -> OperatorProcess:
        kwargs.setdefault("lease_name", self.lease_name)
        op = OperatorProcess(
            name, kubeconfig or self.cluster.kubeconfig, self.workdir, base_env=self.cluster.env, **kwargs
        )
        self.started.append(op)
        op.start()
        if ready:
            op.wait_ready()
        return op

    def diagnostics(self) -> str:
        return "\n".join(op.tail() for op in self.started)

    def close(self) -> None:
        for op in self.started:
            if op.alive():
                with contextlib.suppress(AssertionError):  # it was killed; the log says why
                    op.stop()
        for namespace, name in {(op.lease_namespace, op.lease_name) for op in self.started}:
            self.cluster.kubectl("delete", "lease", name, "-n", namespace, "--ignore-not-found", "--wait=false")
        # Shown by pytest for failing tests only ("Captured stdout teardown").
        for op in self.started:
            print(op.tail(200))
