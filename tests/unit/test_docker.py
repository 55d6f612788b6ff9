"""docker/: the compose file's wiring and the image's install steps, checked without a Docker engine.

Each check is a function returning the problems it finds, run on the shipped files (none) and on
deliberately broken copies (at least one), so a check that cannot fail is caught too.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0"}  # 0.0.0.0 only ever as a bind address
SECRETS_DIR = "/run/secrets/"

# host:port inside a command, an environment value or a health check: a service this file must define
_HOST_PORT = re.compile(r"(?<![\w.-])([A-Za-z0-9][\w.-]*):(\d{2,5})\b")


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def words(service: dict[str, Any]) -> list[str]:
    """The service's command, environment values and health check, as words."""
    command = service.get("command", [])
    found = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    found += [str(v) for v in (service.get("environment") or {}).values()]
    found += [str(w) for w in service.get("healthcheck", {}).get("test", [])]
    return found


def host_refs(service: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m[1], m[2]) for word in words(service) for m in _HOST_PORT.finditer(word)}


def option(command: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in an argument list."""
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    return None


# -- the compose checks


def host_side(port: str | dict[str, Any]) -> tuple[str | None, str]:
    """(host address, host port) of a published port, short syntax (IP:HOST_PORT:CONTAINER_PORT) or long."""
    if isinstance(port, dict):
        return port.get("host_ip"), str(port.get("published", ""))
    parts = str(port).split(":")
    return (parts[0], parts[1]) if len(parts) == 3 else (None, parts[0])


def port_problems(compose: dict[str, Any]) -> list[str]:
    return [
        f"{name}: port {port!r} is not bound to 127.0.0.1 on the host"
        for name, service in services(compose).items()
        for port in service.get("ports", [])
        if host_side(port)[0] != "127.0.0.1"
    ]


def reference_problems(compose: dict[str, Any]) -> list[str]:
    names = set(services(compose))
    return [
        f"{name}: {host}:{port} names no service"
        for name, service in services(compose).items()
        for host, port in sorted(host_refs(service))
        if host not in names and host not in LOOPBACK
    ]


def mlflow_host_problems(compose: dict[str, Any]) -> list[str]:
    """Every Host header MLflow will be sent is in its --allowed-hosts (MLflow 3 answers others 403)."""
    mlflow = services(compose)["mlflow"]
    allowed = (option(mlflow["command"], "--allowed-hosts") or "").split(",")
    others = [service for name, service in services(compose).items() if name != "mlflow"]
    sent = {f"{host}:{port}" for other in others for host, port in host_refs(other) if host == "mlflow"}
    for port in mlflow.get("ports", []):  # what a browser on the host sends
        sent |= {f"127.0.0.1:{host_side(port)[1]}", f"localhost:{host_side(port)[1]}"}
    if not any(s.startswith("mlflow:") for s in sent):
        return ["no service reaches mlflow by its service name"]
    return [f"mlflow: --allowed-hosts does not cover {s}" for s in sorted(sent) if not _allowed(s, allowed)]


def _allowed(host: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(host, p) if "*" in p else host == p for p in patterns if p)


def health_problems(compose: dict[str, Any]) -> list[str]:
    problems = []
    every = services(compose)
    for name, service in every.items():
        if not service.get("healthcheck", {}).get("test"):
            problems.append(f"{name}: no healthcheck")
        if service.get("restart") != "unless-stopped":
            problems.append(f"{name}: restart is {service.get('restart')!r}, not unless-stopped")
        depends = service.get("depends_on", {})
        if not isinstance(depends, dict):
            problems.append(f"{name}: depends_on is a list; it waits for a start, not for health")
            continue
        for other, how in depends.items():
            if (how or {}).get("condition") != "service_healthy":
                problems.append(f"{name}: depends_on {other} without condition service_healthy")
            elif not every.get(other, {}).get("healthcheck"):
                problems.append(f"{name}: waits for {other}'s health, which has no healthcheck")
    return problems


def token_problems(compose: dict[str, Any]) -> list[str]:
    """Tokens are files (compose secrets) a service mounts, never values in its environment or command."""
    problems = []
    declared = compose.get("secrets", {})
    for name, service in services(compose).items():
        mounted = set(service.get("secrets", []))
        for key, value in (service.get("environment") or {}).items():
            if "TOKEN" in key and not key.endswith("_PATH"):
                problems.append(f"{name}: {key} holds the token inline; use a secret and {key}_PATH")
            elif key.endswith("TOKEN_PATH"):
                secret = str(value).removeprefix(SECRETS_DIR)
                if not str(value).startswith(SECRETS_DIR) or secret not in mounted:
                    problems.append(f"{name}: {key}={value!r} is not a secret this service mounts")
        command = words({"command": service.get("command", [])})
        if "--token" in command:
            problems.append(f"{name}: a token on the command line")
        token_file = option(command, "--token-file")
        if token_file is not None and token_file.removeprefix(SECRETS_DIR) not in mounted:
            problems.append(f"{name}: --token-file {token_file} is not a secret this service mounts")
        problems += [f"{name}: mounts undeclared secret {s!r}" for s in sorted(mounted - set(declared))]
    for secret, source in declared.items():
        if "file" not in source:
            problems.append(f"secret {secret}: not a file")
    return problems


def volume_problems(compose: dict[str, Any]) -> list[str]:
    """Named volumes are declared, MLflow's store is on one, and ELASTUNE_HOME (sweep state for
    --resume, Tune's experiments) is one volume shared by every Ray node."""
    problems = []
    declared = set(compose.get("volumes") or {})
    homes: dict[str, str] = {}
    for name, service in services(compose).items():
        mounts = dict(str(v).split(":", 1) for v in service.get("volumes", []))
        problems += [f"{name}: volume {v!r} is not declared" for v in mounts if v not in declared]
        home = (service.get("environment") or {}).get("ELASTUNE_HOME")
        if home is not None:
            volume = next((v for v, path in mounts.items() if path.split(":")[0] == home), None)
            if volume is None:
                problems.append(f"{name}: ELASTUNE_HOME={home} is not on a volume")
            else:
                homes[name] = volume
    ray_nodes = {n for n, s in services(compose).items() if words({"command": s["command"]})[:2] == ["ray", "start"]}
    if set(homes) != ray_nodes or len(set(homes.values())) != 1:
        problems.append(f"ELASTUNE_HOME volumes {homes} are not one volume on every Ray node {sorted(ray_nodes)}")
    store = option(services(compose)["mlflow"]["command"], "--backend-store-uri") or ""
    mlflow_mounts = [str(v).split(":")[1] for v in services(compose)["mlflow"].get("volumes", [])]
    if not any(store.removeprefix("sqlite:///").startswith(path + "/") for path in mlflow_mounts):
        problems.append(f"mlflow: its store {store!r} is not on a volume")
    return problems


def ui_problems(compose: dict[str, Any]) -> list[str]:
    """The UI sends jobs to the job server's URL and reaches the EDO broker through Ray Client."""
    ui, head = services(compose)["ui"], services(compose)["ray-head"]
    jobs = option(ui["command"], "--ray-address") or ""
    broker = option(ui["command"], "--cluster-address") or ""
    client_port = option(head["command"], "--ray-client-server-port")
    problems = []
    if not jobs.startswith("http://ray-head:"):
        problems.append(f"ui: --ray-address {jobs!r} is not the head's job server URL")
    if broker != f"ray://ray-head:{client_port}":
        problems.append(f"ui: --cluster-address {broker!r} is not the head's Ray Client port ({client_port})")
    return problems


COMPOSE_CHECKS: list[Callable[[dict[str, Any]], list[str]]] = [
    port_problems,
    reference_problems,
    mlflow_host_problems,
    health_problems,
    token_problems,
    volume_problems,
    ui_problems,
]


@pytest.mark.parametrize("check", COMPOSE_CHECKS, ids=lambda c: c.__name__)
def test_the_compose_file_passes(check: Callable[[dict[str, Any]], list[str]]) -> None:
    assert check(COMPOSE) == []


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(compose: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = compose
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _replace_in_command(service: str, old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(compose: dict[str, Any]) -> None:
        command = compose["services"][service]["command"]
        compose["services"][service]["command"] = [w.replace(old, new) for w in command]

    return change


BROKEN: list[tuple[Callable[[dict[str, Any]], list[str]], Callable[[dict[str, Any]], None]]] = [
    (port_problems, _set("services.ui.ports", ["8710:8710"])),
    (port_problems, _set("services.mlflow.ports", ["0.0.0.0:5000:5000"])),
    (reference_problems, _replace_in_command("ray-worker", "ray-head:6379", "head:6379")),
    (mlflow_host_problems, _replace_in_command("mlflow", "mlflow:5000,", "")),
    (mlflow_host_problems, _set("services.ray-head.environment.MLFLOW_TRACKING_URI", "http://mlflow:5001")),
    (health_problems, _set("services.ray-worker.depends_on", ["ray-head"])),
    (health_problems, _set("services.ui.depends_on.mlflow", {"condition": "service_started"})),
    (health_problems, _set("services.mlflow.healthcheck", {})),
    (health_problems, _set("services.ray-worker.restart", "no")),
    (token_problems, _set("services.ray-head.environment.RAY_AUTH_TOKEN", "${RAY_AUTH_TOKEN}")),
    (token_problems, _set("services.ui.secrets", ["ray_token"])),  # --token-file's secret not mounted
    (token_problems, _set("secrets.ray_token", {"environment": "RAY_AUTH_TOKEN"})),
    (volume_problems, _set("services.ray-worker.volumes", [])),
    (volume_problems, _set("volumes", {"mlflow-data": {}})),
    (ui_problems, _replace_in_command("ui", "ray://ray-head:10001", "http://ray-head:8265")),
]


@pytest.mark.parametrize(("check", "breakage"), BROKEN, ids=lambda x: getattr(x, "__name__", ""))
def test_each_check_fails_on_a_broken_copy(
    check: Callable[[dict[str, Any]], list[str]], breakage: Callable[[dict[str, Any]], None]
) -> None:
    broken = copy.deepcopy(COMPOSE)
    breakage(broken)
    assert check(broken) != []


def test_every_flag_in_a_command_is_one_the_program_takes() -> None:
    """`elastune ui`, `ray start` and `mlflow server` flags, against the installed commands."""
    import click
    import typer
    from elastune.cli.app import app
    from mlflow.cli import server
    from ray.scripts.scripts import start

    elastune_ui = typer.main.get_command(app).commands["ui"]
    programs: dict[tuple[str, str], click.Command] = {
        ("elastune", "ui"): elastune_ui,
        ("ray", "start"): start,
        ("mlflow", "server"): server,
    }
    for name, service in services(COMPOSE).items():
        command = [str(w) for w in service["command"]]
        known = {opt for param in programs[(command[0], command[1])].params for opt in param.opts}
        flags = {w.split("=", 1)[0] for w in command[2:] if w.startswith("--")}
        assert flags <= known, f"{name}: {sorted(flags - known)}"


def test_the_token_files_are_git_ignored() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for secret in COMPOSE["secrets"].values():
        path = (ROOT / "docker" / secret["file"]).resolve().relative_to(ROOT)
        assert f"/{path.parent}/" in ignored, f"{path} is not git-ignored"


# -- the Dockerfile against the README's install (Makefile, constraints.txt, pyproject.toml)


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in dockerfile.splitlines() if not line.lstrip().startswith("#"))
    )
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def args(dockerfile: str) -> dict[str, str]:
    return dict(a.split("=", 1) for i, a in instructions(dockerfile) if i == "ARG" and "=" in a)


def copied(dockerfile: str) -> set[str]:
    sources = set()
    for instruction, arguments in instructions(dockerfile):
        if instruction == "COPY":
            sources |= {w.rstrip("/") for w in shlex.split(arguments)[:-1] if not w.startswith("--")}
    return sources


def build_inputs() -> set[str]:
    """What setuptools reads to build elastune: pyproject.toml, the readme, the license files and
    every package root."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    roots = {root.split("/")[0] for root in project["tool"]["setuptools"]["package-dir"].values()}
    return {"pyproject.toml", project["project"]["readme"], *project["project"]["license-files"], *roots}


def dockerfile_problems(dockerfile: str) -> list[str]:
    problems = [f"not copied into the image: {p}" for p in sorted(build_inputs() - copied(dockerfile))]
    base = next(a for i, a in instructions(dockerfile) if i == "FROM")
    if not re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base):
        problems.append(f"FROM {base}: not a pinned python 3.11 patch release")
    installs = [a for i, a in instructions(dockerfile) if i == "RUN" and "pip install" in a]
    for install in installs:
        requirements = [w for w in shlex.split(install.split("pip install", 1)[1]) if not w.startswith("-")]
        if "-c constraints.txt" not in install and not all("==" in r for r in requirements):
            problems.append(f"RUN {install}: neither constrained by constraints.txt nor pinned")
    if "constraints.txt" not in copied(dockerfile):
        problems.append("constraints.txt is not copied")
    project = next((a for a in installs if '".[' in a), "")
    if "--no-build-isolation" not in project:
        problems.append("elastune is built in an isolated environment with unpinned build tools")
    build_tools = {
        re.split(r"[<>=]", r)[0]
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    }
    pinned = {m for install in installs for m in re.findall(r"([\w-]+)==", install)}
    problems += [f"build tool {t} is not pinned" for t in sorted(build_tools - pinned)]
    return problems


def makefile_install() -> tuple[str, set[str]]:
    """The Makefile's torch pin and the extras `make install` installs elastune with."""
    makefile = (ROOT / "Makefile").read_text()
    torch = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile, re.M)
    extras = re.search(r"-c constraints\.txt -e '\.\[([\w,]+)\]'", makefile)
    assert torch and extras, "the Makefile's install target changed shape; update this test"
    return torch[1], set(extras[1].split(","))


def test_the_dockerfile_installs_what_make_install_does() -> None:
    assert dockerfile_problems(DOCKERFILE) == []
    torch, extras = makefile_install()
    build_args = args(DOCKERFILE)
    assert build_args["TORCH"] == torch
    assert set(build_args["EXTRAS"].split(",")) == extras - {"dev"}  # the image has no dev tools
    constraints = (ROOT / "constraints.txt").read_text()
    assert re.search(rf"^{re.escape(torch)}\+cpu$", constraints, re.M), "constraints.txt pins another torch"
    assert build_args["TORCH_INDEX"].endswith("/whl/cpu")  # the build constraints.txt pins


def test_the_ui_spec_folder_is_in_the_image() -> None:
    spec_dir = option([str(w) for w in services(COMPOSE)["ui"]["command"]], "--spec-dir") or ""
    workdir = next(a for i, a in instructions(DOCKERFILE) if i == "WORKDIR")
    assert Path(spec_dir).parent == Path(workdir) and Path(spec_dir).name in copied(DOCKERFILE)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("COPY pyproject.toml README.md LICENSE ./", "COPY pyproject.toml README.md ./"),
        ("COPY ui ./ui\n", ""),
        ("FROM python:3.11.14-slim", "FROM python:3.11-slim"),
        ('-c constraints.txt ".[${EXTRAS}]"', '".[${EXTRAS}]"'),
        ("--no-build-isolation ", ""),
        ("setuptools==84.2.1 ", "setuptools "),
    ],
)
def test_the_dockerfile_check_fails_on_a_broken_copy(old: str, new: str) -> None:
    assert old in DOCKERFILE
    assert dockerfile_problems(DOCKERFILE.replace(old, new)) != []


# -- .dockerignore: the build context holds what the Dockerfile COPYs, and no token, store or venv

DOCKERIGNORE = (ROOT / ".dockerignore").read_text()
# Never in the build context (whatever is or is not on this machine now): the compose file's token
# files are added below from the compose file itself.
NEVER_SENT = [
    ".git/config",
    ".venv/bin/python",
    "mlflow.db",
    "mlruns/0/meta.yaml",
    "mlartifacts/1/abc/artifacts/model.pt",
    "build/lib/elastune/config.py",
    "platform/elastune/__pycache__/config.cpython-311.pyc",
    "ui/__pycache__/app.cpython-311.pyc",
    "platform/elastune.egg-info/PKG-INFO",
    "run.ckpt",
    "tests/unit/test_docker.py",
    "bench/RESULTS.md",
    "docker/secrets/another_token",
]


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(exception, regex) per line of a .dockerignore, as docker's builder reads it (moby's
    patternmatcher): comments and blank lines skipped, a leading '!' an exception, a leading '/'
    dropped; '**/' any folders (none too), '*' and '?' within one path element. Character classes and
    escapes are refused: this test does not implement them, so the file must not use them."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        assert not set(pattern) & set("[]\\"), f".dockerignore: {raw!r} uses a pattern this test cannot read"
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        patterns.append((exception, re.compile(f"^{regex}$")))
    return patterns


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether docker leaves `path` (relative to the context) out: the last pattern matching it, or a
    folder above it, decides (moby's MatchesOrParentMatches)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for exception, regex in patterns:
        if any(regex.match(c) for c in candidates):
            out = not exception
    return out


def _context_files(source: str) -> list[str]:
    """The files under a COPY source in this checkout, less what a local install or run leaves there."""
    top = ROOT / source
    if top.is_file():
        return [source]
    leftovers = {"__pycache__"}
    return [
        str(path.relative_to(ROOT))
        for path in sorted(top.rglob("*"))
        if path.is_file() and not leftovers & set(path.parts) and not any(p.endswith(".egg-info") for p in path.parts)
    ]


def dockerignore_problems(dockerignore: str) -> list[str]:
    patterns = ignore_patterns(dockerignore)
    problems = [
        f"left out of the build context but COPYed: {path}"
        for source in sorted(copied(DOCKERFILE))
        for path in _context_files(source)
        if ignored(path, patterns)
    ]
    secrets = [str(Path("docker", s["file"])) for s in COMPOSE["secrets"].values()]
    never = [*NEVER_SENT, *(str(Path(p)) for p in secrets)]
    problems += [f"sent to the builder: {path}" for path in never if not ignored(path, patterns)]
    return problems


def test_the_build_context_holds_what_the_image_copies_and_no_secret() -> None:
    assert {"platform", "ui", "jobs", "README.md"} <= copied(DOCKERFILE)
    assert len(_context_files("platform")) > 50  # the walk found the sources it checks
    assert dockerignore_problems(DOCKERIGNORE) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("!ui\n", "", "COPYed: ui/"),  # the UI's sources left out
        ("!README.md\n", "", "COPYed: README.md"),
        ("*\n", "", "sent to the builder: .venv/"),  # an allowlist no more: everything goes
        ("!search_spaces\n", "!search_spaces\n!docker\n", "sent to the builder: docker/secrets/ray_token"),
        ("**/__pycache__\n**/*.pyc\n", "", "sent to the builder: platform/elastune/__pycache__/"),
        ("**/*.egg-info\n", "", "sent to the builder: platform/elastune.egg-info/"),
        ("!platform\n", "!platform\n!mlflow.db\n", "sent to the builder: mlflow.db"),
    ],
)
def test_the_dockerignore_check_fails_on_a_broken_copy(old: str, new: str, expected: str) -> None:
    assert old in DOCKERIGNORE
    problems = dockerignore_problems(DOCKERIGNORE.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


def test_the_pattern_reader_follows_dockers_rules() -> None:
    """Hand cases of moby's patternmatcher: a folder's pattern covers what is in it, '*' stays in
    one path element, '**/' crosses any number of them, the last match wins."""
    rules = ignore_patterns("*\n!keep\n**/*.pyc\n/top.txt\nkeep/deep/*.log\n")
    assert ignored("anything.md", rules) and ignored("a/b/c", rules)
    assert not ignored("keep/x.py", rules) and ignored("keep/x.pyc", rules) and ignored("keep/a/b/y.pyc", rules)
    assert ignored("keep/deep/z.log", rules) and not ignored("keep/deep/more/z.log", rules)
    assert ignored("top.txt", ignore_patterns("/top.txt")) and not ignored("sub/top.txt", ignore_patterns("top.txt"))
