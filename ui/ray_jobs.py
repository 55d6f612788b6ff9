"""Talking to the Ray job server: submit, list, read logs, stop.

One `JobSubmissionClient` per UI process, made on first use and remade after a connection error (the
cluster may be started after the UI). Ray's auth token, when the cluster uses token auth, goes along
as a bearer header; the client also adds it by itself when RAY_AUTH_MODE=token is set here. So the
client is only ever made for the address the user gave or Ray's default on loopback, never one Ray
would look up (settings.py), and never while an environment variable would replace it.

The UI shows and acts on elastune's own jobs: those it launched carry `elastune_ui` and their kind in
their metadata and an `elastune-` submission id (launch.new_job_id). Any other job on the cluster is
left out of the list, and reading, following or stopping it is a 404 as for an unknown id, unless
the UI was started with --all-jobs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from elastune.ui.launch import JOB_KINDS, LaunchPlan
from elastune.ui.settings import ray_address_override, ray_auth_token

__all__ = ["ClusterError", "ClusterUnavailable", "JobService", "UnknownJob", "is_elastune_job"]

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_LOG_LIMIT = 256 * 1024  # characters of log sent at once; a tail is what a person reads


class ClusterUnavailable(Exception):
    """The Ray job server cannot be reached (HTTP 503 with this message)."""


class UnknownJob(Exception):
    """No job with this id on the cluster (HTTP 404)."""


class ClusterError(Exception):
    """The job server answered, with an error that is not "cannot connect" (HTTP 502 with this
    message): a refused token, a refused request, a server-side failure. Said as what it is."""


@dataclass
class JobService:
    ray_address: str
    all_jobs: bool = False  # every job on the cluster, not only elastune's (elastune ui --all-jobs)

    def __post_init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    # -- the client

    def _where(self) -> str:
        return self.ray_address

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from ray.job_submission import JobSubmissionClient

                override = ray_address_override(self.ray_address)
                if override is not None:  # checked at start-up too; the environment may change since
                    raise ClusterError(override)

                token = ray_auth_token()
                headers = {"Authorization": f"Bearer {token}"} if token else None
                # Its constructor already asks the server (version check): errors are classified by _call.
                self._client = JobSubmissionClient(self.ray_address, headers=headers)
            return self._client

    def _unreachable(self, exc: BaseException) -> str:
        first = _first_line(exc)
        return (
            f"Cannot reach the Ray job server at {self._where()} ({first}). Start a cluster with "
            "`ray start --head --node-ip-address=127.0.0.1 --dashboard-host=127.0.0.1`, or give its "
            "dashboard address with `elastune ui --ray-address http://HOST:8265`."
        )

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            client = _bounded(self.client, self._unreachable)
            return _bounded(lambda: getattr(client, method)(*args, **kwargs), self._unreachable)
        except ClusterError:  # said as it should be already (an address the UI will not use)
            raise
        except ClusterUnavailable:  # no answer in time
            self._forget()
            raise
        except Exception as exc:
            classified = self._classify(exc)
            if not isinstance(classified, UnknownJob):
                self._forget()  # remade on the next call: the cluster, or its token, may change
            raise classified from exc

    def _forget(self) -> None:
        with self._lock:
            self._client = None

    def _classify(self, exc: BaseException) -> Exception:
        """An SDK error as what it is: unreachable (503), refused token (502, says how to fix),
        unknown job (404), or another answer from the job server (502, its own words)."""
        from ray.exceptions import AuthenticationError

        first = _first_line(exc)
        if isinstance(exc, AuthenticationError) or "authentication token" in first.lower():
            return ClusterError(  # the fix first: Ray's own words, whole, can be long
                f"The Ray job server at {self._where()} refused this UI's token. Give the UI the cluster's "
                "token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (`ray get-auth-token` on the "
                f"head prints it), then restart `elastune ui`. Ray said: {first}"
            )
        if isinstance(exc, RuntimeError) and ("does not exist" in first or "404" in first):
            return UnknownJob(first)  # the SDK's words for an unknown id
        if isinstance(exc, ConnectionError | TimeoutError | OSError) or _is_connection_error(exc):
            return ClusterUnavailable(self._unreachable(exc))
        return ClusterError(f"The Ray job server at {self._where()} answered with an error: {first}")

    # -- jobs

    def submit(self, plan: LaunchPlan) -> str:
        # No runtime_env: the cluster runs the installed elastune; nothing from the client goes in.
        result: str = self._call(
            "submit_job",
            entrypoint=plan.entrypoint,
            submission_id=plan.job_id,
            metadata={**plan.metadata, "elastune_ui": "1"},
        )
        return result

    def list(self) -> list[dict[str, Any]]:
        jobs = [job_dict(info) for info in self._call("list_jobs") if self.all_jobs or is_elastune_job(info)]
        return sorted(jobs, key=lambda j: j["start_time"] or 0, reverse=True)

    def get(self, job_id: str) -> dict[str, Any]:
        """One job; UnknownJob (404) for an id the cluster does not know and, alike, for a job that is
        not elastune's (unless --all-jobs): the answer does not tell the two apart."""
        try:
            info = self._call("get_job_info", job_id)
        except UnknownJob:
            raise UnknownJob(_unknown(job_id, self.all_jobs)) from None
        if not (self.all_jobs or is_elastune_job(info)):
            raise UnknownJob(_unknown(job_id, self.all_jobs))
        return job_dict(info)

    def logs(self, job_id: str, offset: int) -> dict[str, Any]:
        """Log text from `offset` on (what a poller has not seen yet), and the job's status."""
        info = self.get(job_id)
        text: str = self._call("get_job_logs", job_id)
        offset = min(max(offset, 0), len(text))
        chunk = text[offset:]
        skipped = max(0, len(chunk) - _LOG_LIMIT)
        return {
            "job_id": job_id,
            "text": chunk[skipped:],
            "offset": len(text),
            "skipped_chars": skipped,
            "status": info["status"],
            "done": info["status"] in TERMINAL,
        }

    def stop(self, job_id: str) -> dict[str, Any]:
        info = self.get(job_id)
        if info["status"] in TERMINAL:
            return {"job_id": job_id, "stopped": False, "status": info["status"], "message": "already finished"}
        stopped = bool(self._call("stop_job", job_id))
        return {"job_id": job_id, "stopped": stopped, "status": self.get(job_id)["status"], "message": ""}


def is_elastune_job(info: Any) -> bool:
    """Whether a job is one elastune launched: the metadata and the submission id the UI gives its
    jobs (JobService.submit, launch.new_job_id)."""
    metadata = info.metadata or {}
    return (
        metadata.get("elastune_ui") == "1"
        and metadata.get("elastune_kind") in JOB_KINDS
        and str(info.submission_id or "").startswith("elastune-")
    )


def _unknown(job_id: str, all_jobs: bool) -> str:
    if all_jobs:
        return f"No job {job_id!r} on the cluster; pick one from the job list"
    return (
        f"No elastune job {job_id!r} on the cluster; pick one from the job list (a job not launched by elastune "
        "is shown only when the UI is started with --all-jobs)"
    )


def _first_line(exc: BaseException) -> str:
    """Ray's error as one whole line (cluster.py): never cut short of the fix at its end, and where
    Ray found several clusters on the machine, the UI's option that names one."""
    from elastune.cluster import connection_error_text

    return connection_error_text(exc, "--cluster-address")


def _is_connection_error(exc: BaseException) -> bool:
    """requests' ConnectionError and the SDK's "Failed to connect" (a ConnectionError or a
    ValueError from its address lookup): the cluster is not there."""
    import requests

    return isinstance(exc, requests.ConnectionError | requests.Timeout) or "failed to connect" in str(exc).lower()


def _bounded(fn: Any, unreachable: Any, wait_s: float = 20.0) -> Any:
    """Run `fn` in a helper thread; a job server that does not answer in `wait_s` is unavailable.

    The SDK's HTTP calls have no timeout, and a page poll must not hang on a wedged cluster.
    """
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread below
            result["error"] = exc

    worker = threading.Thread(target=run, name="ray-job-call", daemon=True)
    worker.start()
    worker.join(wait_s)
    if worker.is_alive():
        raise ClusterUnavailable(unreachable(TimeoutError(f"no answer within {wait_s:.0f} s")))
    if "error" in result:
        raise result["error"]
    return result.get("value")


def job_dict(info: Any) -> dict[str, Any]:
    metadata = dict(info.metadata or {})
    status = getattr(info.status, "value", str(info.status))
    return {
        "job_id": info.submission_id or info.job_id,
        "kind": metadata.get("elastune_kind", "other"),
        "spec": metadata.get("elastune_spec") or None,
        "from_sweep": metadata.get("elastune_from_sweep") or None,
        "status": status,
        "message": info.message or "",
        "entrypoint": info.entrypoint,
        "start_time": (info.start_time or 0) / 1000 or None,  # Ray gives milliseconds
        "end_time": (info.end_time or 0) / 1000 or None,
        "done": status in TERMINAL,
    }
