"""The ``cachegate`` command line.

cachegate serve [--config FILE] [--host HOST] [--port PORT]   run the gateway
cachegate healthcheck [--config FILE] [--host HOST] [--port PORT]   0: /readyz says ready
cachegate config check FILE                                   validate a config file
cachegate config show [FILE]                                  print the effective config
cachegate key new [--tenant NAME | --admin]                   a new key and its SHA-256 digest
cachegate stats / cache ls|show|rm|flush [--url URL] [--key KEY]   inspect a running gateway
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import signal
import socket
import sys
import termios
import time
import urllib.parse
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from .admin_cli import add_commands
from .auth import AllowedHosts
from .config import (
    Config,
    ConfigError,
    LocalModelConfig,
    SemanticCacheConfig,
    default_config,
    dump_config,
    load_config,
)

__all__ = ["main"]

log = logging.getLogger("cachegate")

_DESCRIPTION = """\
cachegate: a caching gateway for LLM applications.

Point any OpenAI SDK at http://HOST:PORT/v1. Each request passes the response cache
(exact, then semantic match), then runs on the bundled local model (reusing prompt-prefix
KV tensors) or is forwarded to an OpenAI-compatible upstream. Without --config, the gateway
serves the bundled SmolLM2-135M-Instruct model with embedded caches in ./data.
"""

_EPILOG = """\
examples:
  cachegate serve                                  bundled local model on 127.0.0.1:8080
  cachegate serve --config cachegate.yaml --port 9000
  cachegate worker --port 8081                     the bundled model alone, for gateways to share
  cachegate config check cachegate.yaml            exit status 0 when the file is valid
  cachegate key new --tenant team-a                a key for auth.keys, stored as its digest
  cachegate stats --url http://127.0.0.1:8080      hit rates, prefix KV cache, money saved
  cachegate cache ls --kind semantic               cached answers, newest first

configuration reference: docs/configuration.md
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C before uvicorn took the signals (imports, Runtime.build)
        return 130
    except BrokenPipeError:  # the reader left (`cachegate cache ls | head`): stop, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (for the exit's flush)
        return 1
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachegate",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the gateway (OpenAI-compatible API on --host:--port)",
        description="Run the gateway: response cache + local model / upstream forwarding.",
    )
    _serving_options(serve)
    serve.set_defaults(func=_serve, worker=False)

    worker = commands.add_parser(
        "worker",
        help="serve only the local model(s): tiers 2 and 3, no response cache",
        description="Serve the config's `backend: local` models over the same OpenAI-compatible "
        "API (with usage.prompt_tokens_details.cached_tokens), without a response cache. A "
        "gateway reaches a worker as an `openai` backend (base_url or one of its replicas).",
    )
    _serving_options(worker)
    worker.set_defaults(func=_serve, worker=True)

    prepare = commands.add_parser(
        "prepare",
        help="load every model once (converting the bundled one) and exit",
        description="Convert the bundled GGUF model into data_dir and load the embedding model "
        "and the verifier (when set), exporting their ONNX graphs, so that a later start is "
        "fast (used when building container images).",
    )
    prepare.add_argument("--config", "-c", metavar="FILE", help="YAML configuration file")
    prepare.set_defaults(func=_prepare)

    _healthcheck_command(commands)
    _config_commands(commands)
    add_commands(commands)
    return parser


def _healthcheck_command(commands: Any) -> None:
    healthcheck = commands.add_parser(
        "healthcheck",
        help="exit 0 when the gateway or worker of this config answers /readyz with 200",
        description="Ask GET /readyz of the server that `serve` or `worker` runs with the same "
        "--config, --host and --port (a wildcard host: 127.0.0.1), past any proxy the "
        "environment names; exit status 0 when it is ready (the image's HEALTHCHECK).",
    )
    _serving_options(healthcheck, verb="ask")
    healthcheck.set_defaults(func=_healthcheck)


def _config_commands(commands: Any) -> None:
    """``config check FILE`` and ``config show [FILE]``."""
    config = commands.add_parser("config", help="check or show a configuration file")
    config_commands = config.add_subparsers(
        title="config commands", metavar="ACTION", required=True
    )
    check = config_commands.add_parser(
        "check", help="validate FILE; print the effective configuration or the errors"
    )
    check.add_argument("file", help="YAML configuration file")
    check.set_defaults(func=_config_check)
    show = config_commands.add_parser("show", help="print the effective configuration")
    show.add_argument("file", nargs="?", help="YAML configuration file (default: built-in)")
    show.set_defaults(func=_config_check)


def _serving_options(parser: argparse.ArgumentParser, verb: str = "bind") -> None:
    parser.add_argument("--config", "-c", metavar="FILE", help="YAML configuration file")
    parser.add_argument("--host", help=f"address to {verb} (overrides server.host)")
    parser.add_argument("--port", type=int, help=f"port to {verb} (overrides server.port)")


def _load(path: str | None) -> Config:
    # NOTE: only a missing option is the built-in config: `--config "$CONFIG"` with CONFIG unset
    # served the bundled model (and `config check ""` passed, exit 0) instead of failing
    if path == "":
        raise ConfigError("the config file name is empty (an unset variable?): give a file, "
                          "or no name at all for the built-in configuration")  # fmt: skip
    return default_config() if path is None else load_config(path)


def _config_check(args: argparse.Namespace) -> int:
    try:
        config = _load(args.file)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(dump_config(config))
    return 0


def _with_overrides(config: Config, args: argparse.Namespace) -> Config:
    """``--host`` / ``--port`` over the file's ``server`` settings, checked as the file's are."""
    if args.host == "":  # (`--host "$HOST"` with HOST unset: it fell back to server.host)
        raise ConfigError("--host is empty (an unset variable?): give an address, or no --host")
    overrides = {"host": args.host, "port": args.port}
    server = msgspec.structs.asdict(config.server)
    for name, value in overrides.items():
        if value is None:
            continue
        try:  # NOTE: structs.replace would skip the type's checks (port 70000 bound 4464)
            msgspec.convert({**server, name: value}, type(config.server))
        except msgspec.ValidationError as exc:
            what = str(exc).split(" - at ")[0]
            raise ConfigError(f"--{name} {value}: {what[:1].lower()}{what[1:]}") from None
        server[name] = value
    return msgspec.structs.replace(config, server=type(config.server)(**server))


def _healthcheck(args: argparse.Namespace) -> int:
    """``cachegate healthcheck``: 0 when ``/readyz`` of the configured port answers 2xx.

    NOTE: no proxy (``ProxyHandler({})``): Docker injects ~/.docker/config.json's proxies into
    containers, podman the host's, and urllib would send 127.0.0.1 to the proxy unless
    NO_PROXY names it (not a CIDR).
    """
    import http.client
    import urllib.error
    import urllib.request

    try:
        server = _with_overrides(_load(args.config), args).server
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if server.port == 0:  # (any free port: only the server's start log says which)
        print("error: server.port is 0 (any free port): pass the port the server bound, which"
              " its start logs, as --port", file=sys.stderr)  # fmt: skip
        return 1
    host = server.host if server.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{server.port}/readyz"
    try:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=4)
    except (OSError, ValueError) as exc:  # (urllib's HTTPError and URLError are OSErrors)
        print(f"error: {url}: {exc}", file=sys.stderr)
        return 1
    except http.client.HTTPException as exc:  # (BadStatusLine: another service on the port)
        print(f"error: {url}: {type(exc).__name__}: {' '.join(str(exc).split())[:100]}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _check_model_sources(config: Config, *, semantic: bool = True) -> None:
    """A ``ConfigError`` for a local model's ``source`` path, or the semantic tier's
    ``verifier`` or ``embedding_model`` path, that names no directory.

    NOTE: the config resolves a path (absolute, ``./``, ``../``) to an absolute one and
    leaves a hub id as it is. Loaded as a hub id, a missing directory failed in the background
    with Hugging Face's "Repo id must be in the form 'repo_name' ..." in /readyz; a misspelt
    verifier or embedder directory left the gateway serving exact hits only, its one sign an
    error in the log and ``/admin/stats``. Checked when the models are to be loaded, not by
    ``config check``: a deployment's config names paths inside its image. ``semantic``: the
    semantic tier is to be loaded too (not by a worker, which has no response cache).
    """
    paths: list[tuple[str, str, str]] = []
    tier = config.cache.semantic
    if semantic and config.cache.enabled and tier.enabled:
        paths.append(("cache.semantic.verifier", tier.verifier, "`off`"))
        paths.append(("cache.semantic.embedding_model", tier.embedding_model,
                      "a sentence-transformers model id already in the local cache"))  # fmt: skip
    paths += [
        (f"models.{name}.source", model.source, "a Hugging Face hub id already in the local cache")
        for name, model in config.models.items()
        if isinstance(model, LocalModelConfig)
    ]
    for key, value, other in paths:
        path = Path(value)
        if path.is_absolute() and not path.is_dir():
            what = "is not a directory" if path.exists() else "does not exist"
            raise ConfigError(
                f"{key}: {path} {what} (give a model directory, {other}, or `bundled`)"
            )


def _serve(args: argparse.Namespace) -> int:
    try:
        config = _with_overrides(_load(args.config), args)
        _check_ports(config)
        _check_model_sources(config, semantic=not args.worker)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _setup_logging(config.server.log_level)
    from semantic.store import StoreOpenError

    from .app import create_admin_app, create_app
    from .runtime import Runtime

    try:
        runtime = Runtime.build(config, worker=args.worker)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except StoreOpenError as exc:
        print(f"error: data_dir: {exc}", file=sys.stderr)
        return 1
    _log_admin_access(config)
    app = create_app(config, runtime=runtime)
    admin = create_admin_app(runtime) if config.server.admin_port is not None else None
    served = (
        f"cachegate {'worker' if args.worker else 'gateway'} serving {', '.join(runtime.backends)}"
    )
    code = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            _run(_run_servers(config, app, admin, runtime, served))
    except SystemExit as exc:  # uvicorn's, when it cannot bind (a port taken since the check)
        code = exc.code if isinstance(exc.code, int) else 1
    if _still_loading(runtime):
        _exit_now(code)
    return code


def _still_loading(runtime: Any) -> bool:
    """Whether a thread that exiting must not wait for still runs: a load, or a local model's
    engine stuck in a step (``LocalBackend.left_running``)."""
    if runtime.cache is not None and runtime.cache.loading:  # its embedder, verifier or index
        return True
    # NOTE: not imported here: Runtime.build imported it for a local model, and without one
    # the import (torch, transformers: seconds of CPU) held the exit after "Finished server
    # process"; importing it while a load imports transformers on its thread failed too
    # (ImportError on a partly initialised module)
    local = sys.modules.get(f"{__package__}.local")
    backends = runtime.backends.values()
    return local is not None and any(
        isinstance(b, local.LocalBackend) and (b.loading or b.left_running) for b in backends
    )


def _exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's finalization, its log and output flushed.

    NOTE: for a model load that a shutdown left running on its daemon thread
    (``LocalBackend.close``, ``ResponseCache.close``): finalization ended that thread inside
    torch's C++ code, and the process aborted ("FATAL: exception not rethrown", killed by
    SIGABRT) instead of exiting 0 after Ctrl-C (or with uvicorn's status 3 when it could not
    bind).
    """
    with contextlib.suppress(RuntimeError):  # (from a signal handler that came inside a write)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _quit_now(sig: int) -> NoReturn:
    """A third Ctrl-C or SIGTERM: exit at once (status 128 + the signal's number), whatever
    the shutdown still waits for.

    NOTE: the second one hurries the shutdown (``Main.hurried``) and takes uvicorn's force
    quit back; every one after it was then swallowed, and a shutdown that hung (a client
    that never finished sending its request, the app's own shutdown flushing traces to a
    collector that does not answer) could be ended only with SIGKILL. Here, in the signal
    handler: the event loop may be blocked in that shutdown.
    """
    with contextlib.suppress(RuntimeError):  # (the signal came inside a write to the log)
        log.warning("shutdown: a third signal (%s): exiting now", signal.Signals(sig).name)
    _exit_now(128 + sig)


#: Seconds after a counted signal within which another one is the same stop, not a second.
#: NOTE: foreman, honcho (and a shell script that traps INT to kill its children) turn one
#: Ctrl-C into two signals: the terminal's SIGINT to the whole process group, and the
#: manager's SIGTERM to its children, sent from its own SIGINT handler, milliseconds later.
#: Counted as two, one Ctrl-C hurried the shutdown: open requests got 503 at once instead of
#: ``shutdown_timeout`` to finish. A second apart leaves room for a busy machine; a person who
#: means a second Ctrl-C presses it once the first has said "Waiting for connections to
#: close", past that; one pressed sooner is logged as not counted (press again).
SAME_SIGNAL_WINDOW = 1.0


def _same_signal(sig: int, after: float) -> None:
    """Say that ``sig``, ``after`` s since the signal counted last, is not counted."""
    with contextlib.suppress(RuntimeError):  # (the signal came inside a write to the log)
        log.info("shutdown: %s %.2fs after the last signal counts as the same one (another, "
                 "a second or more later, hurries the shutdown)",
                 signal.Signals(sig).name, after)  # fmt: skip


def _check_ports(config: Config) -> None:
    """Raise ConfigError when ``port`` or ``admin_port`` cannot be bound on ``host``.

    NOTE: uvicorn binds only after the app's startup, which starts loading the models: a port
    in use was reported at once but the process exited only once they had loaded (the bundled
    model's first conversion: 20 s to a minute). A probe, as uvicorn binds (SO_REUSEADDR, one
    socket per address the host resolves to); uvicorn's own error stays for a port taken since.
    """
    host = config.server.host
    for name in ("port", "admin_port"):
        port = getattr(config.server, name)
        if port is None:
            continue
        try:
            addresses = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except socket.gaierror as exc:
            raise ConfigError(f"server.host {host}: {(exc.strerror or str(exc)).lower()}") from None
        unavailable = 0
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    probe.bind(address)
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL:  # (a family this machine lacks)
                        unavailable += 1
                        continue
                    why = (exc.strerror or str(exc)).lower()
                    raise ConfigError(
                        f"cannot listen on {host}:{port} (server.{name}): {why}"
                    ) from None
        if unavailable == len(addresses):  # (no address of this machine: another's, a typo)
            raise ConfigError(
                f"cannot listen on {host}:{port} (server.host): not an address of this machine"
            )


#: Seconds uvicorn's own deadline comes after ours: requests that ``abort_in_flight`` ended
#: send their error body in that time instead of being cut.
_SHUTDOWN_GRACE = 2.0
#: Seconds after our deadline that a connection may still take to send its last bytes to its
#: client (``_drop_unread``): within uvicorn's, which a second signal does not bring forward.
_FLUSH_GRACE = 1.0


async def _run_servers(
    config: Config, app: object, admin: object | None, runtime: Any, served: str
) -> None:
    import uvicorn

    from .corked import serving_protocol

    protocol = serving_protocol(config.server.header_timeout, config.server.max_header_bytes)

    def server_config(application: object, port: int) -> uvicorn.Config:
        return uvicorn.Config(
            application,  # type: ignore[arg-type]
            host=config.server.host,
            port=port,
            log_level=config.server.log_level,
            access_log=config.server.log_level == "debug",
            http=protocol,
            loop="none",
            timeout_graceful_shutdown=math.ceil(config.server.shutdown_timeout + _SHUTDOWN_GRACE),
        )

    main_config = server_config(app, config.server.port)
    admin_server = admin_task = None
    if admin is not None and config.server.admin_port is not None:
        admin_server = _uvicorn_server()(server_config(admin, config.server.admin_port))
        admin_task = asyncio.create_task(admin_server.serve())
    _redact_access_log()  # (after uvicorn.Config, which configures its loggers)
    main_server = _main_server(main_config, admin_server, admin_task, served)
    servers = [main_server] if admin_server is None else [main_server, admin_server]
    deadline = asyncio.create_task(_shutdown_deadline(servers, runtime, config))
    try:
        await main_server.serve()
    finally:
        deadline.cancel()
        if admin_server is not None and admin_task is not None:
            admin_server.should_exit = True
            await admin_task


class _RedactKey(logging.Filter):
    """Hide ``?key=`` (the dashboard's admin key, when opened in a browser) in access logs,
    however its name is spelt: ``k%65y`` and ``KEY`` carry the key as well."""

    _PARAM = re.compile(r"([?&][^=&\s]*=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._PARAM.sub(_hidden, a) if isinstance(a, str) else a for a in record.args
            )
        return True


def _hidden(param: re.Match[str]) -> str:
    named = urllib.parse.unquote_plus(param[1][1:-1]).strip().lower()
    return f"{param[1]}***" if named == "key" else param[0]


def _redact_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _RedactKey) for f in access.filters):
        access.addFilter(_RedactKey())


async def _shutdown_deadline(servers: list[Any], runtime: Any, config: Config) -> None:
    """Once a shutdown starts, give open requests ``shutdown_timeout`` s (or until a second
    Ctrl-C or SIGTERM: ``server.hurried``), then end them with a 503 ``shutting_down`` error
    (a body, or an event on a started stream), those whose body is still arriving too.

    ``servers``: the data port's first (it takes the signals), then the admin port's.
    """
    server = servers[0]
    while not server.should_exit:
        await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.server.shutdown_timeout
    while loop.time() < deadline and not server.hurried:
        await asyncio.sleep(min(0.1, max(deadline - loop.time(), 0)))
    waited = "a second signal" if server.hurried else f"{config.server.shutdown_timeout:.0f}s"
    if aborted := runtime.abort_in_flight():
        log.warning("shutdown: %d requests still open after %s; ended", aborted, waited)
    if uploads := _end_uploads(servers):
        log.warning("shutdown: %d requests still sending their body after %s; ended",
                    uploads, waited)  # fmt: skip
    await _drop_unread(servers, waited)


def _end_uploads(servers: list[Any]) -> int:
    """End the requests of ``servers`` whose body is still arriving (``end_upload``)."""
    from .corked import CorkedHttpToolsProtocol

    connections = [c for server in servers for c in server.server_state.connections]
    return sum(c.end_upload() for c in connections if isinstance(c, CorkedHttpToolsProtocol))


async def _drop_unread(servers: list[Any], waited: str) -> None:
    """Every ``_FLUSH_GRACE`` s from the deadline until the connections of ``servers`` are gone,
    drop those that only wait to send what their client does not read: closing (their answer,
    or the error that ended it, was written) with no byte of it taken since the look before.

    NOTE: a transport closes only once its buffered bytes are sent: a client that stopped
    reading (a stream it no longer took, a large answer) held the drain after a second signal
    for uvicorn's whole ``timeout_graceful_shutdown``, its request long ended. One still
    reading, however slowly, keeps its connection (until uvicorn's own deadline): all closing
    ones were dropped, a large answer read steadily cut half way.
    """
    looked = {c: _unsent(c.transport) for s in servers for c in s.server_state.connections}
    while looked:
        await asyncio.sleep(_FLUSH_GRACE)
        connections = [c for s in servers for c in s.server_state.connections]
        unsent = {c: _unsent(c.transport) for c in connections}
        stalled = [c for c in connections if c.transport.is_closing() and c in looked
                   and unsent[c] >= looked[c]]  # fmt: skip
        for connection in stalled:
            connection.transport.abort()
        looked = {c: left for c, left in unsent.items() if c not in stalled}
        if stalled:
            log.warning("shutdown: %d clients took nothing of their answers %.0fs after %s; "
                        "connections dropped", len(stalled), _FLUSH_GRACE, waited)  # fmt: skip


def _unsent(transport: Any) -> int:
    """Bytes ``transport`` holds that its client has not yet received: in its buffer, and
    in the socket's send queue (Linux: unacknowledged; the buffer alone moves only once the
    queue has room for much of it, seconds apart for a client reading a few kB at a time)."""
    held = int(transport.get_write_buffer_size())
    sock = transport.get_extra_info("socket")
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
    except (AttributeError, OSError, ValueError):  # (not Linux, or the socket gone)
        return held
    return held + int.from_bytes(queued, sys.byteorder, signed=True)


def _log_admin_access(config: Config) -> None:
    """Say at start who can open /admin/*, /metrics and /dashboard (see gateway.auth)."""
    port = config.server.port if config.server.admin_port is None else config.server.admin_port
    where = f"port {port}" if port else "a free port"  # (0: which one is logged once bound)
    if config.admin.keyed:
        log.info("admin routes on %s need admin.api_key", where)
    elif config.auth.keys:
        log.warning(
            "admin routes (/admin/*, /metrics, /dashboard) are CLOSED: auth.keys is set and "
            "admin.api_key is not, and tenant keys never open them; set admin.api_key "
            "(or admin.api_key_sha256) to use them"
        )
    else:
        local = config.server.host in ("127.0.0.1", "localhost", "::1")
        log.log(
            logging.INFO if local else logging.WARNING,
            "admin routes on %s are open to anyone who can reach %s (no auth.keys, no "
            "admin.api_key)%s",
            where,
            config.server.host,
            "" if local else ": set admin.api_key or bind to localhost",
        )
    _log_rebinding(config)


def _log_rebinding(config: Config) -> None:
    """Warn at start when nothing stops a DNS-rebinding page (``gateway.auth.AllowedHosts``):
    on an address other than loopback, ``server.allowed_hosts`` left out answers any ``Host``,
    and without ``auth.keys`` the API (the admin routes too, without ``admin.api_key``) asks no
    key that a page cannot send. ``*`` listed is the operator's own choice: not warned."""
    if config.auth.keys or config.server.allowed_hosts is not None:
        return
    if not AllowedHosts.from_server(config.server).wildcard:  # (loopback: its own names)
        return
    routes = "/v1/*" if config.admin.keyed else "/v1/* and the admin routes"
    log.warning(
        "DNS-rebinding protection is off: on %s, server.allowed_hosts is not set (any Host is "
        "answered) and %s ask no key, so a web page whose name is pointed at this address can "
        "use them from a browser; list the names clients reach the gateway by, e.g. "
        "server.allowed_hosts: [gateway.example.com, localhost]",
        config.server.host,
        routes,
    )


def _prepare(args: argparse.Namespace) -> int:
    try:
        config = _load(args.config)
        _check_model_sources(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _setup_logging("info")
    from localmodel import Engine

    from .local import LocalBackend

    for name, model in config.models.items():
        if isinstance(model, LocalModelConfig):
            engine_config = LocalBackend.from_config(name, model, config).engine_config
            try:
                engine = Engine.load(engine_config)
            except (RuntimeError, ValueError) as exc:  # ModelLoadError: device, source, window
                # (was a traceback of a hundred lines, the cause at its end)
                print(f"error: models.{name}: {exc}", file=sys.stderr)
                return 1
            log.info("model %s ready (context window %d tokens)", name, engine.context_window)
            engine.close()
    semantic = config.cache.semantic
    return _prepare_semantic(semantic) if config.cache.enabled and semantic.enabled else 0


def _prepare_semantic(semantic: SemanticCacheConfig) -> int:
    """Load the embedder, and the verifier when one is set, exporting their ONNX graphs.

    1 when either falls back to torch: an image built now would run it slowly; say so, fail
    the build.
    """
    from semantic.embedder import Embedder

    model_path = None if semantic.embedding_model == "bundled" else semantic.embedding_model
    embedder = Embedder(
        model_path,
        backend=semantic.embedder_backend,
        export_dir=semantic.embedder_export_dir,
    )
    log.info(
        "embedding model %s ready (%d dimensions, %s backend)",
        embedder.model_name,
        embedder.dim,
        embedder.backend,
    )
    embedder.close()
    fallback = embedder.fallback and f"embedder: {embedder.fallback}"
    if not fallback and semantic.verifier != "off":
        from semantic.verifier import PairVerifier

        verifier = PairVerifier(
            None if semantic.verifier == "bundled" else semantic.verifier,
            backend=semantic.verifier_backend,
            export_dir=semantic.embedder_export_dir,
        )
        log.info("verifier %s ready (%s backend)", verifier.path, verifier.backend)
        # NOTE: int8 falling back to float32 onnx still serves (on its own calibration): only
        # an export that could not be made at all fails prepare
        failed = verifier.backend == "torch" and semantic.verifier_backend != "torch"
        fallback = f"verifier: {verifier.fallback}" if failed else ""
    if fallback:
        print(f"error: {fallback}", file=sys.stderr)
        return 1
    return 0


def _setup_logging(level: str) -> None:
    # NOTE: transformers draws a progress bar ("Loading weights: 45%|...") on every model
    # load; in a server's log, which is not a terminal, it is carriage-return noise between
    # the log lines. Set before transformers is first imported (it reads it then); a user's
    # own HF_HUB_DISABLE_PROGRESS_BARS=0 still wins.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every upstream request at INFO: cachegate.requests already has one line per
    # request (with the upstream's request id), so httpx's own lines show only at debug.
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)


def _main_server(
    config: Any, admin: Any | None, admin_task: asyncio.Task[None] | None, served: str
) -> Any:
    """The data port's server, which logs where it listens once it does (``_announce``); its
    shutdown stops the admin port's server too, and waits for it.

    NOTE: uvicorn re-raises the signal when the data port's server returns. The admin port
    went on taking connections while the data port drained, and was then killed (SIGTERM) or
    cancelled with a CancelledError traceback in the log (Ctrl-C).
    """
    import uvicorn

    class Main(uvicorn.Server):
        hurried = False  # a second signal came: open requests end now (_shutdown_deadline)
        counted = -math.inf  # (monotonic time of the last signal counted)

        def handle_exit(self, sig: int, frame: Any) -> None:
            # NOTE: uvicorn's own force quit cut the open requests (500s, streams cut with no
            # error event, a traceback each) and skipped the app's shutdown (runtime.close).
            # SIGTERM counts as Ctrl-C does (uvicorn ignored a second one: a `kill` repeated
            # to hurry a shutdown did nothing, and only SIGKILL was left)
            now = time.monotonic()
            if now - self.counted < SAME_SIGNAL_WINDOW:
                _same_signal(sig, now - self.counted)
                return
            self.counted = now
            if self.hurried:
                _quit_now(sig)
            second = self.should_exit
            super().handle_exit(sig, frame)
            if second:
                self.force_exit, self.hurried = False, True

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                await _announce(self, admin, admin_task, served)

    class WithAdmin(Main):
        async def shutdown(self, sockets: Any = None) -> None:
            assert admin is not None and admin_task is not None
            admin.should_exit = True  # both ports stop taking connections at once
            await asyncio.gather(super().shutdown(sockets), admin_task)

    return Main(config) if admin is None else WithAdmin(config)


async def _announce(
    main: Any, admin: Any | None, admin_task: asyncio.Task[None] | None, served: str
) -> None:
    """Log the ports bound: a port 0 in the config is the one the kernel picked (the log
    said ``:0``, and the two "Uvicorn running on" lines do not say which is the admin port)."""
    host = main.config.host
    said = f"{served} on http://{f'[{host}]' if ':' in host else host}:{_bound(main)}/v1"
    if admin is not None and admin_task is not None:
        while not admin.started and not admin_task.done():  # (it binds at once: no lifespan)
            await asyncio.sleep(0.01)
        if admin.started:
            said += f"; admin routes on port {_bound(admin)}"
    log.info("%s", said)


def _bound(server: Any) -> int:
    """The port a started uvicorn server listens on."""
    return int(server.servers[0].sockets[0].getsockname()[1])


def _uvicorn_server() -> type:
    import uvicorn

    class NoSignals(uvicorn.Server):
        """A second server in the same loop: the first one owns the signal handlers."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return NoSignals


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (faster sockets), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)


if __name__ == "__main__":
    sys.exit(main())
