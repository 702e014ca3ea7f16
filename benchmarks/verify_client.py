"""How much latency does verify's load client add per request? Measured against the test engine with zero
token and prefill delay, on loopback.

Three figures, printed as measured (target: p50 at most 2 ms per request):
1. one stream at a time: end-to-end p50/p99 of the rigctl client (httpx, SSE parsing, timing) next to a
   bare stdlib client (http.client, lines read and dropped) doing the same request. The gap is what the
   client adds over the least a client can do; the bare figure is mostly the engine and loopback.
2. the client's own CPU time per request (the engine runs in another process, so none of it is the
   engine's): a direct measure of the work the client does per request.
3. 256 concurrent streams: completed, failed, request and output throughput, e2e p50/p99.

usage: uv run python benchmarks/verify_client.py [--requests 300] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rigctl.verify.client import Endpoint, HttpEngine, Request, percentile
from rigctl.verify.soak import bench_figures, drive

FAKE = Path(__file__).resolve().parent.parent / "tests" / "engine" / "fake_vllm.py"
PROMPT = "Question: name a colour of the rainbow.\nAnswer:"
MAX_TOKENS = 32


def start_engine(log: Path) -> tuple[subprocess.Popen[bytes], int]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE), "--host", "127.0.0.1", "--port", "0", "--token-delay", "0",
             "--prefill-delay", "0", "--no-access-log"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    for _ in range(300):
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())
        if match:
            return proc, int(match.group(1))
        time.sleep(0.02)
    proc.kill()
    raise SystemExit(f"engine did not start: {log.read_text()}")


def bare_client(port: int, n: int) -> list[float]:
    body = json.dumps({"model": "fake-model", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        for line in resp:
            if line.startswith(b"data: [DONE]"):
                break
        resp.read()
        times.append(time.perf_counter() - start)
    conn.close()
    return times


async def rigctl_client(port: int, n: int) -> tuple[list[float], float]:
    async with HttpEngine(Endpoint(f"http://127.0.0.1:{port}", "fake-model")) as engine:
        request = Request(MAX_TOKENS, prompt=PROMPT, stream=True)
        await engine.complete(request, timeout=30)  # warm the connection pool
        cpu0 = time.process_time()
        times = []
        for _ in range(n):
            done = await engine.complete(request, timeout=30, idle_timeout=30)
            times.append(done.latency_s)
        return times, (time.process_time() - cpu0) / n


async def concurrent(port: int, n: int, concurrency: int) -> tuple[dict[str, object], float]:
    async with HttpEngine(Endpoint(f"http://127.0.0.1:{port}", "fake-model"),
                          max_connections=concurrency + 8) as engine:
        cpu0 = time.process_time()
        outcomes, duration = await drive(engine, [PROMPT] * n, concurrency=concurrency, max_tokens=MAX_TOKENS,
                                         timeout_s=300, idle_timeout_s=60)
        cpu = (time.process_time() - cpu0) / n
    return bench_figures(outcomes, duration), cpu


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_engine(Path(tmp) / "engine.log")
        try:
            bare_client(port, 20)  # warm-up: imports, first connection
            bare = bare_client(port, args.requests)
            ours, cpu_seq = asyncio.run(rigctl_client(port, args.requests))
            figures, cpu_conc = asyncio.run(concurrent(port, max(args.requests, args.concurrency * 2),
                                                       args.concurrency))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    gap = percentile(ours, 50) - percentile(bare, 50)
    print(f"zero-delay test engine on loopback, {MAX_TOKENS}-token streamed completions")
    print(f"1. sequential, {args.requests} requests, e2e latency in ms:")
    print(f"   bare stdlib client   p50 {ms(bare, 50)}  p99 {ms(bare, 99)}")
    print(f"   rigctl client        p50 {ms(ours, 50)}  p99 {ms(ours, 99)}")
    print(f"   added by the client  p50 {gap * 1000:.2f} ms per request (target <= 2 ms: "
          f"{'met' if gap <= 0.002 else 'NOT met'})")
    print(f"2. client CPU time per request: {cpu_seq * 1000:.2f} ms sequential, {cpu_conc * 1000:.2f} ms at "
          f"concurrency {args.concurrency}")
    print(f"3. concurrency {args.concurrency}: completed {figures['completed']}, failed {figures['failed']}, "
          f"{figures['request_throughput']} req/s, {figures['output_throughput']} output tok/s, "
          f"e2e p50 {figures['median_e2el_ms']} ms, p99 {figures['p99_e2el_ms']} ms, "
          f"TTFT p50 {figures['median_ttft_ms']} ms")


if __name__ == "__main__":
    main()
