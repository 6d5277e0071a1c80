"""The serve config's CPU reservations against the cluster, and the cause of a failed deployment."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.cli import app
from shopping_companion.cli.serve import replica_cause
from shopping_companion.errors import ConfigError
from shopping_companion.serve.config import DeploymentsConfig, fits_cluster, is_loopback, load_serve_config

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_shipped_config_fit_two_cpus():
    assert sum(DeploymentsConfig().reserved_cpus().values()) == pytest.approx(1.85)
    assert fits_cluster(DeploymentsConfig(), 2.0) is None
    cfg = load_serve_config(ROOT / "configs" / "serve" / "local.yaml", [])
    assert fits_cluster(cfg.deployments, 2.0) is None


def test_too_many_cpus_named_per_deployment():
    part = DeploymentsConfig.model_validate({"products": {"num_replicas": 3}})  # keeps products' defaults
    assert (part.products.num_cpus, part.products.max_ongoing_requests) == (0.5, 32)
    assert part.ingress.max_ongoing_requests == 256
    d = DeploymentsConfig.model_validate({"products": {"num_replicas": 3, "num_cpus": 1.0}})
    assert d.reserved_cpus()["products"] == 3.0
    msg = fits_cluster(d, 2.0)
    assert msg is not None
    assert "reserve 4.35 CPUs" in msg and "products 3" in msg and "has 2" in msg
    assert "deployments.<name>.num_cpus" in msg
    assert fits_cluster(d, 4.35) is None  # exactly enough fits
    assert fits_cluster(d, 4.3) is not None


def test_a_private_cluster_too_small_is_refused_before_ray_starts(tmp_path, data_dir, monkeypatch):
    """``shopcomp serve --num-cpus 2`` whose replicas reserve 2.85 CPUs: exit 2 naming the
    reservations, before Ray is imported (here ``import ray`` fails: had the command reached it, it
    would name the missing Ray Serve instead)."""
    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "tasks.jsonl").write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["serve", "--bench", str(tmp_path), "--num-cpus", "2", "--port", str(port)]
    args += ["--set", "deployments.products.num_replicas=3", "--set", f"data.data_dir={data_dir}"]
    r = CliRunner().invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "reserve 2.85 CPUs" in text and "has 2" in text and "Ray Serve" not in text


def test_check_and_run_count_the_private_cluster_the_same(tmp_path, data_dir, monkeypatch):
    """``--num-cpus`` is a whole number (Ray counts a node's CPUs in integers): a fraction is
    refused naming the flag, and ``--check`` warns exactly when the run refuses (it counted
    ``1.5`` as 1.5 CPUs while the run started Ray with 1)."""
    from shopping_companion.assembly.cluster import local_cpus

    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "tasks.jsonl").write_text("")
    base = ["serve", "--bench", str(tmp_path), "--set", f"data.data_dir={data_dir}"]
    r = CliRunner().invoke(app, base + ["--num-cpus", "1.5", "--check"])
    assert r.exit_code == 2 and "--num-cpus" in r.output, r.output
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the defaults reserve 1.85 CPUs: a 1-CPU private cluster is too small, for --check and the run alike
    check = CliRunner().invoke(app, base + ["--num-cpus", "1", "--check"])
    run = CliRunner().invoke(app, base + ["--num-cpus", "1", "--port", str(port)])
    assert check.exit_code == 0 and "warning" in check.output and "has 1" in " ".join(check.output.split())
    assert run.exit_code == 2 and "has 1" in " ".join(run.output.split()), run.output
    assert local_cpus(None) >= 1 and local_cpus(3) == 3
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError, match="num_cpus"):
            local_cpus(bad)


def test_replica_cause_finds_the_error_under_rays_wrappers():
    text = (
        "Deploying application shopcomp failed: Failed to update the deployments ['ProductTools'].\n"
        "ray::ServeReplica:shopcomp:ProductTools.initialize_and_get_metadata() (pid=1, ip=10.0.0.1)\n"
        '  File "/x/app.py", line 180, in _open_search\n'
        "ray.exceptions.RayTaskError(DataDirError): ray::ServeReplica (pid=1)\n"
        "RuntimeError: replica failed\n"
        "shopping_companion.errors.DataDirError: data directory '/nope' does not exist\n"
    )
    assert replica_cause(text) == "DataDirError: data directory '/nope' does not exist"
    plain = "Deploying application shopcomp failed:   nothing\nparsable here"
    assert replica_cause(plain) == "Deploying application shopcomp failed: nothing parsable here"
    assert len(replica_cause("x" * 5000)) == 600


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.1", True),
        ("127.9.8.7", True),
        ("2130706433", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("10.1", False),
        ("192.168.0.2", False),
        ("example.com", False),
        ("127.0.0.1.5", False),
        ("::", False),
    ],
)
def test_loopback_hosts_in_every_form_the_resolver_reads(host, loopback, monkeypatch, tmp_path):
    assert is_loopback(host) is loopback
    monkeypatch.delenv("SHOPCOMP_SERVE_TOKEN", raising=False)
    if loopback:  # no token asked for
        assert load_serve_config({"benchmarks": {"b": str(tmp_path)}}, [], host=host).host == host
    else:
        with pytest.raises(ConfigError, match="SHOPCOMP_SERVE_TOKEN"):
            load_serve_config({"benchmarks": {"b": str(tmp_path)}}, [], host=host)


@pytest.mark.parametrize(
    "setting",
    [
        "port=true",
        "memory_cache=false",
        "deployments.memory.num_replicas=true",
        "deployments.products.num_cpus=true",
        "deployments.scoring.max_ongoing_requests=false",
        "batch.max_batch_size=true",
        "batch.batch_wait_timeout_s=true",
    ],
)
def test_yaml_booleans_are_not_numbers(setting, tmp_path):
    field = setting.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{field}.*must be a number, got (True|False)"):
        load_serve_config({"benchmarks": {"b": str(tmp_path)}}, [setting])
    assert load_serve_config({"benchmarks": {"b": str(tmp_path)}}, ["port=8001"]).port == 8001


def test_an_unquoted_ipv6_host_in_a_set_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOPCOMP_SERVE_TOKEN", "a-long-enough-random-token-0123")
    with pytest.raises(ConfigError, match=r"host \(--host\): must be a host name or address string.*quote an IPv6"):
        load_serve_config({"benchmarks": {"b": str(tmp_path)}}, ["host=::"])  # YAML: {':': None}
    assert load_serve_config({"benchmarks": {"b": str(tmp_path)}}, ['host="::"']).host == "::"


def test_a_reward_spec_that_does_not_load_is_refused_naming_reward_config(tmp_path):
    cfg = {"benchmarks": {"b": str(tmp_path)}, "reward_config": str(tmp_path / "missing.yaml")}
    with pytest.raises(ConfigError, match=r"reward_config.*missing\.yaml' does not exist"):
        load_serve_config(cfg)
    assert load_serve_config({**cfg, "reward_config": "outcome_only"}).reward_config == "outcome_only"
