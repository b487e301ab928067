"""HTTP service under load: `manyheads serve` vs in-process `Bundle.predict`, in one run.

On real held-out English Debian package descriptions (the texts of
trunk_speed.py), with the `minilm` bundle of 5 heads exported to int8 ONNX
(built in bench/.cache when missing):

1. starts `manyheads serve` in its own process on loopback and drives it from
   this process (aiohttp client, asyncio) at concurrency 1, 8, 32 and 128, one text per
   request by default, after a warm-up: requests/s, texts/s, p50/p95/p99
   latency, mean texts per trunk pass (from /metrics);
2. in-process baseline: this process loads the same bundle and times one
   `Bundle.predict` call on the texts a level sent (its best case: the trunk
   sorts all of them by length). Each level's server run and the baseline run
   alternate, --rounds times, while the other side sits idle; the ratio is the
   median server texts/s over the median in-process texts/s (this machine's
   speed drifts by up to 20% over minutes, so both are measured side by side).
   A second baseline calls `Bundle.predict` on chunks of as many texts as the
   level has in flight (at most --max-batch): what the server's passes can at
   best achieve, so the two ratios split the service's cost into batching
   (smaller, mixed-length passes) and HTTP;
3. with --soak N: N requests at concurrency 32 against a server with API keys,
   ~10% of them malformed (every kind: bad JSON, bad UTF-8, wrong types, empty
   list, too many texts, text too long, body too large, unknown head, missing
   key), while a head is hot-added, replaced and deleted every
   --hot-every seconds. Every answer is checked: 4xx code for bad requests,
   200 with the right rows for good ones (labels and scores as the bundle gives
   them for those texts), a head set that is the old or the new one, never a
   mix. The soak serves the same 5 heads on the fast `hashing` trunk by
   default, so the HTTP layer, the batcher and head swaps take the most
   requests per second (--soak-bundle picks another; int8 ONNX answers
   depend slightly on the batch a text lands in, through dynamic activation
   scales, so they cannot be checked exactly per text).

Client and server share the machine's CPUs (2 here): the client's own work is
part of what the service costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

HEADS = {
    "section": "multiclass",
    "library": "binary",
    "role": "multilabel",
    "interface": "multilabel",
    "implemented_in": "multilabel",
}
KEY = "bench-key-0123456789abcdef0123"


def inprocess_rate(bundle: Any, texts: list[str]) -> float:
    """Texts/s of one ``Bundle.predict`` call on ``texts`` (the trunk batches by length)."""
    t = time.perf_counter()
    bundle.predict(texts)
    return len(texts) / (time.perf_counter() - t)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, bundle: Path, *options: str) -> None:
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(suffix=".log", delete=False)  # noqa: SIM115
        cmd = [sys.executable, "-m", "manyheads.cli", "serve", "-b", str(bundle)]
        cmd += ["--port", str(self.port), "--no-cache", *options]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"server did not start: {Path(self.log.name).read_text()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        Path(self.log.name).unlink()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q))


async def load_level(
    url: str, texts: list[str], concurrency: int, n_requests: int, per_request: int
) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    failures = 0
    counter = iter(range(n_requests))
    connector = aiohttp.TCPConnector(limit=concurrency + 1)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def one_worker() -> None:
            nonlocal failures
            for i in counter:
                start = (i * per_request) % len(texts)
                chunk = [texts[(start + j) % len(texts)] for j in range(per_request)]
                t = time.perf_counter()
                async with client.post(url + "/v1/predict", json={"texts": chunk}) as res:
                    body = await res.read()
                latencies.append(time.perf_counter() - t)
                if res.status != 200 or len(json.loads(body)["results"]) != per_request:
                    failures += 1

        async def metrics() -> str:
            async with client.get(url + "/metrics") as res:
                return await res.text()

        before = await metrics()
        t0 = time.perf_counter()
        await asyncio.gather(*(one_worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - t0
        after = await metrics()
    passes = metric(after, "manyheads_batch_texts_count") - metric(
        before, "manyheads_batch_texts_count"
    )
    batched = metric(after, "manyheads_batch_texts_sum") - metric(
        before, "manyheads_batch_texts_sum"
    )
    return {
        "concurrency": concurrency,
        "requests": n_requests,
        "texts_per_request": per_request,
        "failures": failures,
        "seconds": seconds,
        "requests_per_s": n_requests / seconds,
        "texts_per_s": n_requests * per_request / seconds,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p95_ms": percentile(latencies, 95) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "mean_texts_per_pass": batched / passes if passes else 0.0,
    }


def malformed_requests(max_chars: int) -> list[tuple[str, bytes, dict[str, str], int, str]]:
    """(kind, body, headers, expected status, expected error code) for each bad kind."""
    auth = {"Authorization": f"Bearer {KEY}"}
    return [
        ("bad_json", b"{not json", auth, 400, "bad_json"),
        ("bad_utf8", b'{"texts": ["\xff\xfe"]}', auth, 400, "bad_encoding"),
        ("not_object", b"[1, 2]", auth, 422, "bad_request"),
        ("texts_not_list", b'{"texts": "one"}', auth, 422, "bad_texts"),
        ("text_not_string", b'{"texts": [1]}', auth, 422, "bad_texts"),
        ("empty_list", b'{"texts": []}', auth, 422, "empty_texts"),
        ("heads_not_list", b'{"texts": ["a"], "heads": "section"}', auth, 422, "bad_heads"),
        ("unknown_head", b'{"texts": ["a"], "heads": ["nope"]}', auth, 404, "unknown_head"),
        ("too_many", json.dumps({"texts": ["a"] * 1001}).encode(), auth, 413, "too_many_texts"),
        (
            "too_long",
            json.dumps({"texts": ["a" * (max_chars + 1)]}).encode(),
            auth,
            413,
            "text_too_long",
        ),
        (
            "body_too_large",
            json.dumps({"texts": ["x" * 1000] * 1100}).encode(),
            auth,
            413,
            "body_too_large",
        ),
        ("no_key", b'{"texts": ["a"]}', {}, 401, "unauthorized"),
    ]


async def soak(
    url: str,
    texts: list[str],
    expected: dict[str, dict[str, Any]],
    hot_payloads: list[dict[str, Any]],
    n_requests: int,
    concurrency: int,
    hot_every: float,
) -> dict[str, Any]:
    import httpx

    bad = malformed_requests(max_chars=100_000)
    auth = {"Authorization": f"Bearer {KEY}"}
    base = set(HEADS)
    hot_versions = [frozenset(p["record"]["labels"]) for p in hot_payloads]
    problems: list[str] = []
    counts = {"good": 0, "malformed": 0, "status_5xx": 0, "dropped": 0, "hot_seen": 0}
    counts["changes"] = 0
    by_kind: dict[str, int] = {}
    counter = iter(range(n_requests))
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def worker() -> None:
            for i in counter:
                rng = random.Random(i)
                if i % 10 == 5:  # ~10% malformed, each kind in turn
                    kind, body, headers, status, code = bad[(i // 10) % len(bad)]
                    counts["malformed"] += 1
                    try:
                        res = await client.post(url + "/v1/predict", content=body, headers=headers)
                    except httpx.HTTPError as exc:
                        counts["dropped"] += 1
                        problems.append(f"{kind}: dropped ({exc!r})")
                        continue
                    by_kind[kind] = by_kind.get(kind, 0) + 1
                    if res.status_code >= 500:
                        counts["status_5xx"] += 1
                    if res.status_code != status or res.json()["error"]["code"] != code:
                        problems.append(f"{kind}: got {res.status_code} {res.text[:120]}")
                    continue
                chunk = rng.sample(texts, rng.randint(1, 4))
                counts["good"] += 1
                try:
                    res = await client.post(
                        url + "/v1/predict", json={"texts": chunk}, headers=auth
                    )
                except httpx.HTTPError as exc:
                    counts["dropped"] += 1
                    problems.append(f"good request dropped ({exc!r})")
                    continue
                if res.status_code != 200:
                    counts["status_5xx"] += res.status_code >= 500
                    problems.append(f"good request: {res.status_code} {res.text[:120]}")
                    continue
                results = res.json()["results"]
                if len(results) != len(chunk):
                    problems.append(f"{len(results)} rows for {len(chunk)} texts")
                    continue
                sets = {frozenset(r) for r in results}
                heads = set(next(iter(sets)))
                if len(sets) != 1 or heads not in (base, base | {"hot"}):
                    problems.append(f"mixed or unknown head sets: {sets}")
                hot = {frozenset(r["hot"]["scores"]) for r in results if "hot" in r}
                if len(hot) > 1 or any(h not in hot_versions for h in hot):
                    problems.append(f"mixed hot head versions: {hot}")
                counts["hot_seen"] += bool(hot)
                for text, got in zip(chunk, results, strict=True):
                    want = expected[text]
                    for name in HEADS:
                        g, w = got[name], want[name]
                        if g.get("label") != w.get("label") or g.get("labels") != w.get("labels"):
                            problems.append(f"mismatched answer for head {name}")
                        elif any(abs(g["scores"][k] - v) > 1e-4 for k, v in w["scores"].items()):
                            problems.append(f"mismatched scores for head {name}")

        async def changer() -> None:
            step = 0
            while not done.is_set():
                await asyncio.sleep(hot_every)
                if done.is_set():
                    break
                if step % 3 == 2:
                    res = await client.delete(url + "/v1/heads/hot", headers=auth)
                else:
                    payload = hot_payloads[step % 3]
                    res = await client.put(url + "/v1/heads/hot", json=payload, headers=auth)
                if res.status_code != 200:
                    problems.append(f"head change {step}: {res.status_code} {res.text[:120]}")
                counts["changes"] += 1
                step += 1

        t0 = time.perf_counter()
        change_task = asyncio.create_task(changer())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        done.set()
        await change_task
        seconds = time.perf_counter() - t0
        metrics_text = (await client.get(url + "/metrics", headers=auth)).text
        alive = (await client.get(url + "/healthz")).status_code == 200
    served_5xx = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("manyheads_requests_total") and 'status="5' in line
    )
    return {
        "requests": n_requests,
        "concurrency": concurrency,
        "seconds": seconds,
        "requests_per_s": n_requests / seconds,
        **counts,
        "malformed_by_kind": by_kind,
        "server_5xx": served_5xx,
        "problems": len(problems),
        "first_problems": problems[:10],
        "alive_at_end": alive,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000, help="English Debian rows (grouped split)")
    ap.add_argument("--texts", type=int, default=1000, help="held-out texts to send")
    ap.add_argument("--bundle", help="bundle to serve (default: minilm, 5 heads, int8 ONNX)")
    ap.add_argument("--concurrency", default="1,8,32,128")
    ap.add_argument("--requests", type=int, default=1000, help="requests per concurrency level")
    ap.add_argument("--per-request", type=int, default=1, help="texts per request")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--soak", type=int, default=0, help="soak requests (0: no soak)")
    ap.add_argument(
        "--soak-bundle", help="bundle for the soak (default: the 5 heads on the hashing trunk)"
    )
    ap.add_argument("--hot-every", type=float, default=2.0, help="seconds between head changes")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs per level")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    from _common import (
        CACHE_DIR,
        exported_bundle,
        machine,
        speed_bundle,
        speed_split,
        write_json,
    )

    from manyheads import Bundle, EmbeddingCache

    print(f"machine: {machine()}")
    train, test, source = speed_split(args.rows, args.texts)
    texts = [r["text"] for r in test]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache = EmbeddingCache(CACHE_DIR / "embeddings.sqlite")
    source_folder = speed_bundle("minilm", train, HEADS, cache)
    bundle = Path(args.bundle) if args.bundle else exported_bundle(source_folder, "int8")
    chars = sorted(len(t) for t in texts)
    print(f"data: {source}, {len(texts)} held-out texts, median {chars[len(chars) // 2]} chars")
    print(f"bundle: {bundle.name} ({', '.join(Bundle.load(bundle, cache=None).heads)})")
    results: dict[str, Any] = {"machine": machine(), "bundle": bundle.name, "n_texts": len(texts)}

    import numpy as np

    levels = [int(c) for c in args.concurrency.split(",") if c]
    if levels:
        local = Bundle.load(bundle, cache=None)
        local.predict(texts[:64])
        server = ServerProcess(
            bundle,
            "--max-batch",
            str(args.max_batch),
            "--max-wait-ms",
            str(args.max_wait_ms),
        )
        out = []
        try:
            asyncio.run(load_level(server.url, texts, 8, 64, args.per_request))  # warm-up
            for c in levels:
                n = max(args.requests, 2 * c)
                sent = [texts[i % len(texts)] for i in range(n * args.per_request)]
                runs, local_rates, chunk_rates = [], [], []
                step = min(c * args.per_request, args.max_batch)
                for _ in range(args.rounds):
                    local_rates.append(inprocess_rate(local, sent))
                    t = time.perf_counter()
                    for i in range(0, len(sent), step):
                        local.predict(sent[i : i + step])
                    chunk_rates.append(len(sent) / (time.perf_counter() - t))
                    runs.append(asyncio.run(load_level(server.url, texts, c, n, args.per_request)))
                r = dict(sorted(runs, key=lambda x: x["texts_per_s"])[len(runs) // 2])
                r["texts_per_s_rounds"] = [x["texts_per_s"] for x in runs]
                r["failures"] = sum(x["failures"] for x in runs)
                r["inprocess_texts_per_s"] = float(np.median(local_rates))
                r["inprocess_rounds"] = local_rates
                r["inprocess_same_batch_texts_per_s"] = float(np.median(chunk_rates))
                r["inprocess_same_batch"] = step
                r["ratio_to_same_batch"] = r["texts_per_s"] / r["inprocess_same_batch_texts_per_s"]
                r["ratio_to_inprocess"] = r["texts_per_s"] / r["inprocess_texts_per_s"]
                out.append(r)
                print(f"  concurrency {c}: done", flush=True)
            results["levels"] = out
        finally:
            server.stop()
        print(
            f"\n{'concurrency':>11s} {'req/s':>8s} {'texts/s':>8s} {'p50 ms':>8s} {'p95 ms':>8s} "
            f"{'p99 ms':>8s} {'texts/pass':>10s} {'in-process':>10s} {'ratio':>6s} "
            f"{'in-proc same batch':>18s} {'ratio':>6s} {'failed':>6s}"
        )
        for r in out:
            print(
                f"{r['concurrency']:11d} {r['requests_per_s']:8.1f} {r['texts_per_s']:8.1f} "
                f"{r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['p99_ms']:8.1f} "
                f"{r['mean_texts_per_pass']:10.1f} {r['inprocess_texts_per_s']:10.1f} "
                f"{r['ratio_to_inprocess']:5.2f}x "
                f"{r['inprocess_same_batch_texts_per_s']:11.1f} ({r['inprocess_same_batch']:3d}) "
                f"{r['ratio_to_same_batch']:5.2f}x {r['failures']:6d}"
            )
        del local

    if args.soak:
        soak_bundle = (
            Path(args.soak_bundle)
            if args.soak_bundle
            else speed_bundle("hashing", train, HEADS, cache)
        )
        work = Path(tempfile.mkdtemp(prefix="manyheads-soak-"))
        import shutil

        live = work / "bundle"
        shutil.copytree(soak_bundle, live)
        keys = work / "keys"
        keys.write_text(KEY + "\n")
        local = Bundle.load(soak_bundle, cache=None)
        probe = texts[:300]
        expected = dict(zip(probe, local.predict(probe), strict=True))
        # the hot head: two versions trained elsewhere on the same trunk, in PUT's form
        from manyheads.serve import head_to_json

        hot_payloads = []
        for labels in (["alpha", "beta"], ["gamma", "delta", "epsilon"]):
            tr = [r["text"] for r in train[:300]]
            local.fit_head("hot", tr, [labels[i % len(labels)] for i in range(len(tr))])
            hot_payloads.append(head_to_json(*local.export_head("hot")))
        hot_payloads.append(hot_payloads[0])
        server = ServerProcess(live, "--api-key-file", str(keys), "--max-body-mb", "1")
        print(
            f"\nsoak: {args.soak} requests, concurrency 32, ~10% malformed, a head changed "
            f"every {args.hot_every:g} s, bundle {soak_bundle.name}"
        )
        try:
            s = asyncio.run(
                soak(server.url, probe, expected, hot_payloads, args.soak, 32, args.hot_every)
            )
            s["alive_at_end"] = s["alive_at_end"] and server.alive()
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
        s["bundle"] = soak_bundle.name
        results["soak"] = s
        print(
            f"{s['requests']} requests in {s['seconds']:.1f} s ({s['requests_per_s']:.1f} req/s): "
            f"{s['good']} good, {s['malformed']} malformed, {s['changes']} head changes, "
            f"hot head seen in {s['hot_seen']} answers"
        )
        print(
            f"5xx answers: {s['status_5xx']} (server count {s['server_5xx']:.0f}); "
            f"dropped: {s['dropped']}; "
            f"dropped / mismatched / wrong-code answers: {s['problems']}; "
            f"server alive at the end: {s['alive_at_end']}"
        )
        for p in s["first_problems"]:
            print("  problem:", p)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
