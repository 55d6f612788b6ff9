"""Nothing the UI reads back is trusted (the security issue's UI points), against the real app
(FastAPI's TestClient), a real SQLite MLflow store and no Ray cluster:

- the cluster is never looked up in Ray's discovery file (world-writable /tmp/ray), and Ray's token
  goes only to the address given or Ray's default on loopback (a recording fake dashboard shows
  what reaches it);
- YAML from a client: anchors, aliases, tags and merge keys refused before anything is expanded,
  never a 5xx, every error body at most 4 KB;
- jobs are priced before launch against the UI's job memory ceiling, with their own caps;
- /api/docs loads Swagger UI from this server only, and keeps no token in the browser.

Hiding other jobs on the cluster needs a real job server: tests/integration/served/test_ui_e2e.py.
"""

from __future__ import annotations

import re
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.cli import main
from elastune.errors import InputError
from elastune.ui import UISettings, check_bind, create_app
from elastune.ui.launch import SweepJob, plan_launch
from fastapi.testclient import TestClient

from tests.unit.test_ui_api import free_port, write_sweep

ROOT = Path(__file__).resolve().parents[2]
RAY_TOKEN = "ray-token-that-must-stay-home-0123456789"
BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    write_sweep(uri, "sw-trust")
    return uri


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("specs")
    quick = yaml.safe_load((ROOT / "search_spaces" / "dlrm_quick.yaml").read_text())
    (folder / "dlrm_quick.yaml").write_text(yaml.safe_dump(quick))
    del quick["constraints"]["memory_ceiling"]
    (folder / "no_ceiling.yaml").write_text(yaml.safe_dump(quick))
    return folder


def _app(store: str, spec_dir: Path, **settings: Any) -> TestClient:
    settings.setdefault("ray_address", f"http://127.0.0.1:{free_port()}")  # nothing listens: a launch is a 503
    ui = UISettings(tracking_uri=store, spec_dir=spec_dir, allowed_hosts=("testserver",), **settings)
    return TestClient(create_app(ui), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(store: str, spec_dir: Path) -> Iterator[TestClient]:
    with _app(store, spec_dir, job_memory_ceiling=2 * 2**30) as c:
        yield c


def _problems(response: Any) -> dict[str, dict[str, Any]]:
    assert response.status_code == 422, response.text
    return {p["field"]: p for p in response.json()["problems"]}


# ---- point 2: no cluster looked up, the token only where it was sent ------------------------


class FakeDashboard(socketserver.ThreadingTCPServer):
    """Someone else's dashboard on 127.0.0.1: records the first bytes of every connection (an HTTP
    request with its headers, or a gRPC preface) and answers 404. A context manager: serves in a
    thread of its own, stopped on exit."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordOne)
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self.serve_forever, name="fake-dashboard", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def plant(self, ray_tmpdir: Path) -> None:
        """Name this server in Ray's discovery file under `ray_tmpdir` (what RAY_TMPDIR points at;
        /tmp by default, whose ray/ folder any local user can write)."""
        (ray_tmpdir / "ray").mkdir(exist_ok=True)
        (ray_tmpdir / "ray" / "ray_current_cluster").write_text(self.address)

    def __enter__(self) -> FakeDashboard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)


class _RecordOne(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = self.request.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        # recorded before the answer: whoever connected learns nothing until it is on the list
        self.server.received.append(data)  # type: ignore[attr-defined]
        self.request.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")


@pytest.fixture
def planted_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDashboard]:
    """Another local user's dashboard, named in Ray's discovery file, with this user's Ray token
    where the UI reads it."""
    with FakeDashboard() as dashboard:
        dashboard.plant(tmp_path)
        monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
        monkeypatch.setenv("RAY_AUTH_TOKEN", RAY_TOKEN)
        for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
            monkeypatch.delenv(name, raising=False)
        yield dashboard


def test_the_ui_never_looks_up_its_cluster_in_rays_discovery_file(
    planted_dashboard: FakeDashboard, store: str, spec_dir: Path
) -> None:
    with _app(store, spec_dir, ray_address=UISettings().ray_address) as ui:  # the default: no --ray-address
        listed = ui.get("/api/jobs")
        launched = ui.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", "max_trials": 1})
        settings = ui.app.state.settings
    assert listed.status_code != 500 and launched.status_code != 500, (listed.text, launched.text)
    assert planted_dashboard.received == []  # never contacted, so never sent the token
    assert settings.ray_address == "http://127.0.0.1:8265"  # Ray's own default, on loopback
    # The recorder does see a UI that is sent to it, token and all: the empty list above is a finding.
    with _app(store, spec_dir, ray_address=f"http://{planted_dashboard.address}") as ui:
        ui.get("/api/jobs")
    assert planted_dashboard.received and f"Bearer {RAY_TOKEN}".encode() in planted_dashboard.received[0]


def test_an_environment_variable_never_redirects_the_token(
    planted_dashboard: FakeDashboard, store: str, spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's job client takes RAY_ADDRESS (or RAY_API_SERVER_ADDRESS) over the address it is given:
    the UI refuses to start, and refuses to talk to Ray, while one would redirect it."""
    monkeypatch.setenv("RAY_ADDRESS", f"http://{planted_dashboard.address}")
    with pytest.raises(InputError, match="RAY_ADDRESS="):
        check_bind(UISettings())
    with _app(store, spec_dir, ray_address="http://127.0.0.1:8265") as ui:
        response = ui.get("/api/jobs")
    assert response.status_code == 502 and "unset RAY_ADDRESS" in response.json()["detail"], response.text
    assert planted_dashboard.received == []


def test_rays_address_variables_are_addresses_the_user_gave_but_never_auto(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import elastune.ui
    import uvicorn

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the UI started serving, with an address it should have refused")

    monkeypatch.setattr(uvicorn, "run", started)  # a refusal comes before the server, or this fails
    monkeypatch.delenv("ELASTUNE_UI_TOKEN", raising=False)
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    port = str(free_port())
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert main(["ui", "--port", port]) == 2
    assert "discovery file" in capsys.readouterr().err
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    assert main(["ui", "--port", port, "--ray-address", "http://127.0.0.1:8265"]) == 2  # two answers: neither
    assert "RAY_ADDRESS='http://127.0.0.1:1' is set" in capsys.readouterr().err
    served: list[UISettings] = []
    monkeypatch.setattr(elastune.ui, "serve", served.append)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert main(["ui", "--port", port]) == 0
    assert served[0].ray_address == "10.0.0.5:6379" and served[0].broker_address() == "10.0.0.5:6379"


@pytest.mark.parametrize("flag", ["ray_address", "cluster_address"])
@pytest.mark.parametrize("value", ["auto", "local", "AUTO"])
def test_an_address_that_means_look_it_up_is_refused(flag: str, value: str) -> None:
    with pytest.raises(InputError, match="discovery file"):
        check_bind(UISettings(**{flag: value}))  # type: ignore[arg-type]


def test_the_memory_page_never_asks_ray_to_look_the_cluster_up() -> None:
    import ray
    from elastune.ui.memory import make_broker_reader, memory_view

    if ray.is_initialized():
        pytest.skip("this process is already a Ray driver; the reader would use that connection")
    assert UISettings().broker_address() == "127.0.0.1:6379"  # Ray's default GCS on loopback: an address
    view = memory_view(make_broker_reader("auto"), 60)
    assert not view["available"] and "discovery file" in view["reason"]
    assert not ray.is_initialized()  # refused before any connection


def test_help_and_readme_say_what_the_ui_talks_to(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--help"]) == 0
    text = re.sub(r"[\s│╭╮╰╯─]+", "", capsys.readouterr().out)  # the help's box and wrapping, gone
    assert "http://127.0.0.1:8265" in text and "127.0.0.1:6379" in text and "`auto`isrefused" in text
    assert "--all-jobs" in text and "--job-memory-ceiling" in text and "autoononeofitsnodes" not in text
    guide = (ROOT / "docs" / "ui.md").read_text()  # the README's Web UI section moved there
    section = guide[guide.index("## Options") : guide.index("## Security")]
    assert "| auto]" not in section and "--all-jobs" in section and "--job-memory-ceiling" in section


# ---- point 3: YAML from a client ------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "field", "said"),
    [
        ("seed=&a [*a]", "sets.seed", "anchor"),  # a list that contains itself (was a 500)
        ("seed=*a", "sets.seed", "alias"),
        (
            "workload_options.top_mlp=" + BILLION_LAUGHS.replace("\n", ", ").join("{}"),
            "sets.workload_options.top_mlp",
            "anchor",
        ),
        ("seed=!!python/object/apply:os.system [true]", "sets.seed", "tag"),
        ("seed=!!int 3", "sets.seed", "tag"),
        ("batch={<<: {micro: 8}}", "sets.batch", "merge key"),
        ("workload_options.top_mlp=" + "[" * 40 + "]" * 40, "sets.workload_options.top_mlp", "deep"),
        ("workload_options.top_mlp=[" + ",".join(["8"] * 200) + "]", "sets.workload_options.top_mlp", "values"),
    ],
)
def test_client_yaml_with_anchors_aliases_tags_or_merge_keys_is_refused_unexpanded(
    client: TestClient, item: str, field: str, said: str
) -> None:
    response = client.post("/api/jobs", json={"kind": "train", "sets": ["batch.micro=512", item]})
    found = _problems(response)
    assert set(found) == {field}, found
    assert said in found[field]["message"], found[field]
    assert len(response.content) <= 4096


def test_a_billion_laughs_body_is_refused_before_it_grows(client: TestClient) -> None:
    """The audit's case: a list of four levels of nine aliases each (under 250 characters) became,
    echoed back, a 12 MB error body and 769 MB held by the UI. Refused at its first anchor here."""
    levels = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"&{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abc", "bcd", strict=True)]
    item = f"workload_options.top_mlp=[{', '.join(levels)}]"
    assert len(item) < 250
    response = client.post("/api/jobs", json={"kind": "train", "sets": [item]})
    assert len(response.content) <= 4096, len(response.content)
    assert "anchor" in _problems(response)["sets.workload_options.top_mlp"]["message"]


def test_every_error_body_is_at_most_4_kb_and_says_what_it_left_out(client: TestClient) -> None:
    sets = [f"precison{i}=" + "x" * 450 for i in range(200)]  # 200 unknown keys, each echoing 450 characters
    response = client.post("/api/jobs", json={"kind": "train", "sets": sets})
    assert response.status_code == 422 and len(response.content) <= 4096, len(response.content)
    problems = response.json()["problems"]
    assert problems[0]["field"] == "sets.precison0" and "did you mean" in problems[0]["message"]
    assert problems[-1]["field"] == "problems" and "more problem(s) not shown" in problems[-1]["message"]
    too_many = client.post("/api/jobs", json={"kind": "train", "sets": ["x" * 500] * 201})  # the schema's own limit
    assert too_many.status_code == 422 and len(too_many.content) <= 4096


def test_the_job_itself_reads_its_overrides_and_stored_config_as_untrusted_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`elastune train --untrusted` (what a UI job runs): exit 2 naming the refusal, nothing trained."""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    assert main(["train", "--untrusted", "--set", "seed=&a [*a]"]) == 2
    assert "--set.seed" in (err := capsys.readouterr().err) and "anchor" in err, err
    planted = tmp_path / "best_config.yaml"  # a sweep's best config, from the tracking store
    planted.write_text(BILLION_LAUGHS)
    assert main(["train", str(planted), "--untrusted"]) == 2
    assert "anchor" in (err := capsys.readouterr().err), err
    assert main(["train", "--untrusted", "--set", "steps=100001", "--set", "warmup_steps=1"]) == 2
    assert "--set.steps" in (err := capsys.readouterr().err) and "100,000" in err, err
    assert not (tmp_path / "home").exists()  # refused before the checkpoint folder is made


# ---- point 4: jobs are priced before launch -------------------------------------------------

# Keys a client may set, near their maxima within the UI's caps: predicted at hundreds of GiB.
HUGE = ["data.rows_scale=1.0", "model.embedding_dim=1024", "batch.micro=65536", "eval.samples=1048576"]


def test_a_training_run_over_the_job_ceiling_is_refused_with_its_predicted_peak(client: TestClient) -> None:
    found = _problems(client.post("/api/jobs", json={"kind": "train", "sets": HUGE}))
    assert set(found) == {"predicted_peak_bytes"}, found
    peak = found["predicted_peak_bytes"]["value"]
    assert isinstance(peak, int) and peak > 2 * 2**30
    assert "predicted to peak at" in found["predicted_peak_bytes"]["message"]
    assert "--job-memory-ceiling" in found["predicted_peak_bytes"]["message"]
    small = client.post("/api/jobs", json={"kind": "train", "sets": ["steps=10", "warmup_steps=1"]})
    assert small.status_code == 503, small.text  # priced under the ceiling: on to the (absent) cluster


def test_a_best_config_from_a_sweep_is_priced_with_the_overrides(store: str, spec_dir: Path) -> None:
    with _app(store, spec_dir, job_memory_ceiling=2**20) as ui:  # 1 MiB: nothing fits
        response = ui.post("/api/jobs", json={"kind": "train", "from_sweep": "sw-trust"})
    assert "predicted_peak_bytes" in _problems(response)


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ("steps=100001", "sets.steps"),
        ("eval.samples=1048577", "sets.eval.samples"),
        ("eval.batch=65537", "sets.eval.batch"),
    ],
)
def test_a_ui_run_has_lower_caps_than_the_command_line(client: TestClient, item: str, field: str) -> None:
    found = _problems(client.post("/api/jobs", json={"kind": "train", "sets": ["warmup_steps=1", item]}))
    assert set(found) == {field}, found
    assert "command line" in found[field]["message"]


def test_the_default_ceiling_is_this_machines_memory_or_its_gpus(store: str, spec_dir: Path) -> None:
    import psutil
    from elastune.training import probe

    gpus = probe.cuda_devices()
    expected = min([int(psutil.virtual_memory().total), *(g.total_bytes for g in gpus[:1])])
    with _app(store, spec_dir) as ui:
        assert ui.get("/api/health").json()["job_memory_ceiling_bytes"] == expected


def test_a_sweep_is_held_under_the_job_ceiling(store: str, spec_dir: Path) -> None:
    with _app(store, spec_dir, job_memory_ceiling=64 * 2**20) as ui:  # the quick spec's reference: ~210 MiB
        found = _problems(ui.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick"}))
        assert "reference config" in found["spec"]["message"] and "predicted to peak" in found["spec"]["message"]
    with _app(store, spec_dir, job_memory_ceiling=2**30) as ui:
        over = _problems(ui.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", "memory_ceiling": "2GiB"}))
        assert "over this UI's job memory ceiling" in over["memory_ceiling"]["message"]
        fits = ui.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", "memory_ceiling": "512MiB"})
        assert fits.status_code == 503, fits.text
    # A spec without a ceiling of its own runs under the UI's: every proposal is screened against it.
    plan = plan_launch(
        SweepJob(spec="no_ceiling"), spec_dir=spec_dir, python="python", tracking_uri=None, job_ceiling=2**30
    )
    assert plan.argv[plan.argv.index("--memory-ceiling") + 1] == str(2**30)


# ---- point 11: the API docs page ------------------------------------------------------------


def test_the_docs_page_loads_swagger_from_this_server_and_keeps_no_token(store: str, spec_dir: Path) -> None:
    with _app(store, spec_dir, token="docs-test-token-0123456789abcdef") as ui:
        page = ui.get("/api/docs")  # open without the token, as before: it holds no data
        assert page.status_code == 200
        html = page.text
        assert not re.findall(r"(?:https?:)?//[^\s'\"<>]+", html), "the docs page names another server"
        assert '"persistAuthorization": true' not in html and '"persistAuthorization": false' in html
        assets = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert {"/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css"} <= set(assets), assets
        for url in assets:
            response = ui.get(url)
            assert response.status_code == 200 and response.content, url
        assert "SwaggerUIBundle" in ui.get("/docs-assets/swagger-ui-bundle.js").text
        assert ".swagger-ui" in ui.get("/docs-assets/swagger-ui.css").text
        # the file is fixed: nothing in the request chooses another
        probe = ui.get("/docs-assets/swagger-ui.css", params={"path": "/etc/passwd", "name": "../../pyproject.toml"})
        assert probe.content == ui.get("/docs-assets/swagger-ui.css").content
