"""A `vllm serve` process as a resource: own process group led by a guard (bench/engine/guard.py), log file, readiness
(alive AND /health), crash and hang detection, and a stop that leaves no process behind (SIGTERM the API server,
then the group, grace, SIGKILL, wait)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from bench.core.files import atomic_write_bytes, default_cache_dir
from bench.engine.guard import group_members, stop_group, wait_until
from bench.load import http_client as http
from bench.measure.failures import classify_log

log = logging.getLogger(__name__)
GUARD = Path(__file__).with_name("guard.py")
GUARD_GRACE_S = 10
SOCKET_DIR_MAX = 64  # longest VLLM_RPC_BASE_PATH whose sockets fit AF_UNIX's 107 bytes (see short_socket_dir)
SERVER_MARK = "BENCH_SERVER_LOG"  # in every server process's environment: which log (and results dir) it is for


class ServerFailed(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerSpec:
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int


def server_argv(
    model: str,
    served_name: str,
    port: int,
    server_args: dict,
    speculative: dict | None,
    dcp_size: int,
    load_format: str | None,
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if speculative is not None:  # None: no draft (the k = 0 baseline)
        argv += ["--speculative-config", json.dumps(speculative, sort_keys=True)]
    if dcp_size > 1:
        argv += ["--decode-context-parallel-size", str(dcp_size)]
    if load_format:
        argv += ["--load-format", load_format]
    for key, value in sorted(server_args.items()):
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:  # vLLM's boolean options take --no-<flag> (argparse.BooleanOptionalAction)
            argv.append("--no-" + flag[2:])
        elif value is None:
            continue
        elif isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value):
            argv += [flag, *map(str, value)]  # vLLM's list flags take their values apart (nargs="+")
        else:
            argv += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return argv


def server_env(run_dir: Path, extra: dict[str, str] | None = None, cache_dir: Path | None = None) -> dict[str, str]:
    """vLLM's temp files and IPC sockets inside the run's own folder. The compile cache (`cache_dir`, default
    inside run_dir) can be shared by the servers of one sweep: vLLM keys it by config hash, and reusing
    torch.compile artifacts cuts later servers' start-up."""
    dirs = {
        "VLLM_CACHE_ROOT": cache_dir or run_dir / "cache",
        "TMPDIR": run_dir / "tmp",
        "VLLM_RPC_BASE_PATH": run_dir / "rpc",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    share_model_inspections(Path(dirs["VLLM_CACHE_ROOT"]))
    dirs["VLLM_RPC_BASE_PATH"] = short_socket_dir(dirs["VLLM_RPC_BASE_PATH"])
    env = {
        **os.environ,
        **{k: str(v) for k, v in dirs.items()},
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra or {})
    return env


MODEL_INSPECTIONS = "modelinfos"  # vLLM's folder (under VLLM_CACHE_ROOT) of inspected model classes
SHARED_INSPECTIONS = "vllm-modelinfos"  # the suite's one copy of it, in default_cache_dir()


def share_model_inspections(vllm_cache: Path) -> Path | None:
    """Before a server starts, vLLM inspects its target's and draft's model classes, each in a fresh Python process
    that imports the model's module, unless VLLM_CACHE_ROOT/modelinfos holds that class's result under the hash of
    the module's source: ~8-10 s a class on a 2-core CPU host (docs/measurement.md), paid again by every start whose
    cache folder is new (each sweep's, each A/B round's). That folder is made a link to one folder in the suite's
    cache, so a machine's first start inspects and the rest read. The entries are keyed by the module's own bytes
    (a patched or other vLLM misses and inspects again) and written atomically by vLLM, so servers may share them.
    A `modelinfos` that already exists (a persistent BENCH_VLLM_CACHE) is left as it is. Returns the link, or None
    when none was made."""
    link = vllm_cache / MODEL_INSPECTIONS
    if link.exists() or link.is_symlink():
        return None
    shared = default_cache_dir() / SHARED_INSPECTIONS
    try:
        shared.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(shared, target_is_directory=True)
        except FileExistsError:  # another server of the same cache folder made it first
            return None
    except OSError as exc:  # a read-only cache, a file system without links: vLLM inspects as before
        log.info("vLLM's model inspections not shared (%s): each start inspects its model classes", exc)
        return None
    return link


def short_socket_dir(folder: Path) -> Path:
    """`folder`, or a short link to it when vLLM's IPC socket paths under it would not fit: an AF_UNIX path holds
    107 bytes and vLLM appends "/<uuid4>" (37) to VLLM_RPC_BASE_PATH, so a deep results directory made every point
    fail as a plain crash. The link (/tmp/bench-rpc-<hash of the folder>) keeps the sockets in the run's folder."""
    folder = Path(folder).resolve()
    if len(str(folder)) <= SOCKET_DIR_MAX:
        return folder
    link = Path("/tmp") / f"bench-rpc-{hashlib.sha256(str(folder).encode()).hexdigest()[:16]}"
    if not (link.is_symlink() and link.resolve() == folder):
        link.unlink(missing_ok=True)
        link.symlink_to(folder, target_is_directory=True)
    return link


class Server:
    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self._log_fh: BinaryIO | None = None
        self._lifeline: int | None = None  # write end of the guard's pipe; closing it (or dying) stops the server

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.port}"

    def start(self, timeout_s: float) -> float:
        """Start and wait until ready; returns seconds to ready. Raises ServerFailed (already stopped)."""
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.spec.log_path, "ab")  # noqa: SIM115 - held open while the server runs; closed in stop()
        self._log_fh.write(f"# bench: {' '.join(self.spec.argv)}\n".encode())
        self._log_fh.flush()
        t0 = time.monotonic()
        # The guard leads the group and stops it if this process dies without stopping it (bench/engine/guard.py).
        lifeline, self._lifeline = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(GUARD), str(lifeline), str(GUARD_GRACE_S), "--", *self.spec.argv],
                env={**self.spec.env, SERVER_MARK: str(self.spec.log_path.resolve())},
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(lifeline,),
            )
        finally:
            os.close(lifeline)
        record_group(self.spec.log_path, self.proc.pid)
        try:
            while True:
                self.check_alive()
                if self.health():
                    return time.monotonic() - t0
                if time.monotonic() - t0 > timeout_s:
                    raise ServerFailed("startup-timeout", f"/health did not answer within {timeout_s:.0f} s")
                time.sleep(1.0)
        except BaseException:
            self.stop()
            raise

    def health(self) -> bool:
        return http.status(self.base_url + "/health", timeout=5) == 200

    def check_alive(self) -> None:
        """Raise ServerFailed (classified from the log) if the server or its engine has died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise self.failure(f"server exited with code {self.proc.returncode}", "crash")

    def failure(self, what: str, default_reason: str) -> ServerFailed:
        found = classify_log(self.log_text())
        if found:
            return ServerFailed(found[0], f"{what}; log: {found[1]}")
        return ServerFailed(default_reason, what)

    def log_text(self) -> str:
        try:
            return self.spec.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """Every process of the server's group (its workers and engine core included)."""
        return group_members(self.proc.pid) if self.proc is not None else []

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the whole group (bench.engine.guard.stop_group): SIGTERM to the guard alone, which forwards it to the API
        server, so the API server stops its engine in order; the group after part of `grace_s`; SIGKILL at its
        end. Then wait for every process of the group."""
        if self.proc is None:
            return
        proc, pgid = self.proc, self.proc.pid
        if not stop_group(
            lambda: _signal_pid(pgid, signal.SIGTERM),
            pgid,
            grace_s,
            lambda: proc.poll() is not None and not group_alive(pgid),
        ):
            log.warning("server group %d still alive after %.0f s: SIGKILL", pgid, grace_s)
        proc.wait()
        wait_until(lambda: not group_alive(pgid), 10)
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        self.spec.log_path.with_suffix(".pgid").unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _group_gone(pgid: int) -> bool:
    return not group_alive(pgid)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` is still alive (one owned by another user counts as alive)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def record_group(log_path: Path, pgid: int) -> None:
    """Note a running server's process group next to its log, so a later run can find it (removed on stop).
    Written whole or not at all: a driver killed mid-write must not leave a note the next run cannot read."""
    atomic_write_bytes(log_path.with_suffix(".pgid"), f"{pgid}\n".encode())


def stop_leftover_servers(logs_dir: Path) -> list[int]:
    """Stop the process groups that an earlier driver of these logs left running (its guard was killed too, e.g.
    by a SIGKILL of the whole group or the OOM killer). A group counts only if one of its processes still names
    this log in its environment (SERVER_MARK), so a reused pid is left alone."""
    stopped = []
    for note in sorted(Path(logs_dir).glob("*.pgid")):
        pgid = int(note.read_text().split()[0])
        marker = f"{SERVER_MARK}={note.with_suffix('.log').resolve()}"
        if group_alive(pgid) and _group_mentions(pgid, marker):
            log.warning(
                "stopping server process group %d (pids %s), left running by an earlier run of %s",
                pgid,
                " ".join(map(str, group_members(pgid))),
                note.with_suffix(".log"),
            )
            _signal_group(pgid, signal.SIGTERM)
            _signal_group(pgid, signal.SIGCONT)
            wait_until(functools.partial(_group_gone, pgid), GUARD_GRACE_S)
            _signal_group(pgid, signal.SIGKILL)
            stopped.append(pgid)
        note.unlink(missing_ok=True)
    return stopped


def _group_mentions(pgid: int, marker: str) -> bool:
    """Whether a process of group `pgid` has `marker` (NAME=VALUE) in its environment."""
    name, _, value = marker.partition("=")
    for pid in group_members(pgid):
        try:
            if psutil.Process(pid).environ().get(name) == value:
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return False
