"""A real Milvus standalone server on loopback for the tests that talk to one: the server of PyPI's
`milvus` wheel (2.3.5: the Milvus binary with its embedded etcd, local storage and rocksmq log),
with authentication on, started in a folder of its own, stopped by its PID and restarted on the
same folder (what a crash or a rollout does to the data it holds).

The wheel's own MilvusServer changes the test process's working directory and gives the server
one second to stop before killing it; here the server is started as a process of its own and
given time to stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 180.0  # about 12 s alone; a busy machine takes longer
STOP_TIMEOUT_S = 10.0  # Milvus 2.3.5 standalone often hangs in its graceful stop
SESSION_TTL_S = 5
TOKEN = "root:Milvus"  # the server's first administrator, as every new Milvus has


@dataclass
class MilvusServer:
    """The server's data folder, its gRPC port (the URI clients use) and health port."""

    folder: Path
    port: int = 0
    health_port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server on its folder (a restart: with the ports and milvus.yaml of the
        first start, where the clients already point) and wait until it answers."""
        if not self.port:
            from milvus import MilvusServerConfig, _initialize_data_files

            config = MilvusServerConfig(data_dir=str(self.folder))
            config.set("authorization_enabled", True)  # clients must send the token
            # A killed server's sessions stay in etcd for this long, and the restarted one
            # waits them out before it serves (30 s by default).
            config.set("common.session.ttl", SESSION_TTL_S)
            config.resolve()  # free ports, and configs/milvus.yaml in the folder
            _initialize_data_files(str(self.folder))
            self.port = int(config.get("proxy_port"))
            self.health_port, sock = config.resolve_port(9091)
            sock.close()
        binary = self.folder / "bin" / "milvus"
        env = {
            **os.environ,
            "DEPLOY_MODE": "STANDALONE",
            "METRICS_PORT": str(self.health_port),
            "MILVUS_RUN_DIR": str(self.folder / "run"),
            "LD_LIBRARY_PATH": f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        }
        log = open(self.folder / "logs" / "milvus.log", "ab")  # noqa: SIM115 (the server's)
        self.process = subprocess.Popen(
            [str(binary), "run", "standalone"],
            cwd=self.folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"milvus exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310
                    if b"OK" in answer.read() and self._serving():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"milvus not healthy after {START_TIMEOUT_S:.0f} s: {self.log()}")

    def _serving(self) -> bool:
        """Whether the proxy answers and no collection is still loading: a restarted server is
        healthy seconds before it has loaded again the collections it had loaded."""
        from pymilvus import MilvusClient

        try:
            client = MilvusClient(self.uri, token=TOKEN, timeout=5)
            states = [client.get_load_state(c)["state"] for c in client.list_collections()]
        except Exception:  # refused, reset, or not yet recovered
            return False
        return all(state.name != "Loading" for state in states)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM to the server's process group (its PID), SIGKILL if it lingers or if `kill`
        (a crash: what the log holds must survive it)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def log(self) -> str:
        path = self.folder / "logs" / "milvus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"
