"""A ProductSearch (or the JVM) used in a process forked after the JVM started must fail fast with a
clear error naming the fix, never hang. Each scenario runs in a fresh interpreter (its own JVM with a
small heap, so a garbage collection, which needs JVM threads a forked child does not have, comes
within a few searches) and forks from there; the parent waits with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_SCRIPT = textwrap.dedent(
    r"""
    import json, multiprocessing as mp, os, sys
    from shopping_companion.catalog.index import build_index
    from shopping_companion.catalog.search import ProductSearch
    from shopping_companion.types import Product

    mode, d = sys.argv[1], sys.argv[2]
    if mode != "fresh":  # building starts the JVM; "fresh" gets an index built by another process
        products = [Product(product_id=f"t:{i}", source="t", shop="S", shop_id="s",
                            title=f"red kettle {i}", price=5.0 + i, currency="USD") for i in range(50)]
        build_index(products, d + "/idx")
    if mode == "build":
        sys.exit(0)
    search = ProductSearch(d + "/idx") if mode != "fresh" else None
    if search is not None:
        assert search.search("kettle")

    def child(q):
        try:
            if mode == "open":  # open a new searcher in the child of a JVM process
                s = ProductSearch(d + "/idx")
            elif mode == "fresh":  # the parent never started a JVM: the child starts its own
                s = ProductSearch(d + "/idx")
            else:
                s = search
            n = 0
            for i in range(3000):  # enough allocation for a GC on a 32 MiB heap
                n += len(s.search(f"kettle red {i}"))
                s.view(["t:1"])
            q.put(["ok", n])
        except BaseException as e:
            q.put(["err", type(e).__name__, str(e)])
        finally:
            if mode == "close":
                search.close()  # closing the inherited searcher in the child must not hang either

    if mode == "fresh":
        # a parent that imported everything but never started the JVM
        import jnius_config
        assert not jnius_config.vm_running
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(30)
    if p.is_alive():
        p.kill()
        print(json.dumps(["hung"]))
    else:
        print(json.dumps(q.get(timeout=5)))
    if search is not None:  # the parent's searcher still works
        assert search.search("kettle")
    """
)


def _run(mode: str, tmp_path: Path) -> list:
    script = tmp_path / "fork_child.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "SHOPCOMP_JVM_HEAP": "32m"}
    out = subprocess.run(
        [sys.executable, str(script), mode, str(tmp_path)], capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]) if mode != "build" else []


@pytest.mark.parametrize("mode", ["inherited", "open", "close"])
def test_search_in_forked_child_fails_fast_naming_spawn(mode: str, tmp_path: Path) -> None:
    result = _run(mode, tmp_path)
    assert result[0] != "hung", f"the forked child hung using the JVM ({mode})"
    assert result[0] == "err", result
    assert result[1] == "JVMForkError", result
    assert "spawn" in result[2] and "fork" in result[2], result


def test_child_forked_before_the_jvm_started_searches_normally(tmp_path: Path) -> None:
    # fork before any JVM: the child may start its own and search (nothing to refuse)
    _run("build", tmp_path)
    result = _run("fresh", tmp_path)
    assert result == ["ok", 3000 * 10], result
