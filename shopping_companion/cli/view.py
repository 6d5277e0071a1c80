"""``shopcomp view``: a read-only local web viewer of runs, or a static export of one (docs/viewer.md)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import app, console, option
from shopping_companion.errors import ConfigError

__all__ = ["LOCAL_HOSTS", "is_local_host", "view_cmd"]

#: Hosts that only this machine can reach; any other ``--host`` prints a warning.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local_host(host: str) -> bool:
    """``host`` is a loopback name or address (127.0.0.0/8, ::1, ``localhost``)."""
    if host.strip("[]").lower() in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: a free one). Raises
    :class:`ConfigError` naming the address when it cannot be bound."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: cannot resolve it ({e.strerror}); pass an address such as 127.0.0.1") from e
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({e.strerror or e}); "
            "pass another --port (0 picks a free one)"
        ) from e
    sock.set_inheritable(True)
    return sock


@app.command("view")
def view_cmd(
    targets: Optional[list[Path]] = typer.Argument(
        None,
        metavar="[RUNS_DIR | RUN]...",
        help="Runs directories (searched for runs), run directories or results/kept/validation files (default: runs).",
        show_default=False,
    ),
    port: int = option(8765, "--port", min=0, max=65535, help="TCP port (default 8765; 0 picks a free one)."),
    host: str = option(
        "127.0.0.1",
        "--host",
        help="Address to listen on (default 127.0.0.1, this machine only; any other prints a warning).",
    ),
    export: Optional[Path] = option(
        None,
        "--export",
        metavar="DIR",
        help="Write the one run given as a static HTML bundle to DIR (opens from file://) instead of serving.",
    ),
) -> None:
    """Serve a read-only web viewer of the runs (runs, episodes, one episode, compare; pages refresh
    while a run is written), or with --export write one run as a static HTML bundle. Ctrl-C stops
    the server (exit 0, "stopped")."""
    paths = list(targets or [Path("runs")])
    if export is not None:
        _export(paths, export)
        return
    try:
        _serve(paths, host, port)
    except KeyboardInterrupt:  # Ctrl-C (uvicorn shuts down, then re-raises it): the normal way to stop
        pass
    print("shopcomp view: stopped", flush=True)


def _export(paths: list[Path], out: Path) -> None:
    """``--export``: the one run found under ``paths`` written as a static bundle in ``out``.
    Raises :class:`ConfigError` unless exactly one run is found (naming the ones that are)."""
    from shopping_companion.viewer.export import export_run
    from shopping_companion.viewer.discovery import RunCatalog  # the web stack only when the command runs

    catalog = RunCatalog(paths)
    runs = catalog.runs()
    if len(runs) != 1:
        ids = ", ".join(s.run_id for s in runs[:20]) + (" ..." if len(runs) > 20 else "")
        raise ConfigError(
            f"--export needs exactly one run; {', '.join(map(str, paths))} holds {len(runs)} ({ids}); "
            "pass the run's directory or results file"
        )
    with console.status(f"exporting {runs[0].name}"):
        report = export_run(catalog, runs[0].run_id, out)
    note = f" ({report.n_failed} shown as errors)" if report.n_failed else ""
    console.print(f"exported {report.n_episodes} episode page(s){note}", soft_wrap=True, markup=False)
    print(report.index.resolve().as_uri(), flush=True)


def _serve(paths: list[Path], host: str, port: int) -> None:
    """Serve the runs under ``paths`` on ``host``:``port`` until stopped (SIGINT / SIGTERM).
    A non-local ``host`` prints a warning first; the ``Host`` headers answered are
    :func:`~shopping_companion.viewer.web.allowed_hosts_for` ``host``. Raises :class:`ConfigError`
    when the address cannot be bound."""
    import uvicorn

    from shopping_companion.viewer.app import create_app
    from shopping_companion.viewer.web import allowed_hosts_for
    from shopping_companion.viewer.discovery import RunCatalog

    catalog = RunCatalog(paths)
    hosts = allowed_hosts_for(host)
    if not is_local_host(host):
        any_host = (
            " It listens on every interface, so requests naming any host are answered (no protection against "
            "DNS rebinding): pass this machine's address as --host to answer only that name."
            if hosts == ["*"]
            else ""
        )
        console.print(
            f"warning: listening on {host}: the viewer is read-only but has no authentication; anyone who can "
            f"reach this address on the network can read every run it lists.{any_host}",
            style="bold yellow",
            soft_wrap=True,
            markup=False,
        )
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
    print(f"shopcomp view: serving {len(catalog.runs())} run(s) at http://{shown}:{bound}/ (Ctrl-C stops)", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(create_app(catalog, allowed_hosts=hosts), log_level="warning", access_log=False)
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
