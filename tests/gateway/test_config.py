"""Configuration: YAML → typed frozen objects, with clear errors; `cachegate config check`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gateway.config import (
    BUNDLED_MODEL_NAME,
    ConfigError,
    LocalModelConfig,
    OpenAIModelConfig,
    SemanticCacheConfig,
    default_config,
    dump_config,
    load_config,
    load_config_text,
)

EXAMPLE = Path(__file__).parents[2] / "config.example.yaml"


def test_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
    config = load_config(EXAMPLE)
    assert isinstance(config.models[BUNDLED_MODEL_NAME], LocalModelConfig)
    assert any(
        isinstance(m, OpenAIModelConfig) and m.api_key == "sk-example"
        for m in config.models.values()
    )
    assert Path(config.data_dir).is_absolute()


def _doc_yaml_snippets() -> list[tuple[str, str]]:
    """Every ```yaml block of README.md and docs/*.md, as (file:line, text)."""
    root = EXAMPLE.parent
    snippets = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for match in re.finditer(r"^```yaml\n(.*?)^```", doc.read_text(), re.M | re.S):
            line = doc.read_text()[: match.start()].count("\n") + 1
            snippets.append((f"{doc.relative_to(root)}:{line}", match.group(1)))
    return snippets


@pytest.mark.parametrize(("where", "text"), _doc_yaml_snippets(), ids=lambda v: v[:40])
def test_documented_yaml_snippets_load(where: str, text: str) -> None:
    # So the documentation's examples cannot rot: each loads through the real loader. A
    # snippet of prices alone names models it leaves out; they are added as upstreams.
    raw = yaml.safe_load(text)
    if "prices" in raw and "models" not in raw:
        upstream = "{backend: openai, base_url: 'http://upstream/v1'}"
        text += "models:\n" + "".join(f"  {name}: {upstream}\n" for name in raw["prices"])
    load_config_text(text, source=where)


def test_defaults_serve_the_bundled_model() -> None:
    config = default_config()
    assert list(config.models) == [BUNDLED_MODEL_NAME]
    assert load_config_text("server: {port: 9000}").models == config.models


def test_config_is_frozen() -> None:
    config = load_config_text("")
    with pytest.raises(AttributeError):
        config.server.port = 1  # type: ignore[misc]


def test_env_expansion_and_typing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CG_PORT", "9123")
    monkeypatch.setenv("CG_KEY", "sk-live")
    config = load_config_text("""
server: {port: "${CG_PORT}"}
models:
  m: {backend: openai, base_url: "${CG_BASE:-http://localhost:8000/v1}", api_key: "${CG_KEY}"}
""")
    assert config.server.port == 9123
    model = config.models["m"]
    assert isinstance(model, OpenAIModelConfig)
    assert model.base_url == "http://localhost:8000/v1" and model.api_key == "sk-live"


def test_env_default_is_taken_for_a_variable_set_but_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    # as a shell and docker compose read ``${VAR:-default}``: an empty PORT= in an env file
    # gave port "" (a config error) where the default was meant; ``${VAR}`` stays empty
    monkeypatch.setenv("CG_PORT", "")
    monkeypatch.setenv("CG_KEY", "")
    config = load_config_text("""
server: {port: "${CG_PORT:-9124}"}
models:
  m: {backend: openai, base_url: "http://localhost:8000/v1${CG_KEY}"}
""")
    assert config.server.port == 9124
    assert config.models["m"].base_url == "http://localhost:8000/v1"  # type: ignore[union-attr]


def test_env_values_in_yaml_spellings_still_convert(monkeypatch: pytest.MonkeyPatch) -> None:
    for word, flag in (("no", False), ("off", False), ("yes", True), ("ON", True)):
        monkeypatch.setenv("CG_FLAG", word)
        config = load_config_text("cache: {semantic: {enabled: '${CG_FLAG}'}}")
        assert config.cache.semantic.enabled is flag, word
    for port in ("0x1F90", "8_080", "8080"):
        monkeypatch.setenv("CG_PORT", port)
        assert load_config_text("server: {port: '${CG_PORT}'}").server.port == 8080, port


def test_env_values_in_yaml_spellings_beside_a_key_that_looks_like_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each alone loaded; together the file was refused ("server.port: expected `int`, got
    # `str`"): YAML's spellings were read into every variable at once, the key's too.
    monkeypatch.setenv("CG_PORT", "0x1F90")
    monkeypatch.setenv("CG_CACHE", "off")
    monkeypatch.setenv("CG_KEY", "20240611")
    config = load_config_text("""
server:
  port: ${CG_PORT}
auth:
  keys:
    - key: ${CG_KEY}
      tenant: ${CG_CACHE}
cache:
  enabled: ${CG_CACHE}
""")
    assert config.server.port == 8080 and config.cache.enabled is False
    assert config.auth.keys[0].key == "20240611" and config.auth.keys[0].tenant == "off"


@pytest.mark.parametrize("value", ["20240611", "no", "0x1f2e", "1_000", "true"])
def test_env_value_that_looks_like_a_number_stays_a_string_setting(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CG_VALUE", value)
    config = load_config_text("""
auth: {keys: [{key: "${CG_VALUE}", tenant: "${CG_VALUE}"}]}
cache: {redis: {key_prefix: "${CG_VALUE}"}}
""")
    assert config.auth.keys[0].key == value and config.auth.keys[0].tenant == value
    assert config.cache.redis.key_prefix == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server: {port: eighty}", "f.yaml: server.port: expected `int`, got `str`"),
        ("server: {port: 70000}", "f.yaml: server.port: expected `int` <= 65535"),
        ("server: {prot: 1}", "f.yaml: server: object contains unknown field `prot`"),
        (
            "models: {gpt: {backend: openai}}",
            "f.yaml: models.gpt: set either base_url or replicas",
        ),
        ("models: {gpt: {backend: magic}}", "f.yaml: models.gpt.backend: invalid value 'magic'"),
        (
            "models: {x: {backend: openai, base_url: http://u/v1, timeout: {read: 0}}}",
            "f.yaml: models.x.timeout.read: expected `float` > 0.0",
        ),
        (  # (a compose service name without its scheme: every request was "unreachable")
            "models: {w: {backend: openai, replicas: [http://w1:8081/v1, 'worker:8081/v1']}}",
            "f.yaml: models.w: 'worker:8081/v1' is not an http:// or https:// URL with a host",
        ),
        (
            "models: {w: {backend: openai, base_url: '127.0.0.1:8081/v1'}}",
            "f.yaml: models.w: '127.0.0.1:8081/v1' is not an http:// or https:// URL with a host",
        ),
        (
            "models: {c: {backend: anthropic, base_url: api.anthropic.com}}",
            "f.yaml: models.c: 'api.anthropic.com' is not an http:// or https:// URL with a host",
        ),
        (  # (its requests went to .../v1/v1/messages: every client got 404 not_found_error)
            "models: {c: {backend: anthropic, base_url: 'https://api.anthropic.com/v1/'}}",
            "f.yaml: models.c: base_url 'https://api.anthropic.com/v1/': the API root without /v1",
        ),
        (  # (config check passed them; serve then failed with a traceback from the engine,
            # or loaded the config file's own directory as the model)
            "models: {m: {backend: local, max_context: 1}}",
            "f.yaml: models.m.max_context: expected `int` >= 2",
        ),
        ("models: {m: {backend: local, source: ''}}", "f.yaml: models.m.source: expected `str` of"),
        (
            "models: {x: {backend: openai, base_url: '${CG_UNSET_VAR}'}}",
            "f.yaml: models.x.base_url: environment variable CG_UNSET_VAR is not set",
        ),
        (  # the gateway started, and every batch of spans failed to export
            "tracing: {enabled: true, endpoint: 'otel-collector:4318/v1/traces'}",
            "f.yaml: tracing: 'otel-collector:4318/v1/traces' is not an http:// or https:// URL",
        ),
        (
            "cache: {semantic: {threshold: 1.2}}",
            "f.yaml: cache.semantic.threshold: expected `float` <= 1.0",
        ),
        ("cache: {ttl: .inf}", "f.yaml: cache.ttl: expected `float` <= 315360000.0"),
        (
            "models: {m: {backend: local, default_temperature: 2.5}}",
            "f.yaml: models.m.default_temperature: expected `float` <= 2.0",
        ),
        (  # (a setting of fixed choices named the value, not the choices)
            "cache: {backend: memcached}",
            "f.yaml: cache.backend: invalid enum value 'memcached'; expected one of: disk, redis",
        ),
        (
            "server: {log_level: verbose}",
            "f.yaml: server.log_level: invalid enum value 'verbose'; expected one of: debug, error, "
            "info, warning",
        ),
        (
            "models: {m: {backend: local, device: gpu}}",
            "f.yaml: models.m.device: invalid enum value 'gpu'; expected one of: auto, cpu, cuda",
        ),
        (
            "models: {m: {backend: vllm, base_url: 'http://vllm:8000/v1'}}",
            "f.yaml: models.m.backend: invalid value 'vllm'; expected one of: openai, anthropic, "
            "local",
        ),
        (
            "models: {w: {backend: openai, base_url: 'http://w/v1', routing: {policy: random}}}",
            "f.yaml: models.w.routing.policy: invalid enum value 'random'; expected one of: "
            "least_loaded, prefix, round_robin",
        ),
        (
            "models: {c: {backend: anthropic, prompt_caching: {ttl: 2h}}}",
            "f.yaml: models.c.prompt_caching.ttl: invalid enum value '2h'; expected one of: 1h, "
            "5m, auto",
        ),
        (  # `serve` failed with the Redis client's traceback
            "cache: {backend: redis, redis: {url: 'localhost:6379'}}",
            "f.yaml: cache: redis.url: Redis URL must specify one of the following schemes",
        ),
        (
            "cache: {backend: redis, redis: {url: 'redis://:pw@redis:63x9/0'}}",
            "f.yaml: cache: redis.url: Port could not be cast to integer value as '63x9'",
        ),
        ("admin: {api_key: ''}", "f.yaml: admin.api_key: expected `str` of length >= 1"),
        # (was accepted, and bound every interface)
        ("server: {host: ''}", "f.yaml: server.host: expected `str` of length >= 1"),
        ("models: {}", "f.yaml: models: expected a mapping"),
        ("- a list", "f.yaml: the top level must be a mapping"),
        ("server: [", "f.yaml: invalid YAML"),
        # (an alias inside its own anchor: a RecursionError traceback from `config check`)
        (
            "server: {host: 127.0.0.1}\nmodels: &m {x: *m}",
            "f.yaml: models.x: an alias inside its own anchor's value",
        ),
        ("cache: &c {semantic: [1, *c]}", "f.yaml: cache.semantic[1]: an alias inside its own"),
        pytest.param(  # (PyYAML's parser recursed past Python's limit: a traceback too)
            "server: " + "[" * 5000 + "]" * 5000,
            "f.yaml: invalid YAML: nested too deeply",
            id="nested-too-deeply",
        ),
        (
            "auth: {keys: [{key: k, tenant: a}, {key: k, tenant: b}]}",
            "auth.keys[1]: the same key is listed twice",
        ),
        (
            "server: {port: 9000, admin_port: 9000}",
            "f.yaml: server: admin_port must differ from port",
        ),
        # (a port or a URL listed matches no Host: every browser's request refused, the setting
        # looking right; an empty list refuses them all)
        (
            "server: {allowed_hosts: ['localhost:8080']}",
            "f.yaml: server: allowed_hosts[0]: 'localhost:8080' has a port: list host names "
            "alone (any port is allowed)",
        ),
        (
            "server: {allowed_hosts: [gw.example, 'https://gw.example']}",
            "f.yaml: server: allowed_hosts[1]: 'https://gw.example' is a URL",
        ),
        (
            "server: {allowed_hosts: ['*.corp.example']}",
            "allowed_hosts[0]: '*.corp.example' is a wildcard: write '.corp.example' for that",
        ),
        ("server: {allowed_hosts: ['gw example']}", "allowed_hosts[0]: 'gw example' is not a"),
        ("server: {allowed_hosts: []}", "f.yaml: server: allowed_hosts is empty"),
        (  # that tenant would open the admin routes, which span every tenant
            "auth: {keys: [{key: k, tenant: a}]}\nadmin: {api_key: k}",
            "admin.api_key: the same key is a tenant's key in auth.keys",
        ),
        (  # a bearer token is stripped: a key with spaces around it could never be presented
            "auth: {keys: [{key: ' k ', tenant: a}]}",
            "auth.keys[0].key has spaces or a newline around it",
        ),
        ("admin: {api_key: ' '}", "admin.api_key has spaces or a newline around it"),
        # (a key no header can carry, or whose bytes a client sends otherwise: a 401 for every
        # request that presented it, though `config check` passed)
        (
            'admin: {api_key: "ad\\nmin"}',
            "f.yaml: admin.api_key has a character a client cannot send in an HTTP header as it "
            "is (U+000A at index 2): a key is printable ASCII",
        ),
        ('admin: {api_key: "clé"}', "admin.api_key has a character a client cannot send"),
        ('auth: {keys: [{key: "k\\x7f", tenant: a}]}', "auth.keys[0].key has a character a"),
        (  # savings and write premiums are price differences, exported as counters
            "models: {m: {backend: local}}\nprices: {m: {input: 1, cached_input: 3}}",
            "prices.m.cached_input is above its input price",
        ),
        (
            "models: {m: {backend: local}}\nprices: {m: {input: 1, cache_write: 0.5}}",
            "prices.m.cache_write is below its input price",
        ),
        (
            "models: {m: {backend: local}}\nprices: {m: {input: 1, cache_write_1h: 0.5}}",
            "prices.m.cache_write_1h is below its input price",
        ),
        (  # .inf (or 1e308 times a token count) made the ledger's sums NaN
            "models: {m: {backend: local}}\nprices: {m: {input: .inf, output: 10}}",
            # (msgspec's own path, prices[...].input, did not say which model's)
            "f.yaml: prices.m.input: expected `float` <= 1000000.0",
        ),
        (
            'auth: {keys: [{key: k, tenant: "a\\x1fb"}]}',
            "auth.keys[0].tenant: expected `str` matching",
        ),
        # was a ValueError traceback ("embedded null byte") from `config check` and `serve`
        ('data_dir: "/tmp/a\\0b"', "f.yaml: data_dir: a path cannot hold a NUL character"),
        (
            'models: {m: {backend: local, source: "./m\\0"}}',
            "models.m.source: a path cannot hold a NUL character",
        ),
        (
            'cache: {semantic: {embedding_model: "e\\0"}}',
            "cache.semantic.embedding_model: a path cannot hold a NUL character",
        ),
    ],
)
def test_errors_name_file_key_and_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config_text(text, source="f.yaml")
    assert message in str(error.value)


@pytest.mark.parametrize(
    "text",
    [
        # `serve` crashed computing uvicorn's shutdown deadline (math.ceil(inf))
        "server: {shutdown_timeout: .inf}",
        # the history's interval starts became NaN: /admin/history answered "t": null
        "admin: {history_interval: .inf}",
        "server: {stream_idle_timeout: .inf}",
        "cache: {coalesce: {max_wait: .inf}}",
        "cache: {redis: {timeout: .inf}}",
        "models: {x: {backend: openai, base_url: u, timeout: {read: .inf}}}",
        # a retry slept forever (the backoff is capped by max_retry_wait, itself endless)
        "models: {x: {backend: openai, base_url: u, retry_backoff: .inf}}",
        "models: {x: {backend: openai, base_url: u, max_retry_wait: .inf}}",
    ],
)
def test_durations_are_finite(text: str) -> None:
    with pytest.raises(ConfigError, match=r"f\.yaml: [a-z_.]+: expected `float` <= 315360000\.0"):
        load_config_text(text, source="f.yaml")


def test_redis_url_is_checked_only_for_the_redis_backend() -> None:
    assert load_config_text("cache: {redis: {url: unused}}").cache.redis.url == "unused"
    socket = "cache: {backend: redis, redis: {url: 'unix:///run/redis.sock'}}"
    assert load_config_text(socket).cache.redis.url == "unix:///run/redis.sock"


def test_zero_and_one_are_valid_thresholds() -> None:
    assert load_config_text("cache: {semantic: {threshold: 0}}").cache.semantic.threshold == 0
    assert load_config_text("cache: {semantic: {threshold: 1}}").cache.semantic.threshold == 1


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)
    path = tmp_path / "cachegate.yaml"
    path.write_text(
        "data_dir: ./state\n"
        "models:\n  mine: {backend: local, source: ./models/mine, prefix_disk_dir: kv}\n"
        "cache: {semantic: {embedding_model: ./models/embedder}}\n"
    )
    config = load_config(path)
    assert config.data_dir == str(tmp_path / "state")
    model = config.models["mine"]
    assert isinstance(model, LocalModelConfig) and model.source == str(tmp_path / "models" / "mine")
    assert model.prefix_disk_dir == str(tmp_path / "kv")
    assert config.cache.semantic.embedding_model == str(tmp_path / "models" / "embedder")
    assert load_config_text("").cache.semantic.embedding_model == "bundled"


def test_cli_config_check_reads_a_tilde_as_the_home_directory(tmp_path: Path) -> None:
    # `data_dir: ~/cachegate` was joined to the file's directory: the gateway wrote its cache
    # into a directory named "~" there, and `source: ~/models/mine` was taken for a hub id.
    home, files = tmp_path / "home", tmp_path / "etc"
    files.mkdir()
    path = files / "cachegate.yaml"
    path.write_text(
        "data_dir: ~/state\n"
        "models:\n  mine: {backend: local, source: ~/models/mine, prefix_disk_dir: ~/kv}\n"
        "cache: {semantic: {embedding_model: ~/emb, verifier: ~/ver, embedder_export_dir: ~/x}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(home)},
    )
    assert result.returncode == 0, result.stderr
    shown = result.stdout
    assert f"data_dir: {home}/state\n" in shown and f"source: {home}/models/mine\n" in shown
    assert f"prefix_disk_dir: {home}/kv\n" in shown and f"embedding_model: {home}/emb\n" in shown
    assert f"verifier: {home}/ver\n" in shown and f"embedder_export_dir: {home}/x\n" in shown


def test_dump_redacts_secrets() -> None:
    config = load_config_text(
        "models: {m: {backend: openai, base_url: http://u/v1, api_key: sk-secret}}"
    )
    text = dump_config(config)
    assert "sk-secret" not in text and "'***'" in text
    assert msgspec.structs.asdict(config.models["m"])["api_key"] == "sk-secret"
    redis = load_config_text("cache: {redis: {url: 'redis://:pw-secret@redis:6379/0'}}")
    assert "pw-secret" not in dump_config(redis)
    assert "redis://:***@redis:6379/0" in dump_config(redis)
    token = load_config_text("models: {m: {backend: openai, base_url: 'https://tok@h/v1'}}")
    assert "tok@" not in dump_config(token) and "https://***@h/v1" in dump_config(token)
    # lists (tuples in the config) too, and a password holding "@"
    listed = load_config_text("""
auth: {keys: [{key: gw-key-1, tenant: a}]}
cache: {redis: {url: 'redis://default:pw@x@redis:6379/0'}}
models: {m: {backend: openai, replicas: ['https://u:replica-pw@w1/v1', 'http://w2/v1']}}
""")
    text = dump_config(listed)
    for secret in ("gw-key-1", "replica-pw", "pw@x"):
        assert secret not in text, secret
    assert "redis://default:***@redis:6379/0" in text and "https://u:***@w1/v1" in text
    # a password holding "/": no URL, and its error showed it whole (its tail read as a host)
    with pytest.raises(ConfigError) as slash:
        load_config_text("models: {m: {backend: openai, base_url: 'https://u:pa/ss@h/v1'}}")
    assert "pa/ss" not in str(slash.value) and "https://u:***@h/v1" in str(slash.value)


def test_dump_redacts_credentials_in_a_url_query() -> None:
    # the Redis client takes ?password=; replicas' URLs are shown in /admin/stats too
    config = load_config_text("""
cache: {redis: {url: 'redis://redis:6379/0?password=pw-secret&db=1'}}
models: {m: {backend: openai, replicas: ['https://w1/v1?api-version=1&api-key=k-secret']}}
""")
    text = dump_config(config)
    assert "pw-secret" not in text and "k-secret" not in text
    assert "redis://redis:6379/0?password=***&db=1" in text
    assert "https://w1/v1?api-version=1&api-key=***" in text
    assert config.cache.redis.url.endswith("?password=pw-secret&db=1")  # (redacted only shown)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_config_check(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("server: {port: 9001}\n")
    result = run_cli("config", "check", str(good))
    assert result.returncode == 0, result.stderr
    assert "port: 9001" in result.stdout and BUNDLED_MODEL_NAME in result.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("cache:\n  ttl: soon\n")
    result = run_cli("config", "check", str(bad))
    assert result.returncode == 1
    assert f"{bad}: cache.ttl: expected `float | null`, got `str`" in result.stderr
    missing = run_cli("config", "check", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"server: {host: caf\xe9}\n")
    result = run_cli("config", "check", str(latin1))
    assert result.returncode == 1 and result.stderr.startswith(f"error: {latin1}: not UTF-8")


def test_cli_config_check_refuses_coalescing_without_exact_lookups(tmp_path: Path) -> None:
    # (accepted, exit 0, and coalescing was quietly off: a follower finds the answer by its
    # exact key; configuration.md says the setting "needs exact.enabled")
    config = tmp_path / "coalesce.yaml"
    config.write_text("cache: {exact: {enabled: false}, coalesce: {enabled: true}}\n")
    result = run_cli("config", "check", str(config))
    assert result.returncode == 1, result.stdout
    assert result.stderr == (
        f"error: {config}: cache.coalesce.enabled: true needs cache.exact.enabled: true (a "
        "waiting request is served the first one's answer by its exact key); set "
        "coalesce.enabled: false, or leave it out\n"
    )
    # the default, true, is no contradiction: it is off with the exact tier, and printed so
    fine = [
        ("exact: {enabled: false}", "false", "false"),
        ("exact: {enabled: false}, coalesce: {enabled: false}", "false", "false"),
        ("coalesce: {enabled: true}", "true", "true"),
    ]
    for settings, exact, coalesce in fine:
        config.write_text(f"cache: {{{settings}}}\n")
        result = run_cli("config", "check", str(config))
        assert result.returncode == 0, (settings, result.stderr)
        assert f"  exact:\n    enabled: {exact}\n" in result.stdout
        assert f"  coalesce:\n    enabled: {coalesce}\n" in result.stdout
        printed = tmp_path / "printed.yaml"  # (what it printed is a config that loads)
        printed.write_text(result.stdout)
        assert run_cli("config", "check", str(printed)).returncode == 0, settings


def test_cli_refuses_an_admin_key_no_client_can_send(tmp_path: Path) -> None:
    # the gateway started; curl's "Bearer clé" (UTF-8) was read as "clÃ©" and refused, and
    # httpx (the OpenAI SDK's client) raised UnicodeEncodeError before sending it
    config = tmp_path / "admin.yaml"
    config.write_text('admin: {api_key: "clé"}\n', encoding="utf-8")
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {config}: admin.api_key has a character a client cannot send in an HTTP "
        "header as it is (U+00E9 at index 2): a key is printable ASCII\n"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "server:\n  port: 8080\n  host: [a\nmodels: {}\n",
            "expected ',' or ']', but got ':' (line 4, column 7; while parsing a flow sequence "
            "started at line 3, column 9)",
        ),
        ("server:\n  port: 1\n\tx: 2\n", "cannot start any token (line 3, column 1)"),
        (
            "server: {port: 1}\ndata_dir: a\x01\n",
            "unacceptable character #x0001: special characters are not allowed (line 2, column 12)",
        ),
        # (a value its explicit tag cannot read: PyYAML's ValueError, KeyError, a traceback)
        (
            "server:\n  port: !!int 80a\n",
            "cannot read '80a' as 'tag:yaml.org,2002:int' (line 2, column 9)",
        ),
        (
            "server: {host: !!bool maybe}\n",
            "cannot read 'maybe' as 'tag:yaml.org,2002:bool' (line 1, column 16)",
        ),
    ],
)
def test_cli_names_the_file_and_line_of_a_yaml_syntax_error(
    tmp_path: Path, text: str, said: str
) -> None:
    # PyYAML's message named the file "<unicode string>" and took five lines, carets included
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    for args in (("serve", "--config", str(config)), ("config", "check", str(config))):
        result = run_cli(*args)
        assert result.returncode == 1, args
        assert result.stderr.startswith(f"error: {config}: invalid YAML: "), result.stderr
        assert result.stderr.endswith(f"{said}\n") and result.stderr.count("\n") == 1
        assert "unicode string" not in result.stderr


def test_cli_config_check_refuses_a_key_given_twice(tmp_path: Path) -> None:
    # A `models:` block appended to config.example.yaml replaced its models silently: the
    # bundled model was gone, and nothing said why.
    config = tmp_path / "twice.yaml"
    shutil.copy(EXAMPLE, config)
    with config.open("a") as file:
        file.write("models:\n  gpt-4o-mini: {backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    result = run_cli("config", "check", str(config))
    assert result.returncode == 1, result.stdout
    lines = EXAMPLE.read_text().splitlines()
    assert result.stderr == (
        f"error: {config}: invalid YAML: key 'models' appears twice in this mapping (first on "
        f"line {lines.index('models:') + 1}); the later one would replace the earlier (line "
        f"{len(lines) + 1}, column 1)\n"
    )
    merged = tmp_path / "merged.yaml"  # a merge key's values may still be overridden
    merged.write_text(
        "models:\n  a: &m {backend: openai, base_url: 'http://x/v1'}\n"
        "  b: {<<: *m, base_url: 'http://y/v1'}\n"
    )
    result = run_cli("config", "check", str(merged))
    assert result.returncode == 0, result.stderr
    assert "base_url: http://y/v1" in result.stdout


def test_cli_config_check_refuses_a_config_whose_aliases_expand_absurdly(tmp_path: Path) -> None:
    # ("billion laughs": nine levels of nine aliases, 9**9 values) PyYAML loads each alias as
    # the same object, but the ${VAR} substitution walked the expansion in full: `config
    # check` and `serve` hung, growing until memory ran out.
    levels = ["  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    config = tmp_path / "laughs.yaml"
    config.write_text("server: {host: 127.0.0.1}\nmetadata:\n" + "\n".join(levels) + "\n")
    start = time.monotonic()
    result = run_cli("config", "check", str(config))
    assert result.returncode == 1 and time.monotonic() - start < 30, result.stdout
    assert result.stderr.startswith(f"error: {config}: expands to more than 1,000,000 values")
    fine = tmp_path / "fine.yaml"  # (an anchor used a few times is no such thing)
    fine.write_text("server: {host: 127.0.0.1}\nx: &x [1, 2]\ny: [*x, *x, *x]\n")
    assert "expands to" not in run_cli("config", "check", str(fine)).stderr


def test_cli_config_check_never_quotes_a_redis_password_it_cannot_parse(tmp_path: Path) -> None:
    # A base64 password holds "/": the URL's host part then ended inside it, and the error
    # ("Port could not be cast to integer value as 'q7Jk'") or the printed configuration
    # ("redis://:***@2m/Xw+Zp@redis...", the rest taken for the host) showed it.
    config = tmp_path / "redis.yaml"
    config.write_text(
        "cache: {backend: redis, redis: {url: 'redis://:${CG_REDIS_PW}@redis:6379/0'}}\n"
    )
    for password in ("q7Jk/2mXw+Zp", "q7Jk@2m/Xw+Zp", "q7Jk#2mXw", "q7Jk?2mXw"):
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "config", "check", str(config)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "CG_REDIS_PW": password},
        )  # fmt: skip
        assert result.returncode == 1, result.stdout
        assert "percent-encode" in result.stderr
        for part in ("q7Jk", "2m", "Xw"):
            assert part not in result.stdout + result.stderr
    encoded = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "check", str(config)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "CG_REDIS_PW": "q7Jk%2F2m"},
    )  # fmt: skip
    assert encoded.returncode == 0, encoded.stderr
    assert "url: redis://:***@redis:6379/0" in encoded.stdout


def test_cli_port_is_checked_like_the_file(tmp_path: Path) -> None:
    for port, says in (("70000", "<= 65535"), ("-1", ">= 0")):
        result = run_cli("serve", "--config", "/dev/null", "--port", port)
        assert result.returncode == 1
        assert result.stderr.strip() == f"error: --port {port}: expected `int` {says}"
    config = tmp_path / "admin.yaml"
    config.write_text("server: {admin_port: 9001}\n")
    result = run_cli("serve", "--config", str(config), "--port", "9001")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: --port 9001: admin_port must differ from port"


def test_cli_serve_refuses_an_endless_shutdown_timeout(tmp_path: Path) -> None:
    config = tmp_path / "endless.yaml"
    config.write_text("server: {shutdown_timeout: .inf}\n")
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {config}: server.shutdown_timeout: expected `float` <= 315360000.0"
    )


def test_cli_help_explains() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for word in ("serve", "config", "OpenAI", "--config"):
        assert word in result.stdout
    serve_help = run_cli("serve", "--help")
    assert "--port" in serve_help.stdout and "--host" in serve_help.stdout
    # (healthcheck binds nothing: its --port is the one it asks, as docs/deployment.md says)
    health_help = " ".join(run_cli("healthcheck", "--help").stdout.split())
    assert "--port PORT port to ask (overrides server.port)" in health_help
    assert "bind" not in health_help


def test_cli_output_to_a_reader_that_left_ends_quietly() -> None:
    # `cachegate config show | head -1`, `cachegate cache ls | head`: the reader closes the pipe
    # early; the CLI printed a BrokenPipeError traceback (or "Exception ignored" at exit).
    for buffered in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        if buffered:
            env["PYTHONUNBUFFERED"] = "1"
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "config", "show"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert process.stdout is not None
        process.stdout.close()
        _, err = process.communicate(timeout=60)
        assert process.returncode == 1
        assert err == ""


def test_cli_serve_interrupted_while_starting_exits_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ctrl-C in the seconds before uvicorn owns the signals (importing torch, building the
    # runtime) ended `cachegate serve` with a KeyboardInterrupt traceback.
    from gateway.cli import main
    from gateway.runtime import Runtime

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Runtime, "build", interrupted)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    config = tmp_path / "c.yaml"
    config.write_text(f"data_dir: {tmp_path / 'data'}\n")
    try:
        code = main(["serve", "--config", str(config), "--port", "0"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == 130
    assert capsys.readouterr().err == ""


def test_cli_refuses_a_data_dir_another_process_holds(tmp_path: Path) -> None:
    from semantic.store import DiskStore

    config = tmp_path / "c.yaml"
    model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
    config.write_text(f"data_dir: {tmp_path / 'data'}\nmodels: {{m: {model}}}\n")
    holder = DiskStore(tmp_path / "data" / "response-cache", max_entries=10)
    try:
        result = run_cli("serve", "--config", str(config), "--port", "0")
    finally:
        import asyncio

        asyncio.run(holder.close())
    assert result.returncode == 1
    assert result.stderr.startswith("error: data_dir: ") and "in use by another" in result.stderr


def test_cli_serve_on_a_port_in_use_fails_before_anything_starts(tmp_path: Path) -> None:
    # uvicorn binds only after the app's startup: the port's error came at once, but the
    # process opened data_dir and loaded its models (the bundled one's first conversion:
    # 20 s to a minute) before it exited, with status 3; a taken admin_port left the main
    # server running until then, its runtime never closed.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        config = tmp_path / "c.yaml"
        model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
        config.write_text(f"data_dir: {data}\nmodels: {{m: {model}}}\n")
        result = run_cli("serve", "--config", str(config), "--port", str(port))
        assert result.returncode == 1
        assert result.stderr == (
            f"error: cannot listen on 127.0.0.1:{port} (server.port): address already in use\n"
        )
        config.write_text(
            f"data_dir: {data}\nserver: {{admin_port: {port}}}\nmodels: {{m: {model}}}\n"
        )
        result = run_cli("serve", "--config", str(config), "--port", "0")
        assert result.returncode == 1
        assert result.stderr == (
            f"error: cannot listen on 127.0.0.1:{port} (server.admin_port): address already in use\n"
        )
    assert not data.exists()  # nothing was opened, nothing loaded


def test_cli_serve_on_two_free_ports_says_which_it_bound(tmp_path: Path) -> None:
    # `port: 0` with `admin_port: 0` (any free port, for each) was refused: "admin_port must
    # differ from port"; and the start's line said `:0`, not the port bound
    import threading

    import httpx

    config = tmp_path / "c.yaml"
    model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\ncache: {{enabled: false}}\n"
        f"server: {{port: 0, admin_port: 0}}\nmodels: {{m: {model}}}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(60, process.kill)  # (a start that never says it: the loop ends)
    timer.start()
    said = None
    try:
        assert process.stderr is not None
        for line in process.stderr:
            said = re.search(r"serving m on http://127.0.0.1:(\d+)/v1; admin routes on port (\d+)",
                             line)  # fmt: skip
            if said:
                break
        assert said is not None
        port, admin_port = int(said[1]), int(said[2])
        assert 0 not in (port, admin_port) and port != admin_port
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{admin_port}/metrics").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 404
    finally:
        timer.cancel()
        process.terminate()
        process.wait(timeout=30)


def test_cli_serve_on_a_host_of_another_machine_fails_before_anything_starts(
    tmp_path: Path,
) -> None:
    # An address this machine does not have (another host's, a typo) passed the port probe:
    # the process opened data_dir and loaded its models, then uvicorn failed to bind and it
    # exited with status 3 ("[Errno 99] ... cannot assign requested address").
    data = tmp_path / "data"
    config = tmp_path / "c.yaml"
    model = "{backend: openai, base_url: 'http://127.0.0.1:9/v1'}"
    config.write_text(f"data_dir: {data}\nserver: {{host: 192.0.2.1}}\nmodels: {{m: {model}}}\n")
    result = run_cli("serve", "--config", str(config), "--port", "18080")
    assert result.returncode == 1
    assert result.stderr == (
        "error: cannot listen on 192.0.2.1:18080 (server.host): not an address of this machine\n"
    )
    assert not data.exists()


def test_anthropic_backend_defaults_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config import AnthropicModelConfig

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-example")
    example = load_config(EXAMPLE).models["claude-sonnet"]
    assert isinstance(example, AnthropicModelConfig) and example.api_key == "sk-ant-example"
    model = load_config_text("models: {c: {backend: anthropic}}").models["c"]
    assert isinstance(model, AnthropicModelConfig)
    assert model.base_url == "https://api.anthropic.com" and model.prompt_caching.ttl == "auto"
    with pytest.raises(ConfigError, match=r"models\.c\.prompt_caching\.ttl"):
        load_config_text("models: {c: {backend: anthropic, prompt_caching: {ttl: 2h}}}")
    with pytest.raises(ConfigError, match="one base_url"):
        load_config_text("models: {c: {backend: anthropic, replicas: [http://a, http://b]}}")
    with pytest.raises(ConfigError, match="routing is for replicas"):
        load_config_text("models: {c: {backend: anthropic, routing: {policy: round_robin}}}")
    with pytest.raises(ConfigError, match="prompt_caching instead"):
        load_config_text("models: {c: {backend: anthropic, prompt_cache_key: true}}")


def test_unquoted_verifier_off_is_off() -> None:
    """YAML reads a bare `off` as false; the verifier switch takes it as "off"."""
    config = load_config_text("cache:\n  semantic:\n    verifier: off\n")
    assert config.cache.semantic.verifier == "off"


def test_a_semantic_setting_that_would_not_be_read_is_refused() -> None:
    # each was accepted and ignored (a review): the threshold won over max_wrong_rate; with the
    # verifier off neither is read
    def semantic(settings: str) -> SemanticCacheConfig:
        return load_config_text(f"cache: {{semantic: {{{settings}}}}}\n").cache.semantic

    with pytest.raises(ConfigError, match="set verifier_threshold or max_wrong_rate, not both"):
        semantic("max_wrong_rate: 0.01, verifier_threshold: 0.3")
    for setting in ("max_wrong_rate: 0.01", "verifier_threshold: 0.9"):
        with pytest.raises(ConfigError, match=r"need the verifier \(verifier: off\)"):
            semantic(f"verifier: off, {setting}")
    # with auto_tighten, max_wrong_rate is its target and a threshold where it starts
    both = semantic("max_wrong_rate: 0.01, verifier_threshold: 0.9, auto_tighten: true")
    assert (both.max_wrong_rate, both.verifier_threshold) == (0.01, 0.9)
    # the guard's MLP is not run while the verifier decides (the default), nor without the
    # guard: guard_min_score: 1.0 still served a paraphrase (a review)
    for settings in ("guard_min_score: 0.9", "verifier: off, guard: false, guard_min_score: 0.9"):
        with pytest.raises(ConfigError, match="guard_min_score is the guard's own"):
            semantic(settings)
    for settings in ("verifier: off", "verifier_role: veto"):
        assert semantic(f"{settings}, guard_min_score: 0.9").guard_min_score == 0.9


@pytest.mark.parametrize(
    ("yaml_text", "error"),
    [  # each was accepted, and did what a user would not expect (a review)
        ("tracing: {service_name: ''}", "tracing.service_name: expected `str` of length >= 1"),
        (  # every request sending no anthropic-version was refused upstream
            "models: {c: {backend: anthropic, anthropic_version: ''}}",
            "models.c.anthropic_version: expected `str` of length >= 1",
        ),
        (  # (as backend: anthropic refuses it)
            "models: {m: {backend: openai, base_url: 'http://x/v1', routing: {policy: round_robin}}}",
            "models.m: routing is for replicas",
        ),
    ],
)
def test_a_setting_that_cannot_work_is_refused(yaml_text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config_text(yaml_text)
    # (routing.down_for is read with one base_url: a held response's delete, its Retry-After)
    one = "models: {m: {backend: openai, base_url: 'http://x/v1', routing: {down_for: 3}}}"
    assert load_config_text(one).models["m"].routing.down_for == 3  # type: ignore[union-attr]


def test_cli_prepare_exports_the_embedder_and_fails_when_it_cannot(tmp_path: Path) -> None:
    model = "models: {m: {backend: openai, base_url: 'http://127.0.0.1:9/v1', api_key: sk}}\n"
    good = tmp_path / "good.yaml"
    semantic = "{embedder_export_dir: exports, verifier: bundled}"
    good.write_text(f"data_dir: data\ncache: {{semantic: {semantic}}}\n{model}")
    result = _prepare(good)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "exports").glob("embedder-*/model.onnx"))  # relative to the file
    assert list((tmp_path / "exports").glob("verifier-*/model.int8.onnx"))  # the verifier's too
    assert "(384 dimensions, onnx backend)" in result.stderr
    assert re.search(r"verifier \S+ ready \(onnx-int8 backend\)", result.stderr)
    (tmp_path / "blocked").write_text("a file where the export directory should be")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"data_dir: data\ncache: {{semantic: {{embedder_export_dir: blocked}}}}\n{model}"
    )
    result = _prepare(bad)
    assert result.returncode == 1
    assert "error: embedder: onnx could not be loaded" in result.stderr
    semantic = "{embedder_export_dir: blocked, embedder_backend: torch, verifier: bundled}"
    bad.write_text(f"data_dir: data\ncache: {{semantic: {semantic}}}\n{model}")
    result = _prepare(bad)
    assert result.returncode == 1
    assert "error: verifier: onnx-int8 could not be loaded" in result.stderr
    assert "; onnx could not be loaded" in result.stderr  # nor float32: torch is left


def test_cli_prepare_passes_when_int8_runs_float32(tmp_path: Path) -> None:
    """A verifier of your own without an int8 calibration serves on float32 onnx: prepare says
    so and passes (it serves correctly; only an export that cannot be made fails it)."""
    from semantic.verifier import DEFAULT_PATH

    own = tmp_path / "verifier"
    shutil.copytree(DEFAULT_PATH, own)
    meta = json.loads((own / "meta.json").read_text())
    del meta["backends"]
    (own / "meta.json").write_text(json.dumps(meta))
    model = "models: {m: {backend: openai, base_url: 'http://127.0.0.1:9/v1', api_key: sk}}\n"
    config = tmp_path / "c.yaml"
    semantic = f"{{embedder_export_dir: exports, verifier: {own}}}"
    config.write_text(f"data_dir: data\ncache: {{semantic: {semantic}}}\n{model}")
    result = _prepare(config)
    assert result.returncode == 0, result.stderr
    assert "onnx-int8 has no int8 calibration in meta.json" in result.stderr
    assert re.search(r"verifier \S+ ready \(onnx backend\)", result.stderr)


def _prepare(config: Path) -> subprocess.CompletedProcess[str]:
    """`cachegate prepare` (loads the embedder and exports it: slower than run_cli allows)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", "prepare", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_prepare_names_a_local_model_that_cannot_load(tmp_path: Path) -> None:
    # (a traceback of a hundred lines, huggingface_hub's and transformers' chained errors, the
    # model's name nowhere; the Docker build that runs it showed its tail)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\ncache: {{enabled: false}}\n"
        "models: {m: {backend: local, source: someorg/not-in-the-hf-cache}}\n"
    )
    result = run_cli("prepare", "--config", str(config))
    assert result.returncode == 1
    assert "error: models.m: localmodel: cannot load model 'someorg/not-in-the-hf-cache'" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_cli_serve_names_a_local_model_source_that_does_not_exist(tmp_path: Path) -> None:
    # A missing model directory was loaded as a hub id: the gateway started, and /readyz said
    # "Repo id must be in the form 'repo_name' or 'namespace/repo_name'" for a path.
    config = tmp_path / "c.yaml"
    missing = tmp_path / "models" / "smollm2"
    for command, source in (("serve", str(missing)), ("worker", "./models/smollm2")):
        config.write_text(
            f"data_dir: {tmp_path / 'data'}\nmodels: {{m: {{backend: local, source: '{source}'}}}}\n"
        )
        result = run_cli(command, "--config", str(config), "--port", "0")
        assert result.returncode == 1
        assert result.stderr.startswith(f"error: models.m.source: {missing} does not exist"), (
            result.stderr
        )


def test_cli_serve_names_a_semantic_model_directory_that_does_not_exist(tmp_path: Path) -> None:
    # A misspelt verifier or embedder directory started the gateway with exact hits only: an
    # error in the log and /admin/stats, /readyz 200 (found by a review). A worker, which has
    # no response cache, loads neither: it starts past them (and stops at its model's source)
    config = tmp_path / "c.yaml"
    missing = tmp_path / "nope"
    model = f"models: {{m: {{backend: local, source: '{tmp_path / 'no-model'}'}}}}\n"
    for key in ("verifier", "embedding_model"):
        semantic = f"cache: {{semantic: {{{key}: ./nope}}}}\n"
        config.write_text(f"data_dir: {tmp_path / 'data'}\n{semantic}{model}")
        for command, named in (("serve", f"cache.semantic.{key}"), ("worker", "models.m.source")):
            result = run_cli(command, "--config", str(config), "--port", "0")
            assert result.returncode == 1
            assert result.stderr.startswith(f"error: {named}: "), result.stderr
        assert str(missing) in run_cli("serve", "--config", str(config), "--port", "0").stderr
        config.write_text(f"data_dir: {tmp_path / 'data'}\ncache: {{semantic: {{enabled: false, "
                          f"{key}: ./nope}}}}\n{model}")  # fmt: skip
        result = run_cli("serve", "--config", str(config), "--port", "0")  # (not loaded)
        assert result.stderr.startswith("error: models.m.source: "), result.stderr


def test_an_empty_data_dir_is_refused(tmp_path: Path) -> None:
    # `data_dir: "${DATA_DIR:-}"` with the variable unset was the config file's own directory
    config = tmp_path / "c.yaml"
    config.write_text('data_dir: "${CACHEGATE_TEST_UNSET_DIR:-}"\n')
    result = run_cli("config", "check", str(config))
    assert result.returncode == 1
    assert result.stderr == f"error: {config}: data_dir is empty (is its ${{VAR}} set?)\n"


@pytest.mark.parametrize(
    "key",
    [
        "cache.semantic.verifier",
        "cache.semantic.embedding_model",
        "cache.semantic.embedder_export_dir",
    ],
)
def test_an_empty_path_is_refused_naming_its_key(tmp_path: Path, key: str) -> None:
    # as data_dir: the config file's own directory (an export written beside it, a verifier
    # that failed to load there, serving exact hits only; the disk tier quietly off)
    *parents, leaf = key.split(".")
    tree: dict[str, Any] = {leaf: "${CACHEGATE_TEST_UNSET_DIR:-}"}
    for parent in reversed(parents):
        tree = {parent: tree}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tree))
    result = run_cli("config", "check", str(config))
    assert result.returncode == 1
    assert result.stderr == f"error: {config}: {key} is empty (is its ${{VAR}} set?)\n"


def test_an_empty_prefix_disk_dir_is_no_disk_tier() -> None:
    # (how a template turns it off: an environment variable cannot give null)
    text = 'models: {m: {backend: local, prefix_disk_dir: "${CACHEGATE_TEST_UNSET_DIR:-}"}}'
    assert load_config_text(text).models["m"].prefix_disk_dir == ""  # type: ignore[union-attr]


def test_cli_refuses_an_empty_host(tmp_path: Path) -> None:
    # `cachegate serve --host "$HOST"` with HOST unset fell back to server.host silently,
    # unlike an empty --config
    config = tmp_path / "c.yaml"
    config.write_text("server: {host: 127.0.0.1}\n")
    for command in ("serve", "healthcheck"):
        result = run_cli(command, "--config", str(config), "--host", "")
        assert result.returncode == 1, (command, result.stdout)
        assert result.stderr.endswith(
            "--host is empty (an unset variable?): give an address, or no --host\n"
        ), result.stderr


def test_cli_refuses_an_empty_config_file_name() -> None:
    # `cachegate serve --config "$CONFIG"` with CONFIG unset served the built-in config (the
    # bundled model, ./data), and `cachegate config check "$CONFIG"` in CI passed with exit 0.
    for args in (("config", "check", ""), ("config", "show", ""), ("serve", "--config", ""),
                 ("healthcheck", "-c", ""), ("prepare", "--config", "")):  # fmt: skip
        result = run_cli(*args)
        assert result.returncode == 1, (args, result.stdout)
        assert result.stdout == ""
        assert result.stderr == (
            "error: the config file name is empty (an unset variable?): give a file, or no name "
            "at all for the built-in configuration\n"
        )


def test_cli_config_check_refuses_an_upstream_key_no_header_can_carry(tmp_path: Path) -> None:
    # `config check` passed, and every request failed: a 400 invalid_header that blamed the
    # client (non-ASCII), or a 502 "Illegal header: b'authorization'" (a newline from ${VAR})
    config = tmp_path / "up.yaml"
    config.write_text(
        "models:\n"
        "  gpt: {backend: openai, base_url: 'http://127.0.0.1:9/v1', api_key: '${UP_KEY}'}\n"
        "  claude: {backend: anthropic, base_url: 'http://127.0.0.1:9', api_key: sk-ant}\n"
    )
    for key, problem in (
        ("sk-live\n", "models.gpt.api_key has spaces or a newline around it (from its ${VAR}?)"),
        ("sk-tést", "models.gpt.api_key has a character a client cannot send in an HTTP header "
                    "as it is (U+00E9 at index 4): a key is printable ASCII"),
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "config", "check", str(config)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "UP_KEY": key},
        )  # fmt: skip
        assert result.returncode == 1 and result.stderr == f"error: {config}: {problem}\n"
    claude = config.read_text().replace("api_key: sk-ant", 'api_key: "sk-ant\\x7f"')
    with pytest.raises(ConfigError, match=r"models\.claude\.api_key has a character"):
        load_config_text(claude.replace("${UP_KEY}", "sk-live"), source="up.yaml")
