"""The UI's security rules (issue 6, point 4): token, Host allowlist, cross-site writes, the bind rule,
no entrypoint / runtime_env / path from the client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.errors import InputError
from elastune.ui import UISettings, check_bind, create_app
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("specs")
    (folder / "dlrm_quick.yaml").write_text((ROOT / "search_spaces" / "dlrm_quick.yaml").read_text())
    (folder.parent / "secret.yaml").write_text("name: not-for-you\n")
    return folder


@pytest.fixture(scope="module")
def guarded(spec_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    settings = UISettings(token=TOKEN, tracking_uri=uri, spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(scope="module")
def open_ui(spec_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    settings = UISettings(tracking_uri=uri, spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/health"),
        ("GET", "/api/jobs"),
        ("GET", "/api/sweeps"),
        ("GET", "/api/memory"),
        ("GET", "/api/specs"),
        ("GET", "/api/sweeps/x/trials.csv"),
        ("POST", "/api/jobs"),
        ("POST", "/api/jobs/x/stop"),
    ],
)
def test_no_token_is_401(guarded: TestClient, method: str, path: str) -> None:
    response = guarded.request(method, path, json={"kind": "sweep", "spec": "dlrm_quick"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "token" in response.json()["detail"]


def test_wrong_token_is_401_and_the_right_one_passes(guarded: TestClient) -> None:
    assert guarded.get("/api/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.get("/api/health", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert guarded.get("/api/health", headers=AUTH).status_code == 200
    assert guarded.get("/openapi.json", headers=AUTH).status_code == 200


def test_pages_load_without_the_token_but_hold_no_data(guarded: TestClient) -> None:
    page = guarded.get("/jobs")
    assert page.status_code == 200 and "token-dialog" in page.text


def test_host_header_outside_the_allowlist_is_refused(open_ui: TestClient) -> None:
    response = open_ui.get("/api/health", headers={"Host": "evil.example:8710"})
    assert response.status_code == 400 and "evil.example" in response.json()["detail"]
    assert open_ui.get("/jobs", headers={"Host": "attacker.test"}).status_code == 400
    assert open_ui.get("/api/health", headers={"Host": "127.0.0.1:8710"}).status_code == 200
    assert open_ui.get("/api/health", headers={"Host": "localhost"}).status_code == 200


def test_cross_site_writes_are_refused(open_ui: TestClient) -> None:
    body = {"kind": "sweep", "spec": "dlrm_quick"}
    response = open_ui.post("/api/jobs", json=body, headers={"Origin": "https://evil.example"})
    assert response.status_code == 403
    # Same origin reaches validation (and then the absent cluster), not the guard.
    same = open_ui.post("/api/jobs", json={**body, "max_trials": 0}, headers={"Origin": "http://testserver"})
    assert same.status_code == 422


@pytest.mark.parametrize(
    "smuggled",
    [
        {"entrypoint": "rm -rf ~"},
        {"runtime_env": {"pip": ["evil"]}},
        {"entrypoint_num_cpus": 8},
        {"spec_path": "/etc/passwd"},
        {"command": "python -c 'import os'"},
    ],
)
def test_entrypoint_and_runtime_env_smuggling_is_refused(open_ui: TestClient, smuggled: dict[str, object]) -> None:
    response = open_ui.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", **smuggled})
    assert response.status_code == 422
    (field,) = smuggled
    found = {p["field"]: p["message"] for p in response.json()["problems"]}
    assert "unknown field" in found[field]


@pytest.mark.parametrize(
    "spec",
    [
        "../secret",
        "../../etc/passwd",
        "/etc/passwd",
        "sub/dlrm_quick",
        "..\\secret",
        "..",
        ".hidden",
        "dlrm_quick.yaml/",
    ],
)
def test_spec_path_traversal_is_refused(open_ui: TestClient, spec: str) -> None:
    response = open_ui.post("/api/jobs", json={"kind": "sweep", "spec": spec})
    assert response.status_code == 422
    assert [p["field"] for p in response.json()["problems"]] == ["spec"]


def test_a_spec_outside_the_folder_is_not_offered(open_ui: TestClient) -> None:
    assert [s["name"] for s in open_ui.get("/api/specs").json()] == ["dlrm_quick"]
    response = open_ui.post("/api/jobs", json={"kind": "sweep", "spec": "secret"})
    assert response.status_code == 422 and "no such spec" in response.json()["problems"][0]["message"]


def test_train_overrides_cannot_carry_shell_syntax_into_the_command(open_ui: TestClient) -> None:
    response = open_ui.post("/api/jobs", json={"kind": "train", "sets": ["steps=3; rm -rf ~"]})
    assert response.status_code == 422  # 'steps' must be an integer: refused before any entrypoint exists


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::", "example.com"])
def test_non_loopback_bind_without_token_refuses_to_start(host: str) -> None:
    with pytest.raises(InputError, match="--token"):
        check_bind(UISettings(host=host))
    check_bind(UISettings(host=host, token=TOKEN))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_bind_needs_no_token(host: str) -> None:
    check_bind(UISettings(host=host))


def test_a_short_token_is_refused() -> None:
    with pytest.raises(InputError, match="shorter than 16"):
        check_bind(UISettings(token="abc"))


def test_cli_refuses_a_public_bind_without_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("ELASTUNE_UI_TOKEN", raising=False)
    assert main(["ui", "--host", "0.0.0.0", "--port", "8710"]) == 2
    assert "--token" in capsys.readouterr().err


def test_library_does_not_import_the_ui() -> None:
    import subprocess
    import sys

    code = (
        "import sys, elastune.cli; "
        "sys.exit(1 if any(m == 'elastune.ui' or m.startswith('elastune.ui.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
