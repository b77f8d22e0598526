"""A throwaway Kubernetes control plane (etcd + kube-apiserver) for the e2e tests, the benchmarks
and hack/control-plane.py: :func:`running_control_plane` starts one with the project's CRDs.

It follows controller-runtime's envtest: the binaries come from the folder named by
``KUBEBUILDER_ASSETS`` (``kube-apiserver``, ``etcd``, ``kubectl``), see
``hack/setup-envtest.sh``. There is no scheduler or kubelet, and no controller-manager unless
``start_controller_manager()`` starts one (the job, garbage-collector and namespace controllers:
Jobs then create pods, which stay Pending, and suspending a Job deletes them). Without it
objects are stored and validated, but nothing reconciles them (namespaces never finish
deleting, garbage collection does not happen).

Only the standard library is used; the service-account key is made with the ``cryptography``
package when it is installed, else with the ``openssl`` command. kube-apiserver makes its own
self-signed serving certificate (valid for 127.0.0.1, not for ``localhost``). Failures are
ordinary exceptions (:class:`ControlPlaneError`, :class:`AssetsUnavailable`, ...): the pytest
fixtures turn them into failures or skips.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE_ROOT = Path(__file__).resolve().parents[3]
"""The checkout the package is installed from (``pip install -e .``): it holds crds/ and hack/."""
SETUP_SCRIPT = SOURCE_ROOT / "hack" / "setup-envtest.sh"
CRDS_DIR = SOURCE_ROOT / "crds"
BINARIES = ("kube-apiserver", "etcd", "kubectl")
CONTROLLER_MANAGER = "kube-controller-manager"
"""Optional: only the Job tests need it (hack/setup-envtest.sh builds it with the rest)."""
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
"""Optional: only a cluster with nodes needs them (testing/cluster.py)."""
CONTROLLERS = ("job", "garbagecollector", "namespace", "serviceaccount-token")
NODE_CONTROLLERS = ("nodelifecycle",)
"""With nodes: the node lifecycle controller lifts the not-ready taint Ready nodes are created with."""
WORKDIR_PREFIX = "preemption-e2e-"
ENABLE_HINT = "export KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)"

ADMIN_USER = "e2e-admin"
ADMIN_GROUP = "system:masters"


class AssetsUnavailable(Exception):
    """The control-plane binaries are not on this machine."""


class AssetsMisconfigured(Exception):
    """KUBEBUILDER_ASSETS is set but does not hold the binaries."""


class ControlPlaneError(RuntimeError):
    """The control plane failed to start (the message carries the tails of its logs)."""


def find_assets() -> Path:
    """The folder holding kube-apiserver, etcd and kubectl.

    ``KUBEBUILDER_ASSETS`` when set; else whatever ``hack/setup-envtest.sh --installed-only``
    finds already cached (it never builds from here: a cold build takes minutes).
    """
    explicit = os.environ.get("KUBEBUILDER_ASSETS")
    if explicit:
        folder = Path(explicit)
        missing = [b for b in BINARIES if not os.access(folder / b, os.X_OK)]
        if missing:
            raise AssetsMisconfigured(
                f"KUBEBUILDER_ASSETS={explicit} lacks executable {', '.join(missing)}; "
                f"point it at a complete folder: `{ENABLE_HINT}`"
            )
        return folder
    if SETUP_SCRIPT.is_file() and shutil.which("bash"):
        try:
            proc = subprocess.run(
                ["bash", str(SETUP_SCRIPT), "--installed-only"],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            proc = None
        if proc is not None and proc.returncode == 0 and proc.stdout.strip():
            folder = Path(proc.stdout.strip().splitlines()[-1])
            if all(os.access(folder / b, os.X_OK) for b in BINARIES):
                return folder
    raise AssetsUnavailable(
        "the e2e tests need kube-apiserver, etcd and kubectl (envtest assets): "
        f"run `{ENABLE_HINT}` (a first build takes ~7 minutes) to enable them"
    )


# --------------------------------------------------------------------------------------------
# Processes: every child is tracked, dies with the test run (PR_SET_PDEATHSIG), and is stopped
# at interpreter exit (atexit) if a fixture's teardown never ran.

_PR_SET_PDEATHSIG = 1
try:
    _libc: Any = ctypes.CDLL(None, use_errno=True)
    _libc.prctl  # noqa: B018 - probe: not every libc has it
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _libc = None


def die_with_parent_hook() -> Any:
    parent = os.getpid()

    def hook() -> None:  # runs in the child between fork and exec
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)

    return hook


_live: set[ControlPlane] = set()


@atexit.register
def _stop_all() -> None:
    for plane in list(_live):
        plane.stop()


def _sweep_stale_workdirs(base: Path) -> None:
    """Remove the temp folders of earlier runs that were killed before their teardown
    (their children died with them; on /dev/shm the folders would hold memory)."""
    for folder in base.glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((folder / "owner.pid").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue  # another user's, or being created right now: leave it


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<{path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _make_rsa_key(path: Path) -> None:
    """A PEM RSA private key for signing service-account tokens."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        openssl = shutil.which("openssl")
        if not openssl:
            raise ControlPlaneError("need the `cryptography` package or the `openssl` command to make a key") from None
        subprocess.run(
            [openssl, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path)],
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    path.chmod(0o600)


FRONT_PROXY_NAME = "front-proxy-client"
FRONT_PROXY_CA = "front-proxy-ca.crt"


def _write_front_proxy(certs: Path) -> None:
    """The aggregation layer's front-proxy CA and client certificate, as kubeadm makes them."""
    from ..k8s.certs import issue_client

    made = issue_client(FRONT_PROXY_NAME)
    (certs / FRONT_PROXY_CA).write_bytes(made.ca)
    (certs / "front-proxy-client.crt").write_bytes(made.cert)
    key = certs / "front-proxy-client.key"
    key.write_bytes(made.key)
    key.chmod(0o600)


class _Process:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path, *, append: bool = False) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab" if append else "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,  # a terminal's Ctrl-C goes to pytest, which tears down
            preexec_fn=die_with_parent_hook(),
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 5.0, *, kill: bool = False) -> None:
        if self.popen.poll() is None:
            try:
                if kill:
                    self.popen.kill()
                else:
                    self.popen.terminate()
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
            except ProcessLookupError:  # pragma: no cover - raced with its exit
                pass
        self._log.close()


@dataclass(eq=False)
class ApiServer:
    """One kube-apiserver of a ControlPlane. Every one serves the same etcd with the same serving
    certificate (one cert dir), admin token and service-account key; each has its own port and
    kubeconfig, and can be stopped and restarted on that port."""

    name: str
    port: int
    kubeconfig: Path
    env: dict[str, str] = field(default_factory=dict)
    process: _Process | None = None
    restarts: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


class ControlPlane:
    """etcd + kube-apiserver on loopback, with an admin kubeconfig.

    Attributes for tests: ``server`` (https URL), ``kubeconfig`` (path), ``env`` (os.environ
    plus KUBECONFIG), ``token``, ``ca_file``, ``workdir``, ``startup_seconds``; and
    ``kubectl(*args)``.

    More kube-apiservers on the same etcd: ``add_apiserver()``; any of them (the first by
    default) can be stopped and started again on its port with ``stop_apiserver()`` /
    ``start_apiserver()``; ``apiservers`` lists them, the first is ``server``/``kubeconfig``.
    """

    def __init__(
        self,
        assets: Path,
        *,
        startup_timeout: float = 60.0,
        keep_workdir: bool = False,
    ) -> None:
        self.assets = Path(assets)
        self.startup_timeout = startup_timeout
        self.keep_workdir = keep_workdir
        self.workdir: Path | None = None
        self.server = ""
        self.etcd_url = ""
        self.token = ""
        self.kubeconfig = Path()
        self.ca_file = Path()
        self.env: dict[str, str] = {}
        self.startup_seconds = 0.0
        self._etcd: _Process | None = None
        self._controller_manager: _Process | None = None
        self._nodes_side: list[_Process] = []
        """kube-scheduler and kwok, when started: stopped first."""
        self.apiservers: list[ApiServer] = []

    # ---- life cycle ---------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        began = time.monotonic()
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        _sweep_stale_workdirs(Path(base or tempfile.gettempdir()))
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=base))
        (self.workdir / "owner.pid").write_text(str(os.getpid()))
        _live.add(self)
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    @property
    def _apiserver(self) -> _Process | None:
        return self.apiservers[0].process if self.apiservers else None

    def stop(self) -> None:
        _live.discard(self)
        for proc in [
            *self._nodes_side,
            self._controller_manager,
            *(api.process for api in self.apiservers),
            self._etcd,
        ]:
            if proc is not None:
                proc.stop()
        self._nodes_side = []
        for api in self.apiservers:
            api.process = None
        self._etcd = None
        self._controller_manager = None
        if self.workdir is not None and self.keep_workdir:
            (self.workdir / "owner.pid").unlink(missing_ok=True)  # not stale: kept on purpose
        elif self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self, lines: int = 40, *, failed: str | None = None) -> str:
        """The tails of the kube-apiserver and etcd logs (longer for the one that ``failed``)."""
        out = []
        for proc in [
            *(api.process for api in self.apiservers),
            self._etcd,
            self._controller_manager,
            *self._nodes_side,
        ]:
            if proc is not None:
                state = "running" if proc.alive() else f"exited {proc.popen.returncode}"
                n = lines if failed in (None, proc.name) else min(lines, 8)
                out.append(f"--- {proc.name} ({state}), last {n} log lines:\n{log_tail(proc.log_path, n)}")
        return "\n".join(out)

    def _fail(self, message: str, failed: str | None = None) -> ControlPlaneError:
        return ControlPlaneError(f"{message}\n{self.logs(failed=failed)}")

    def _deadline_left(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise self._fail(f"{what} not ready within {self.startup_timeout:.0f}s", what)

    def _start_etcd(self) -> None:
        assert self.workdir is not None
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._etcd = _Process(
            "etcd",
            [
                str(self.assets / "etcd"),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--initial-cluster-state=new",
                # A single member: elect itself within ~0.1s rather than ~1s.
                "--heartbeat-interval=10",
                "--election-timeout=100",
                "--logger=zap",
                "--log-outputs=stderr",
            ],
            self.workdir / "etcd.log",
            self.workdir,
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self._etcd.alive():
                raise self._fail("etcd exited during startup", "etcd")
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1) as resp:
                    if json.load(resp).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            self._deadline_left(deadline, "etcd")
            time.sleep(0.05)

    def _start_apiserver(self) -> None:
        assert self.workdir is not None
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        certs = self.workdir / "certs"
        certs.mkdir()
        sa_key = self.workdir / "sa.key"
        _make_rsa_key(sa_key)
        self.token = secrets.token_hex(24)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
        tokens.chmod(0o600)
        self.ca_file = certs / "apiserver.crt"
        _write_front_proxy(certs)
        api = ApiServer("kube-apiserver", port, self.workdir / "kubeconfig")
        self.apiservers.append(api)
        self._launch_apiserver(api)
        self._write_kubeconfig(api)
        self.kubeconfig = api.kubeconfig
        self.env = api.env

    def _apiserver_argv(self, port: int) -> list[str]:
        assert self.workdir is not None
        sa_key = self.workdir / "sa.key"
        certs = self.workdir / "certs"
        return [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--etcd-prefix=/registry",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            # The aggregation layer: kube-apiserver calls an aggregated API (the operator's
            # visibility API) with this client certificate, naming the user in X-Remote-* headers.
            f"--requestheader-client-ca-file={certs / FRONT_PROXY_CA}",
            f"--proxy-client-cert-file={certs / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={certs / 'front-proxy-client.key'}",
            f"--requestheader-allowed-names={FRONT_PROXY_NAME}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ]

    def _launch_apiserver(self, api: ApiServer, *, append_log: bool = False) -> None:
        """Starts (or restarts) one kube-apiserver on its port and waits for /readyz."""
        assert self.workdir is not None
        api.process = _Process(
            api.name,
            self._apiserver_argv(api.port),
            self.workdir / f"{api.name}.log",
            self.workdir,
            append=append_log,
        )
        # The serving certificate is written by the first kube-apiserver at startup: probe without
        # verification until /readyz passes, then check the certificate with it.
        self._wait_until_serving(api.process, api.server, "/readyz", interval=0.1)

    def _write_kubeconfig(self, api: ApiServer) -> None:
        assert self.workdir is not None
        ca = self.ca_file.read_bytes()
        api.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {
                                "server": api.server,
                                "certificate-authority-data": base64.b64encode(ca).decode(),
                            },
                        }
                    ],
                    "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
                    "contexts": [
                        {
                            "name": "e2e",
                            "context": {"cluster": "e2e", "user": ADMIN_USER, "namespace": "default"},
                        }
                    ],
                    "current-context": "e2e",
                },
                indent=2,
            )
        )
        api.kubeconfig.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
        env["KUBECONFIG"] = str(api.kubeconfig)
        env["KUBECACHEDIR"] = str(self.workdir / "kube-cache")  # keep ~/.kube/cache clean
        api.env = env
        status, body = self.get("/readyz", server=api.server)  # now with the CA: proves the kubeconfig's trust
        if status != 200:
            raise self._fail(f"/readyz of {api.name} with the serving CA: HTTP {status}: {body}")

    # ---- the controller manager ----------------------------------------------------------

    def start_controller_manager(self, controllers: Sequence[str] = CONTROLLERS) -> None:
        """kube-controller-manager with only `controllers`, as the admin, against the first
        kube-apiserver; returns when its /healthz passes."""
        assert self.workdir is not None and self.apiservers, "start() the control plane first"
        assert self._controller_manager is None or not self._controller_manager.alive(), "already running"
        if not os.access(self.assets / CONTROLLER_MANAGER, os.X_OK):
            raise AssetsMisconfigured(f"{self.assets} has no {CONTROLLER_MANAGER}: run `{ENABLE_HINT}`")
        port = free_port()
        certs = self.workdir / "kcm-certs"
        certs.mkdir(exist_ok=True)
        kubeconfig = str(self.kubeconfig)
        self._controller_manager = _Process(
            "kube-controller-manager",
            [
                str(self.assets / CONTROLLER_MANAGER),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup=true",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={certs}",
                "--profiling=false",
            ],
            self.workdir / "kube-controller-manager.log",
            self.workdir,
        )
        self._wait_until_serving(self._controller_manager, f"https://127.0.0.1:{port}", "/healthz", interval=0.2)

    # ---- the scheduler and kwok (a cluster with nodes) -----------------------------------------

    def _asset(self, name: str) -> str:
        if not os.access(self.assets / name, os.X_OK):
            raise AssetsMisconfigured(f"{self.assets} has no {name}: run `{ENABLE_HINT}`")
        return str(self.assets / name)

    def start_scheduler(self) -> None:
        """kube-scheduler with its default profile, as the admin; returns when its /healthz passes."""
        assert self.workdir is not None and self.apiservers, "start() the control plane first"
        binary = self._asset(SCHEDULER)
        port = free_port()
        certs = self.workdir / "scheduler-certs"
        certs.mkdir(exist_ok=True)
        kubeconfig = str(self.kubeconfig)
        scheduler = _Process(
            SCHEDULER,
            [
                binary,
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup=true",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={certs}",
                "--profiling=false",
            ],
            self.workdir / f"{SCHEDULER}.log",
            self.workdir,
        )
        self._nodes_side.append(scheduler)
        self._wait_until_serving(scheduler, f"https://127.0.0.1:{port}", "/healthz", interval=0.2)

    def start_kwok(self, stages: Path, cidr: str = "10.0.0.0/16") -> None:
        """kwok, managing every node with the Stages in `stages` (a YAML file): fake nodes' kubelet.
        Returns once it runs; its nodes become Ready as they are created."""
        assert self.workdir is not None and self.apiservers, "start() the control plane first"
        binary = self._asset(KWOK)
        kwok = _Process(
            KWOK,
            [
                binary,
                f"--kubeconfig={self.kubeconfig}",
                f"--config={stages}",
                "--manage-all-nodes=true",
                f"--cidr={cidr}",
            ],
            self.workdir / f"{KWOK}.log",
            self.workdir,
        )
        self._nodes_side.append(kwok)
        time.sleep(0.5)
        if not kwok.alive():
            raise self._fail(f"{KWOK} exited during startup", KWOK)

    def _wait_until_serving(self, process: _Process, server: str, path: str, *, interval: float) -> None:
        """Until `path` (a health endpoint) of `process` at `server` answers 200, its certificate
        not checked; ControlPlaneError, with the logs, when it exits or the startup timeout passes."""
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while True:
            if not process.alive():
                raise self._fail(f"{process.name} exited during startup", process.name)
            try:
                status, body = self.get(path, context=unverified, timeout=2, server=server)
                if status == 200:
                    return
                last = f"{path}: HTTP {status}: {body[-500:]}"
            except OSError as exc:
                last = f"{path}: {exc}"
            if time.monotonic() > deadline:
                raise self._fail(f"{process.name} not ready within {self.startup_timeout:.0f}s ({last})", process.name)
            time.sleep(interval)

    # ---- more kube-apiservers, outages ---------------------------------------------------

    def add_apiserver(self) -> ApiServer:
        """Another kube-apiserver on the same etcd (its own port and kubeconfig, the same
        certificate and admin token): clients can use it while another one is down."""
        assert self.workdir is not None and self.apiservers, "start() the control plane first"
        api = ApiServer(
            f"kube-apiserver-{len(self.apiservers) + 1}",
            free_port(),
            self.workdir / f"kubeconfig-{len(self.apiservers) + 1}",
        )
        self.apiservers.append(api)
        self._launch_apiserver(api)
        self._write_kubeconfig(api)
        return api

    def _pick(self, which: ApiServer | int) -> ApiServer:
        return which if isinstance(which, ApiServer) else self.apiservers[which]

    def stop_apiserver(self, which: ApiServer | int = 0, *, kill: bool = False) -> ApiServer:
        """Stops one kube-apiserver (SIGTERM, or SIGKILL with ``kill``); etcd keeps running."""
        api = self._pick(which)
        if api.process is not None:
            api.process.stop(timeout=30, kill=kill)
        api.process = None
        return api

    def start_apiserver(self, which: ApiServer | int = 0) -> ApiServer:
        """Starts a stopped kube-apiserver again on the same port and cert dir; returns when
        /readyz passes with the serving CA."""
        api = self._pick(which)
        assert not api.alive(), f"{api.name} is running"
        self._launch_apiserver(api, append_log=True)
        api.restarts += 1
        status, body = self.get("/readyz", server=api.server)
        if status != 200:
            raise self._fail(f"/readyz of {api.name} after a restart: HTTP {status}: {body}", api.name)
        return api

    # ---- access -------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def get(
        self,
        path: str,
        *,
        token: str | None = "",
        context: ssl.SSLContext | None = None,
        timeout: float = 10,
        server: str | None = None,
    ) -> tuple[int, str]:
        """GET a path on the API server (or another ``server`` URL); returns (status, body).

        As the admin by default; ``token=None`` sends no credentials (anonymous)."""
        token = self.token if token == "" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request((server or self.server) + path, headers=headers)
        try:
            with urllib.request.urlopen(req, context=context or self.ssl_context(), timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = False,
        timeout: float = 60,
        apiserver: ApiServer | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (its first kube-apiserver, or ``apiserver``);
        returns the CompletedProcess (text).

        With ``check=True`` a non-zero exit raises AssertionError with kubectl's output."""
        __tracebackhide__ = True
        kubeconfig = apiserver.kubeconfig if apiserver is not None else self.kubeconfig
        proc = subprocess.run(
            [str(self.assets / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def apply_crds(self, files: Iterable[Path | str], *, timeout: float = 60) -> list[str]:
        """Server-side apply CRD manifests and wait until each CRD is Established.

        Returns the applied object names (``customresourcedefinition.../NAME``).
        """
        __tracebackhide__ = True
        args: list[str] = []
        for f in files:
            args += ["-f", str(f)]
        if not args:
            return []
        applied = self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=e2e-harness",
            "-o",
            "name",
            *args,
            check=True,
            timeout=timeout,
        )
        names = applied.stdout.split()
        self.wait_established(names, timeout=timeout)
        return names

    def wait_established(self, names: Iterable[str], *, timeout: float = 60) -> None:
        """Wait until the CRDs among ``names`` (kubectl ``-o name`` output) are Established."""
        __tracebackhide__ = True
        crds = [n for n in names if n.startswith("customresourcedefinition")]
        deadline = time.monotonic() + timeout
        while crds:
            left = max(1, int(deadline - time.monotonic()))
            waited = self.kubectl("wait", "--for=condition=Established", f"--timeout={left}s", *crds, timeout=left + 10)
            # A CRD just created may have no conditions yet, which `kubectl wait` reports as an
            # error at once rather than waiting for them.
            if waited.returncode == 0 or "accessor error" not in waited.stderr or time.monotonic() > deadline:
                assert waited.returncode == 0, (
                    f"kubectl wait for {' '.join(crds)} to be Established exited {waited.returncode}:\n{waited.stderr}"
                )
                return
            time.sleep(0.2)


def project_crd_files(crds_dir: Path = CRDS_DIR) -> list[Path]:
    """The project's CRD manifests: crds/*.yaml, less a kustomization.yaml.

    Raises FileNotFoundError when there are none: the package is not installed from a checkout
    (crds/ is found beside operator/), or crds/ was not generated."""
    if not crds_dir.is_dir():
        raise FileNotFoundError(
            f"no CRD folder at {crds_dir}: the harness reads crds/ of the checkout the package is "
            "installed from (pip install -e .)"
        )
    files = sorted(p for p in crds_dir.glob("*.yaml") if p.name != "kustomization.yaml")
    if not files:
        raise FileNotFoundError(f"{crds_dir} holds no *.yaml: generate them with `make crds`")
    return files


@contextmanager
def running_control_plane(
    assets: Path | None = None,
    *,
    crds: bool = True,
    controller_manager: bool = False,
    controllers: Sequence[str] = CONTROLLERS,
    more_apiservers: int = 0,
    keep_workdir: bool = False,
) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver, with the project's CRDs installed and Established unless ``crds``
    is false; ``more_apiservers`` more kube-apiservers on the same etcd; kube-controller-manager
    with ``controller_manager``. Stopped (its temp folder removed unless ``keep_workdir``) on
    exit. Binaries from ``assets``, else :func:`find_assets`.

    Raises ControlPlaneError (with the logs' tails) when any part does not come up, and
    AssetsMisconfigured when kube-controller-manager is wanted but not among the assets."""
    plane = ControlPlane(assets or find_assets(), keep_workdir=keep_workdir)
    plane.start()  # stops what it started when it fails
    try:
        for _ in range(more_apiservers):
            plane.add_apiserver()
        if crds:
            try:
                plane.apply_crds(project_crd_files())
            except (AssertionError, FileNotFoundError) as exc:
                raise ControlPlaneError(f"installing crds/*.yaml failed: {exc}") from exc
        if controller_manager:
            plane.start_controller_manager(controllers)
        yield plane
    finally:
        plane.stop()
