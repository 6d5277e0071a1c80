"""``shopcomp serve``: run the tools, the judge and the rewards as a Ray Serve application
(:mod:`shopping_companion.serve.app`; docs/cluster.md) until Ctrl-C."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from shopping_companion.cli.common import app, config_option, console, option, set_option, sets_of
from shopping_companion.errors import ConfigError

__all__ = ["MIN_TOKEN_CHARS", "bench_overrides", "serve_cmd"]

_NAME = re.compile(r"[^A-Za-z0-9._-]+")
#: Shorter bearer tokens get a warning at start.
MIN_TOKEN_CHARS = 16


def bench_overrides(values: list[str]) -> dict[str, str]:
    """``{name: directory}`` of ``--bench`` values, each ``NAME=DIR`` or ``DIR`` (named after the
    directory, made unique with ``-2``, ``-3``...). Raises :class:`ConfigError` naming ``--bench``
    for an empty value or a name given twice."""
    out: dict[str, str] = {}
    for raw in values:
        text = raw.strip()
        name, sep, path = text.partition("=")
        if not sep:
            name, path = "", text
        if not path.strip():
            raise ConfigError(f"--bench {raw!r}: give a benchmark directory, as DIR or NAME=DIR")
        if sep and name.strip() in out:
            raise ConfigError(f"--bench {raw!r}: the name {name.strip()!r} is given twice")
        if not sep:
            base = _NAME.sub("-", Path(path).expanduser().resolve().name).strip("-._") or "bench"
            name, n = base, 1
            while name in out:
                n += 1
                name = f"{base}-{n}"
        out[name.strip()] = path.strip()
    return out


@app.command("serve")
def serve_cmd(
    config: Optional[Path] = config_option("the service (see configs/serve/)"),
    bench: Optional[list[str]] = option(
        None,
        "--bench",
        metavar="[NAME=]DIR",
        help="A benchmark to serve (repeatable; added to the config's benchmarks; NAME: the directory's name).",
    ),
    host: Optional[str] = option(
        None,
        "--host",
        metavar="HOST",
        help="Address the HTTP proxy binds (default 127.0.0.1; any other needs the bearer token, see below).",
    ),
    port: Optional[int] = option(None, "--port", metavar="PORT", min=1, max=65535, help="HTTP port (default 8000)."),
    ray_address: str = option(
        "local",
        "--ray",
        metavar="ADDRESS",
        help="Ray cluster: local (a private one here; default) | auto | HOST:PORT | ray://HOST:PORT.",
    ),
    num_cpus: Optional[int] = option(
        None, "--num-cpus", metavar="N", min=1, help="CPUs of the private cluster (--ray local; default all)."
    ),
    check: bool = option(False, "--check", help="Check the configuration (and print it) without starting anything."),
    set_: Optional[list[str]] = set_option(),
) -> None:
    """Serve product_search, product_view, mem_search, mem_view, judge and reward over HTTP/JSON
    (API under /v1, OpenAPI schema at /v1/openapi.json) as a Ray Serve application, so rollout
    workers and evaluations on any node share one index, one MiniLM model and one set of memory
    stores. Point clients at it with tools: serve:URL (eval: --tools serve:URL; verl agent loop:
    tool_service). Settings: --config (configs/serve/local.yaml), then the flags, then --set.

    Security: the service binds 127.0.0.1 unless --host says otherwise; any other address needs a
    bearer token in $SHOPCOMP_SERVE_TOKEN (or the variable token_env names), which every route
    but /v1/health and the static /v1/docs page then requires.

    Runs until Ctrl-C or SIGTERM (exit 0, "stopped"); exit 2 for a configuration or data error, 1 a bug.
    Needs Ray Serve (pip install -e ".[serve]")."""
    from shopping_companion.assembly.cluster import local_cpus
    from shopping_companion.serve.config import describe_reserved, fits_cluster, load_serve_config

    sets = sets_of(set_)
    extra = bench_overrides(list(bench or []))
    if extra:
        sets = [f"benchmarks.{name}={_yaml_str(path)}" for name, path in extra.items()] + sets
    if config is None and not extra and not any(s.strip().startswith("benchmarks") for s in sets):
        raise ConfigError("no benchmark to serve: pass --bench DIR (repeatable) or --config with a benchmarks group")
    cfg = load_serve_config(config, sets, host=host, port=port)
    for name, path in cfg.benchmarks.items():
        if not (Path(path).expanduser() / "tasks.jsonl").is_file():
            raise ConfigError(
                f"benchmarks.{name}: {path} is not a benchmark directory (no tasks.jsonl; `shopcomp synth` writes one)"
            )
    from shopping_companion.assembly.data import resolve_sources

    resolve_sources(cfg.data.data_dir)  # a missing data directory: exit 2 now, not from a replica
    token = cfg.token()
    console.print(
        f"[bold]serve[/] {len(cfg.benchmarks)} benchmark(s) ({escape(', '.join(cfg.benchmarks))}), reward spec "
        f"{escape(cfg.reward_config)}, on {escape(cfg.host)}:{cfg.port}; bearer token "
        + (f"required (${cfg.token_env})" if token else f"off (${cfg.token_env} is not set)"),
        soft_wrap=True,
    )
    console.print(describe_reserved(cfg.deployments), soft_wrap=True)
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        console.print(
            f"[yellow]warning[/]: ${cfg.token_env} is {len(token)} characters long; a bearer token anyone can guess "
            f"protects nothing: use at least {MIN_TOKEN_CHARS} random characters (e.g. `openssl rand -hex 32`)",
            soft_wrap=True,
        )
    if check:
        if ray_address.strip().lower() == "local":
            short = fits_cluster(cfg.deployments, float(local_cpus(num_cpus)))
            if short:
                console.print(
                    f"[yellow]warning[/]: on a private cluster of this machine: {escape(short)}", soft_wrap=True
                )
        print(_dump(cfg))
        return
    if ray_address.strip().lower() == "local":  # a private cluster: nothing of ours holds the port yet
        port_free(cfg.host, cfg.port)
        # it never grows: replicas it cannot place are refused before Ray starts (deploy() would
        # refuse them only after starting it), with the CPUs connect() gives it
        short = fits_cluster(cfg.deployments, float(local_cpus(num_cpus)))
        if short:
            raise ConfigError(short)
    try:
        from shopping_companion.assembly.cluster import connect
        from shopping_companion.serve.app import deploy, shutdown
    except ImportError as e:
        raise ConfigError(f"shopcomp serve needs Ray Serve ({e}); install it: pip install -e '.[serve]'") from None
    conn = connect(ray_address, num_cpus=num_cpus)
    t0 = time.perf_counter()
    try:
        short = fits_cluster(cfg.deployments, conn.cpus)
        if short and not conn.local:  # deploy refuses it on a private cluster; this one may grow
            console.print(
                f"[yellow]warning[/]: {escape(short)}; replicas wait until the cluster has room", soft_wrap=True
            )
        console.print("deploying (each replica loads its data; the first start may build the BM25 index) ...")
        try:
            deployed = deploy(cfg, address=ray_address)
        except RuntimeError as e:  # a replica's constructor failed (missing data, an index that cannot be built)
            raise ConfigError(f"the service did not start: {replica_cause(str(e))}") from None
        console.print(
            f"[green]ready[/] in {time.perf_counter() - t0:.1f} s: {escape(deployed.url)}/v1 "
            f"(docs {escape(deployed.docs_url)}); clients: tools: serve:{escape(deployed.url)}",
            soft_wrap=True,
        )
        console.print("Ctrl-C (or SIGTERM) stops the service.")
        signal.signal(signal.SIGTERM, _interrupt)  # systemd, Docker and Kubernetes stop with SIGTERM
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping ...")
        shutdown()
        console.print("stopped")
    finally:
        conn.close()


def port_free(host: str, port: int) -> None:
    """Raise :class:`ConfigError` naming ``--port`` when ``host``:``port`` cannot be bound (another
    process listens there), before Ray starts: Serve's proxy would fail later with a long
    traceback."""
    import socket

    h = host.strip("[]")
    family = socket.AF_INET6 if ":" in h else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((h, port))
        except socket.gaierror as e:
            raise ConfigError(f"--host {host!r}: not an address of this machine ({e.strerror or e})") from None
        except OSError as e:
            if e.errno == 99:  # EADDRNOTAVAIL: not one of this machine's addresses
                raise ConfigError(f"--host {host!r}: not an address of this machine ({e.strerror})") from None
            raise ConfigError(
                f"--port {port}: cannot listen on {host}:{port} ({e.strerror or e}); another process holds it: "
                "stop it or choose another --port"
            ) from None


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


#: Exception lines of a Ray error's embedded tracebacks: ``[module.]Name(Error|Exception): message``.
_EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)$")
#: Ray's own wrappers around the replica's error (never the cause).
_RAY_WRAPPERS = {"RuntimeError", "RayTaskError", "RayActorError", "DeploymentUnavailableError", "RayServeException"}


def replica_cause(text: str, limit: int = 600) -> str:
    """The cause of a failed deployment from Ray's error ``text``: the last ``Name: message`` line
    of the replicas' tracebacks that is not one of Ray's wrappers (e.g. ``DataDirError: data
    directory ... does not exist``), else the text's first ``limit`` characters (whitespace
    collapsed)."""
    cause = None
    for line in text.splitlines():
        m = _EXC_LINE.match(line)
        if m and m.group(1) not in _RAY_WRAPPERS and not m.group(1).startswith("Ray"):
            cause = f"{m.group(1)}: {m.group(2).strip()}"
    flat = " ".join(text.split())
    return cause[:limit] if cause else flat[:limit]


def _yaml_str(text: str) -> str:
    """``text`` as a YAML scalar that stays a string (a path like ``yes`` or ``1.0``)."""
    import json

    return json.dumps(text)


def _dump(cfg: Any) -> str:
    import yaml

    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
