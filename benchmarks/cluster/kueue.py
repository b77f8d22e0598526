"""Kueue v0.19.2's full controller manager for the Kueue side: built once from the Go module proxy,
run against a cluster with its batch/job integration.

    go install sigs.k8s.io/kueue/cmd/kueue@v0.19.2    (GOBIN=~/.cache/preemption-operator/kueue-cluster/v0.19.2/bin)

Its CRDs come from the module's own config/components/crd/bases in the Go module cache.

Webhooks: none is registered with the API server. The benchmark creates every Job suspended with
its queue label, which is all Kueue's Job webhook would add, so the API server never needs to
call Kueue. Kueue still starts its webhook server and will not start without a certificate, so it
is given a self-signed one in a temporary folder, and internal certificate management is off (it
would otherwise wait for webhook configurations and a Service that a single-machine cluster does
not have). The on-demand visibility server (a read-only API of pending workloads, which
wants a certificate at /visibility) is switched off with its feature gate. With that off, Kueue also reads a metrics certificate from the fixed path
/etc/kueue/metrics/certs: Kueue runs in a private mount namespace (`unshare`) whose /etc has that
folder overlaid from the temporary folder, so nothing is written outside it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from preemption_operator.testing.control_plane import die_with_parent_hook, free_port, log_tail

VERSION = "v0.19.2"
MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
METRICS_CERTS = "kueue/metrics/certs"
"""Under /etc: where Kueue reads its metrics certificate when it does not manage certificates."""


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "preemption-operator" / "kueue-cluster" / VERSION


def go_binary() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if not found:
        raise SystemExit("cluster bench: no `go` on PATH to build Kueue")
    return found


def build(log: Callable[[str], None] = print) -> tuple[Path, Path]:
    """Kueue's binary (built on first use) and its CRD folder in the Go module cache."""
    go = go_binary()
    bindir = cache_root() / "bin"
    binary = bindir / "kueue"
    if not binary.is_file():
        bindir.mkdir(parents=True, exist_ok=True)
        log(f"go install {MODULE}/cmd/kueue@{VERSION} (GOBIN={bindir}); a cold build took 7 minutes on 2 cores")
        subprocess.run(
            [go, "install", f"{MODULE}/cmd/kueue@{VERSION}"], check=True, env={**os.environ, "GOBIN": str(bindir)}
        )
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], check=True, capture_output=True, text=True
    )
    crds = Path(json.loads(out.stdout)["Dir"]) / "config" / "components" / "crd" / "bases"
    return binary, crds


def crd_files(crds: Path) -> list[Path]:
    return sorted(crds.glob("*.yaml"))


def _self_signed(folder: Path, crt: str = "tls.crt", key: str = "tls.key") -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(private, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / crt).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / key).write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


class KueueProcess:
    """`kueue --config=...` against a kubeconfig: batch/job integration, leader election off,
    Kueue's shipped client limits (QPS 300, burst 500), webhooks served but not registered."""

    def __init__(self, binary: Path, kubeconfig: Path, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.health_port = free_port()
        self.log_path = workdir / "kueue.log"
        overlay = workdir / "etc-overlay"
        _self_signed(overlay / METRICS_CERTS)
        _self_signed(workdir / "webhook-certs")
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
            "webhook": {"port": free_port(), "host": "127.0.0.1", "certDir": str(workdir / "webhook-certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 300, "burst": 500},
            "integrations": {"frameworks": ["batch/job"]},
        }
        config_path = workdir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        # A private mount namespace whose /etc has kueue/metrics/certs laid over it; `exec` keeps
        # the pid, so /proc/<pid> is Kueue's own CPU and memory. Without root, a user namespace too.
        unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
        script = (
            f'mount -t overlay overlay -o "lowerdir={overlay}:/etc" /etc && '
            f'exec "{binary}" --config="{config_path}" --kubeconfig="{kubeconfig}" '
            # Its on-demand visibility API server wants a certificate at /visibility: it serves
            # `kubectl get --raw` queries of pending workloads, not scheduling, so it is left off.
            "--feature-gates=VisibilityOnDemand=false"
        )
        self.argv = [*unshare, "sh", "-c", script]
        self.env = {**env, "KUBECONFIG": str(kubeconfig)}
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> KueueProcess:
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child holds it; closed with the process
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            preexec_fn=die_with_parent_hook(),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.popen.poll() is not None:
                raise RuntimeError(f"kueue exited with {self.popen.returncode}:\n{log_tail(self.log_path, 40)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (OSError, urllib.error.HTTPError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kueue not ready within {timeout:.0f}s:\n{log_tail(self.log_path, 40)}")
            time.sleep(0.2)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)
