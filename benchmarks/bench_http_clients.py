"""Why the serve client's direct calls use :mod:`http.client` (``shopping_companion.serve.client``,
``_DirectHTTP``): the per-call cost of HTTP client libraries against one uvicorn + FastAPI server
on loopback, with a product_search-sized answer (10 hits) validated by pydantic on arrival.

The server runs in a thread of this process (uvloop, as in a replica's direct endpoint), so both
sides share one interpreter: absolute numbers are higher than between two processes, the ratios
are what matters. Printed: p50 and p99 per client in ms and each p50 over ``http.client``'s.

    .venv-rl/bin/python benchmarks/bench_http_clients.py [--calls 1000]

(No ``from __future__ import annotations`` here: FastAPI must resolve the handlers' local models.)

Measured (2 CPUs, load average ~2, two runs): http.client 0.48-0.51 ms p50, urllib3 0.65-0.72
ms (1.35-1.40x), httpx 0.95-1.05 ms (1.98-2.04x); a ``JSONResponse`` of the dump instead of
pydantic's ``model_dump_json``: no measurable difference at this answer size (0.50-0.51 ms).
"""

import argparse
import asyncio
import http.client
import json
import socket
import statistics
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    args = ap.parse_args()

    import httpx
    import urllib3
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response
    from pydantic import BaseModel

    class Req(BaseModel):
        query: str
        top_k: int = 10

    class Hit(BaseModel):
        product_id: str
        title: str
        price: float | None
        score: float

    class Out(BaseModel):
        results: list[Hit]

    out = Out(
        results=[
            Hit(product_id=f"src:{i}", title=f"A product title of some length, item {i}", price=19.99, score=3.25)
            for i in range(10)
        ]
    )
    app = FastAPI()

    @app.post("/dump")
    async def dump(req: Req) -> JSONResponse:
        return JSONResponse(out.model_dump(mode="json"))

    @app.post("/json")
    async def as_json(req: Req) -> Response:
        return Response(out.model_dump_json(), media_type="application/json")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))

    def run() -> None:
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets=[sock]))

    threading.Thread(target=run, daemon=True).start()
    time.sleep(1.0)
    body = json.dumps({"query": "red running shoes for women", "top_k": 10}).encode()
    headers = {"Content-Type": "application/json"}

    hx = httpx.Client()
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def stdlib(path: str) -> Out:
        conn.request("POST", path, body=body, headers=headers)
        return Out.model_validate_json(conn.getresponse().read())

    clients = {
        "http.client": lambda: stdlib("/json"),
        "http.client (JSONResponse)": lambda: stdlib("/dump"),
        "urllib3": lambda: Out.model_validate_json(pool.request("POST", "/json", body=body, headers=headers).data),
        "httpx": lambda: Out.model_validate_json(
            hx.post(f"http://127.0.0.1:{port}/json", content=body, headers=headers).content
        ),
    }
    p50: dict[str, float] = {}
    print(f"{args.calls} sequential POSTs per client (ms)")
    for name, call in clients.items():
        for _ in range(50):
            call()
        times = []
        for _ in range(args.calls):
            t = time.perf_counter()
            call()
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        p50[name] = statistics.median(times)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"{name:28s} p50 {p50[name]:6.3f}  p99 {p99:6.3f}  x{p50[name] / p50['http.client']:.2f}")
    server.should_exit = True


if __name__ == "__main__":
    main()
