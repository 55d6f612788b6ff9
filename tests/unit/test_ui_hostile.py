"""Issue 17, section A, as an attacker would try it: what a client sends never names a file, runs
code, or answers 5xx. Against the real app (FastAPI's TestClient), a real SQLite MLflow store and
no Ray cluster (a launch that passes validation meets an unreachable cluster: 503, nothing runs).

The served counterparts (a real uvicorn UI, the token-auth Ray head, jobs that really run) are in
tests/integration/served/test_catalogue_ui.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
import socket
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from elastune.cli import main
from elastune.config import RunConfig
from elastune.tracking.artifacts import trials_csv
from elastune.ui import UISettings, create_app
from elastune.ui.launch import jsonable
from elastune.untrusted import CLIENT_KEYS, CLIENT_OPTIONS, override_problems
from elastune.workloads.registry import options_model, resolve
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_ui_api import free_port, write_sweep

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hostile-tests-token-0123456789abcdef"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    write_sweep(uri, "sw-hostile")
    return uri


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("specs")
    (folder / "dlrm_quick.yaml").write_text((ROOT / "search_spaces" / "dlrm_quick.yaml").read_text())
    (folder / "not_yaml.yaml").write_text("name: [\n")
    (folder / "a_list.yaml").write_text("- 1\n- 2\n")
    (folder / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage\x80")
    (folder / "wrong_types.yaml").write_text("name: x\nparameters: 3\nbudget: {max_trials: .nan}\n")
    return folder


def _app(store: str, spec_dir: Path, token: str | None = None) -> TestClient:
    settings = UISettings(
        tracking_uri=store,
        spec_dir=spec_dir,
        ray_address=f"http://127.0.0.1:{free_port()}",  # nothing listens: a launch meets a 503
        allowed_hosts=("testserver",),
        token=token,
    )
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(store: str, spec_dir: Path) -> Iterator[TestClient]:
    with _app(store, spec_dir) as c:
        yield c


def _post_raw(client: TestClient, text: str, path: str = "/api/jobs") -> Any:
    return client.post(
        path, content=text.encode("utf-8", "surrogatepass"), headers={"content-type": "application/json"}
    )


# ---- point 1: no path, directory or command from the client ---------------------------------


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["checkpoint.path=/tmp/evil.pt", "checkpoint.resume=true", "steps=2"], "sets.checkpoint.path"),
        (["checkpoint.resume=true"], "sets.checkpoint.resume"),
        (["checkpoint.every=1"], "sets.checkpoint.every"),
        (["data.path=/etc/hostname", "data.source=parquet"], "sets.data.path"),
        (["data.eval_path=/etc/hostname"], "sets.data.eval_path"),
        (["data.source=criteo_tsv"], "sets.data.source"),
        (["checkpoint={path: /tmp/evil.pt, resume: true}"], "sets.checkpoint.path"),  # a whole section
        (["data={path: /etc/hostname}"], "sets.data.path"),
    ],
)
def test_a_train_job_never_takes_a_path_from_the_client(client: TestClient, sets: list[str], field: str) -> None:
    response = client.post("/api/jobs", json={"kind": "train", "sets": sets})
    assert response.status_code == 422, response.text
    found = {p["field"]: p for p in response.json()["problems"]}
    assert field in found, found
    assert "remote client" in found[field]["message"]


def test_the_allowlist_holds_no_field_that_names_a_file() -> None:
    def path_typed(annotation: Any) -> bool:
        return annotation is Path or any(path_typed(a) for a in typing.get_args(annotation))

    def walk(model: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                yield from walk(annotation, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}", annotation

    fields = dict(walk(RunConfig))
    # a built-in workload's open options: fields of its own options model, as typed there
    for workload, keys in CLIENT_OPTIONS.items():
        model = options_model(resolve(workload), workload)
        assert model is not None, workload
        options = dict(walk(model, "workload_options."))
        assert {f"workload_options.{key}" for key in keys} <= set(options), (workload, keys - set(model.model_fields))
        fields |= {key: options[key] for key in (f"workload_options.{k}" for k in keys)}
    assert set(fields) >= CLIENT_KEYS, CLIENT_KEYS - set(fields)  # every allowed key exists
    assert [key for key in CLIENT_KEYS if path_typed(fields[key])] == []
    assert not any(key.startswith("checkpoint.") for key in CLIENT_KEYS)
    assert "data.source" not in CLIENT_KEYS  # every non-synthetic source reads data.path


def test_allowed_overrides_pass_the_allowlist() -> None:
    assert override_problems(["batch.micro=512", "optimizer.lr=0.01", "workload_options.top_mlp=[8]"]) == []


def test_a_planted_best_config_is_refused_before_launch(store: str, spec_dir: Path) -> None:
    """Anyone who can write the tracking store could plant a best config that resumes from a pickle:
    Train this (from_sweep) checks the stored config against the same allowlist."""
    from elastune.tracking.mlflow import SweepTracker, load_sweep

    record = load_sweep("sw-hostile", store)
    record.sweep_id = "sw-planted"
    record.mlflow_run_id = None
    for trial in record.trials:
        trial.config = {**trial.config, "checkpoint": {"path": "/tmp/evil.pt", "every": 0, "resume": True}}
    tracker = SweepTracker(store)
    tracker.start_sweep(record)
    for trial in record.trials:
        tracker.log_trial(record, trial)
    tracker.finish_sweep(record)
    with _app(store, spec_dir) as client:
        response = client.post("/api/jobs", json={"kind": "train", "from_sweep": "sw-planted"})
        clean = client.post("/api/jobs", json={"kind": "train", "from_sweep": "sw-hostile"})
    assert response.status_code == 422, response.text
    fields = {p["field"] for p in response.json()["problems"]}
    assert {"from_sweep.checkpoint.path", "from_sweep.checkpoint.resume"} <= fields
    assert clean.status_code == 503  # the untouched sweep passes validation and meets the absent cluster


def test_the_train_job_itself_holds_a_stored_config_to_the_allowlist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job re-checks (the store may change after the UI looked): exit 2, nothing trained."""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    planted = tmp_path / "best_config.yaml"
    planted.write_text("checkpoint: {path: /tmp/evil.pt, resume: true}\ndata: {source: parquet, path: /etc/hostname}\n")
    assert main(["train", str(planted), "--untrusted"]) == 2
    err = capsys.readouterr().err
    for field in ("config.checkpoint.path", "config.checkpoint.resume", "config.data.path", "config.data.source"):
        assert field in err
    assert main(["train", "--untrusted", "--set", "checkpoint.path=/tmp/evil.pt"]) == 2
    assert "--set.checkpoint.path" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()  # refused before the checkpoint folder is made


def test_an_untrusted_run_checkpoints_where_the_server_chooses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import TINY

    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    argv = ["train", "--untrusted", "--format", "json"]
    for item in TINY:
        argv += ["--set", item]
    assert main(argv) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    written = Path(config["checkpoint"]["path"])
    assert written.parent.parent == tmp_path / "home" / "jobs"
    assert written.is_file() and written.name == "checkpoint.pt"


# ---- point 3: no 5xx, whatever the body -------------------------------------------------


HOSTILE_BODIES = [
    '{"kind": "sweep", "spec": "dlrm_quick", "max_trials": NaN}',
    '{"kind": "sweep", "spec": "dlrm_quick", "cpus_per_trial": NaN}',
    '{"kind": "sweep", "spec": "dlrm_quick", "cpus_per_trial": Infinity}',
    '{"kind": "sweep", "spec": "dlrm_quick", "gpus_per_trial": -Infinity}',
    '{"kind": "sweep", "spec": "dlrm_quick", "cpus_per_trial": 1e999}',
    '{"kind": "sweep", "spec": "dlrm_quick", "cpus_per_trial": ' + "1" * 5000 + ".5}",
    '{"kind": "sweep", "spec": "dlrm_quick", "max_trials": ' + "9" * 5000 + "}",
    '{"kind": "sweep", "spec": "\\ud800"}',
    '{"kind": "sweep", "spec": "dlrm_quick", "memory_ceiling": "\\udfff"}',
    '{"kind": "train", "sets": ["\\ud800=1"]}',
    '{"kind": "train", "sets": ["optimizer.lr=.nan"]}',
    '{"kind": "train", "sets": ["optimizer.lr=.inf"]}',
    '{"kind": "train", "sets": ["optimizer.lr=1e999"]}',
    '{"kind": "train", "from_sweep": "\\ud800"}',
    '{"kind": "\\ud800"}',
    '{"\\ud800": 1}',
    "[1, 2, 3]",
    '"just a string"',
    "NaN",
    "{",
]


@pytest.mark.parametrize("body", HOSTILE_BODIES)
def test_a_hostile_body_is_a_422_never_a_500(client: TestClient, body: str) -> None:
    response = _post_raw(client, body)
    # 400: a body Python's JSON parser refuses outright (an integer past 4300 digits); 422: the rest.
    assert response.status_code in (400, 422), response.text
    parsed = json.loads(response.text, parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON answer"))
    assert parsed["detail"] and (response.status_code == 400 or parsed["problems"]), parsed


@pytest.mark.parametrize("steps", ["9" * 400, "1e999", ".inf", "-1", "0"])
def test_train_numbers_are_bounded(client: TestClient, steps: str) -> None:
    response = client.post("/api/jobs", json={"kind": "train", "sets": [f"steps={steps}", "warmup_steps=0"]})
    assert response.status_code == 422, response.text
    assert "sets.steps" in {p["field"] for p in response.json()["problems"]}


def test_a_bad_spec_in_the_folder_is_listed_as_invalid_with_its_problems(client: TestClient) -> None:
    response = client.get("/api/specs")
    assert response.status_code == 200, response.text
    specs = {s["name"]: s for s in response.json()}
    assert specs["dlrm_quick"]["valid"] is True
    for name in ("not_yaml", "a_list", "binary", "wrong_types"):
        assert specs[name]["valid"] is False, specs[name]
        assert specs[name]["problems"] and all(isinstance(p, str) and p for p in specs[name]["problems"])
    kinds = client.get("/api/job-kinds")
    assert kinds.status_code == 200
    settable = set(kinds.json()["settable_keys"])  # what the training form offers
    assert "batch.micro" in settable and not {"checkpoint.path", "data.path", "data.eval_path"} & settable


_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
)


@given(_VALUES)
def test_an_echoed_value_always_encodes(value: Any) -> None:
    text = json.dumps(jsonable(value), allow_nan=False)
    text.encode("utf-8")  # no lone surrogate survives
    assert len(text) < 100_000


def test_an_echoed_value_keeps_what_it_can() -> None:
    assert jsonable(math.nan) == "nan" and jsonable(-math.inf) == "-inf"
    assert jsonable(3) == 3 and jsonable(0.5) == 0.5 and jsonable("ok") == "ok"
    assert jsonable("\ud800") == "\\ud800"
    assert len(jsonable("x" * 10_000)) <= 300


# ---- point 4: cross-site writes ---------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "null"},
        {"Origin": "https://evil.example"},
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
@pytest.mark.parametrize("path", ["/api/jobs", "/api/jobs/some-job/stop"])
def test_cross_site_writes_are_refused(client: TestClient, headers: dict[str, str], path: str) -> None:
    response = client.post(path, json={"kind": "sweep", "spec": "dlrm_quick"}, headers=headers)
    assert response.status_code == 403, response.text


def test_same_site_and_scripted_writes_pass_the_guard(client: TestClient) -> None:
    body = {"kind": "sweep", "spec": "dlrm_quick", "max_trials": 0}  # invalid: reaches validation, nothing runs
    for headers in ({"Origin": "http://testserver"}, {"Referer": "http://testserver/jobs"}, {}):
        assert client.post("/api/jobs", json=body, headers=headers).status_code == 422, headers


# ---- point 5: the token -------------------------------------------------------------------


def test_the_docs_page_and_schema_open_and_every_data_call_needs_the_token(store: str, spec_dir: Path) -> None:
    with _app(store, spec_dir, token=TOKEN) as client:
        assert client.get("/api/docs").status_code == 200
        schema = client.get("/openapi.json")
        assert schema.status_code == 200
        assert schema.json()["components"]["securitySchemes"]  # the docs page's Authorize button
        assert client.get("/api/health").status_code == 401
        assert client.get("/api/health", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_token_on_the_command_line_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--token", TOKEN, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "ELASTUNE_UI_TOKEN" in err and "--token-file" in err and "UI on" not in err


def test_the_token_is_read_once_and_leaves_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from elastune.cli.ui import _read_token

    monkeypatch.setenv("ELASTUNE_UI_TOKEN", TOKEN)
    assert _read_token(None) == TOKEN
    assert "ELASTUNE_UI_TOKEN" not in os.environ  # a local Ray started by the UI, and its jobs, never see it
    file = tmp_path / "token"
    file.write_text(TOKEN + "\n")
    assert _read_token(file) == TOKEN


@pytest.mark.parametrize("content", ["", "two\nlines"])
def test_a_bad_token_file_is_an_input_error(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "token"
    file.write_text(content)
    assert main(["ui", "--token-file", str(file), "--port", str(free_port())]) == 2
    assert "--token-file" in capsys.readouterr().err
    assert main(["ui", "--token-file", str(tmp_path / "missing"), "--port", str(free_port())]) == 2


# ---- point 6: a sweep id the list shows always opens -------------------------------------


@pytest.mark.parametrize("sweep_id", ["my sweep 1", "it's-odd", "ünïcode-sweep", "a:b.c-20261124"])
def test_every_listed_sweep_opens(store: str, spec_dir: Path, sweep_id: str) -> None:
    write_sweep(store, sweep_id)
    with _app(store, spec_dir) as client:
        listed = {s["sweep_id"] for s in client.get("/api/sweeps").json()}
        assert sweep_id in listed
        assert client.get(f"/api/sweeps/{quote(sweep_id, safe='')}").status_code == 200
        assert client.get(f"/api/sweeps/{quote(sweep_id, safe='')}/trials.csv").status_code == 200


# ---- point 7: busy port, Ray's own errors, CSV cells -------------------------------------


def test_a_busy_port_is_an_input_error_before_the_ui_says_where_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["ui", "--port", str(port)]) == 2
    err_out = capsys.readouterr()
    assert f"--port={port}" in err_out.err and "UI on" not in err_out.out + err_out.err


def test_csv_cells_that_a_spreadsheet_would_run_are_made_inert(store: str) -> None:
    from elastune.tracking.mlflow import load_sweep

    record = load_sweep("sw-hostile", store)
    record.trials[0].params = {"embedding.strategy": '=HYPERLINK("http://evil")', "x": "@SUM(1)", "y": "+1+1"}
    record.trials[1].params = {"embedding.strategy": "-2+3", "x": "-0.5", "y": "\tcmd"}
    rows = list(csv.DictReader(io.StringIO(trials_csv(record))))
    cells = [v for row in rows for k, v in row.items() if k.startswith("param.") and v]
    assert cells, rows
    assert all(not c.startswith(("=", "+", "@", "\t")) for c in cells), cells
    assert "'-2+3" in cells and "-0.5" in cells  # a formula is escaped, a negative number stays a number


# ---- point 3: schema-valid input too, at its boundaries ----------------------------------


def test_schema_valid_launches_at_their_bounds_reach_the_cluster_and_nothing_else(client: TestClient) -> None:
    """Every numeric field at its smallest and largest valid value passes validation and meets the
    absent cluster (503, said as such): valid input is never a 500 either."""
    from elastune.ui.launch import SweepJob

    bounds = {"max_trials": (1, 10_000), "max_concurrent": (1, 1024), "cpus_per_trial": (1e-9, 1024)}
    bounds["gpus_per_trial"] = (0, 64)
    assert set(bounds) == {k for k, f in SweepJob.model_fields.items() if f.annotation in (int | None, float | None)}
    for field, values in bounds.items():
        for value in values:
            response = client.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", field: value})
            assert response.status_code == 503, (field, value, response.text)
            assert "Cannot reach the Ray job server" in response.json()["detail"]


def test_fuzzing_valid_and_invalid_input_finds_no_server_error(client: TestClient) -> None:
    """Schemathesis over every operation, schema-valid input included (the launch endpoint too:
    this UI's Ray is absent, so a valid launch is the documented 503 and nothing runs)."""
    import schemathesis
    from hypothesis import HealthCheck, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    errors: list[str] = []
    seen: dict[str, set[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: Any) -> None:
                response = case.call(headers={"host": "testserver"})
                status = response.status_code
                seen.setdefault(case.operation.label, set()).add(status)
                if status >= 500 and status != 503:
                    errors.append(f"{case.method} {case.formatted_path} -> {status}: {response.text[:200]}")

            try:
                call()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE and not list(operation.iter_parameters()), operation.label
    assert not errors, "\n".join(errors[:10])
    assert len(seen) >= 10, seen


def test_a_refused_workload_import_path_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's `workload=MODULE:FACTORY` is refused, and the config's validation (which builds
    the workload) never sees it: importing the module would run its code. The other pairs are still
    checked, so every problem comes back at once."""
    from ui.launch import set_problems

    marker = tmp_path / "imported"
    (tmp_path / "planted_workload_mod.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\ndef make(cfg, options): ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = set_problems(["workload=planted_workload_mod:make", "batch.micro=0"])
    assert not marker.exists()
    assert {p.path for p in problems} >= {"sets.workload", "sets.batch.micro"}
