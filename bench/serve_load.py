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
   scales, so they cannot be checked exactly per text);
4. with --poison SECONDS: against a server of the soak's bundle, 32 innocent
   clients send valid requests (1-4 held-out texts each) while 2 poison
   clients cycle through texts no trunk should see: a lone high surrogate
   (`"\\ud800"`, written as a JSON escape by hand, so the body is valid JSON),
   a lone low one (`"\\udfff"`), a text of one NUL, one good text beside a lone
   surrogate, and a 99,000-character text of other scripts, emoji (valid
   surrogate pairs) and combining marks that no head has a word for. A table
   of answers by status code per kind; lone surrogates must get 422, never
   5xx, and every innocent request 200 with its rows (the verdict line); a
   micro-batcher retry counter from /metrics is shown when it is exposed
   (httpx client, as the soak). --poison-bundle PATH runs the same again
   against another bundle (an exported ONNX one, say);
5. with --big: two servers of the soak's bundle side by side, (a) default
   settings and (b) `--max-pass-chars 1000000000 --max-batch 160`, so one
   pass takes a whole 160-text request as before passes were split (a pass
   also stops at --max-batch texts); both with `--max-body-mb 32 --max-chars
   99000`. For each in turn, while the other sits idle, 8 clients loop on
   small requests (one short held-out text each) for 5 s (the baseline),
   then again while ONE big request of 160 texts x 99,000 characters (real
   words repeated, ~16 MB) is answered: the big request's time, how many
   small requests ran meanwhile, their p50/p99, the baseline p50/p99, the
   largest pass (from the /metrics histogram), and the ratio of the small
   p99 during the big request, (b) over (a) (aiohttp client, as the levels).

6. with --long: on the `minilm` bundle (torch; --long-bundle picks another, an
   exported one say), two servers side by side, (a) default settings (a pass holds
   at most --max-pass-tokens 512 tokens, a longer text is read over several passes,
   a few windows each, other requests answered between them) and (b)
   `--max-pass-tokens 1000000000` (a text in one pass, as before passes were capped in
   tokens). For each in turn, while the other sits idle, and for each of two texts of
   100,000 characters (English words; other scripts, ~1 token a character):
   --long-clients (3) clients loop on one held-out text each (those of at most 1,000
   characters) for --long-baseline seconds (20; alone), then again while the long
   text is answered: their p50/p99 alone and during, the ratio of the p99s, the long
   text's time, its steps and the largest pass's work in tokens (from /metrics);
   then what the token cap costs short texts: --long-throughput (300) requests at
   concurrency 32 against each server in turn, 3 rounds: texts/s, p50/p99, texts
   per pass; aiohttp client, as the levels.

With --poison, --big or --long alone, the throughput levels (1-2) run only when
--concurrency is given.

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


def served_5xx(metrics_text: str) -> float:
    """5xx answers the server counted (``manyheads_requests_total``)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("manyheads_requests_total") and 'status="5' in line
    )


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
    return {
        "requests": n_requests,
        "concurrency": concurrency,
        "seconds": seconds,
        "requests_per_s": n_requests / seconds,
        **counts,
        "malformed_by_kind": by_kind,
        "server_5xx": served_5xx(metrics_text),
        "problems": len(problems),
        "first_problems": problems[:10],
        "alive_at_end": alive,
    }


def retry_lines(metrics_text: str) -> list[str]:
    """The /metrics samples whose name mentions a retry (none when not exposed)."""
    return [
        line
        for line in metrics_text.splitlines()
        if not line.startswith("#") and "retr" in line.split(" ", 1)[0].lower()
    ]


def error_log(server: ServerProcess) -> list[str]:
    """The last lines of the server's log from its first traceback (empty when none)."""
    lines = Path(server.log.name).read_text(errors="replace").splitlines()
    first = next((i for i, line in enumerate(lines) if "Traceback" in line), None)
    return [] if first is None else lines[first : first + 40]


def other_scripts_text(n_chars: int) -> str:
    """``n_chars`` code points of other scripts, emoji and combining marks (no head's words)."""
    pieces = "漢字かなカナ한글 Ελληνικά кириллица עברית العربية 😀🚀🧪 e\u0301a\u0308 "
    return (pieces * (n_chars // len(pieces) + 1))[:n_chars]


# (kind, what it is, expected status); the bodies are written by hand so they hold
# JSON escapes of lone surrogates (valid JSON, not valid Unicode text)
POISON_KINDS = [
    ("lone_high", '["\\ud800"]', 422),
    ("lone_low", '["\\udfff"]', 422),
    ("nul_only", '["\\u0000"]', 200),
    ("good_and_lone", '[good, "\\ud800"]', 422),
    ("other_scripts", "[99,000 chars]", 200),
]
LONE_SURROGATE_KINDS = {"lone_high", "lone_low", "good_and_lone"}


def poison_bodies(good: str) -> dict[str, bytes]:
    huge = json.dumps({"texts": [other_scripts_text(99_000)]})  # emoji as escaped pairs
    return {
        "lone_high": b'{"texts": ["\\ud800"]}',
        "lone_low": b'{"texts": ["\\udfff"]}',
        "nul_only": b'{"texts": ["\\u0000"]}',
        "good_and_lone": b'{"texts": [' + json.dumps(good).encode() + b', "\\ud800"]}',
        "other_scripts": huge.encode(),
    }


async def poison(
    url: str, texts: list[str], seconds: float, n_innocent: int = 32, n_poison: int = 2
) -> dict[str, Any]:
    import httpx

    bodies = poison_bodies(texts[0])
    kinds = [k for k, _, _ in POISON_KINDS]
    innocent = {"requests": 0, "ok": 0, "not_ok": 0}
    by_kind: dict[str, dict[int, int]] = {k: {} for k in kinds}
    problems: list[str] = []
    headers = {"Content-Type": "application/json"}
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=n_innocent + n_poison + 2)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def innocent_worker(w: int) -> None:
            rng = random.Random(w)
            while time.perf_counter() < deadline:
                chunk = rng.sample(texts, rng.randint(1, 4))
                innocent["requests"] += 1
                try:
                    res = await client.post(url + "/v1/predict", json={"texts": chunk})
                    ok = res.status_code == 200 and len(res.json()["results"]) == len(chunk)
                    answer = f"{res.status_code} {res.text[:300]}"
                except httpx.HTTPError as exc:
                    ok, answer = False, f"dropped ({exc!r})"
                innocent["ok" if ok else "not_ok"] += 1
                if not ok:
                    problems.append(f"innocent {json.dumps({'texts': chunk})[:300]} -> {answer}")

        async def poison_worker(w: int) -> None:
            i = w
            while time.perf_counter() < deadline:
                kind = kinds[i % len(kinds)]
                i += 1
                try:
                    res = await client.post(
                        url + "/v1/predict", content=bodies[kind], headers=headers
                    )
                    status, answer = res.status_code, res.text[:300]
                except httpx.HTTPError as exc:
                    status, answer = 0, f"dropped ({exc!r})"
                by_kind[kind][status] = by_kind[kind].get(status, 0) + 1
                if status == 0 or status >= 500:
                    problems.append(f"poison {bodies[kind][:80]!r} -> {status} {answer}")

        t0 = time.perf_counter()
        await asyncio.gather(
            *(innocent_worker(w) for w in range(n_innocent)),
            *(poison_worker(w) for w in range(n_poison)),
        )
        elapsed = time.perf_counter() - t0
        metrics_text = (await client.get(url + "/metrics")).text
        alive = (await client.get(url + "/healthz")).status_code == 200
    return {
        "seconds": elapsed,
        "innocent": innocent,
        "poison": {k: {str(c): n for c, n in sorted(v.items())} for k, v in by_kind.items()},
        "server_5xx": served_5xx(metrics_text),
        "retry_metrics": retry_lines(metrics_text),
        "problems": len(problems),
        "first_problems": problems[:10],
        "alive_at_end": alive,
    }


def run_poison(bundle: Path, texts: list[str], seconds: float) -> dict[str, Any]:
    """A server of ``bundle``, the poison run against it, its traceback if it logged one."""
    server = ServerProcess(bundle)
    try:
        p = asyncio.run(poison(server.url, texts, seconds))
        p["alive_at_end"] = p["alive_at_end"] and server.alive()
        p["server_traceback"] = error_log(server)
    finally:
        server.stop()
    p["bundle"] = bundle.name
    return p


def print_poison(p: dict[str, Any]) -> None:
    inn = p["innocent"]
    print(
        f"\npoison: {p['seconds']:.1f} s, 32 innocent clients + 2 poison clients, "
        f"bundle {p['bundle']}"
    )
    print(f"{'client':<8s} {'kind':<14s} {'body texts':<17s} {'expect':>6s} {'answers by status'}")
    print(
        f"{'innocent':<8s} {'valid':<14s} {'[1-4 held-out]':<17s} {200:>6d} "
        f"200: {inn['ok']}, other: {inn['not_ok']} (of {inn['requests']})"
    )
    for kind, what, expect in POISON_KINDS:
        codes = ", ".join(f"{c}: {n}" for c, n in p["poison"][kind].items())
        print(f"{'poison':<8s} {kind:<14s} {what:<17s} {expect:>6d} {codes}")
    for line in p["retry_metrics"] or ["(no retry counter in /metrics)"]:
        print(f"/metrics: {line}")
    print(
        f"server-counted 5xx: {p['server_5xx']:.0f}; server alive at the end: {p['alive_at_end']}"
    )
    for problem in p["first_problems"]:
        print("  problem:", problem)
    for line in p["server_traceback"]:
        print("  server log:", line)
    lone = all(set(p["poison"][k]) == {"422"} for k in LONE_SURROGATE_KINDS if p["poison"][k])
    print(
        f"poison: {inn['requests']} innocent requests, all 200: "
        f"{'yes' if inn['not_ok'] == 0 and inn['requests'] else 'no'}; "
        f"lone surrogates all 422: {'yes' if lone else 'no'}; "
        f"5xx answers: {p['server_5xx']:.0f}"
    )


BIG_TEXTS, BIG_CHARS = 160, 99_000
BIG_SERVERS = [
    ("a: default", ()),
    ("b: one pass", ("--max-pass-chars", "1000000000", "--max-batch", str(BIG_TEXTS))),
]


def big_texts(texts: list[str], n: int = BIG_TEXTS, chars: int = BIG_CHARS) -> list[str]:
    """``n`` texts of ``chars`` characters each: the held-out texts' words, shuffled."""
    words = " ".join(texts).split()
    out = []
    for i in range(n):
        rng = random.Random(i)
        picked: list[str] = []
        size = 0
        while size < chars:
            picked.append(rng.choice(words))
            size += len(picked[-1]) + 1
        out.append(" ".join(picked)[:chars])
    return out


def largest_pass(before: str, after: str, histogram: str = "manyheads_batch_texts") -> str:
    """The smallest bucket of ``histogram`` (texts per pass by default) holding every pass
    between two scrapes."""

    def buckets(text: str) -> dict[str, float]:
        prefix = histogram + '_bucket{le="'
        return {
            line[len(prefix) :].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix)
        }

    b, a = buckets(before), buckets(after)
    total = a.get("+Inf", 0.0) - b.get("+Inf", 0.0)
    for le in a:  # in increasing order, as Prometheus writes them
        if a[le] - b.get(le, 0.0) >= total:
            return "≤" + le.removesuffix(".0")
    return "?"


async def small_loop(
    client: Any,
    url: str,
    texts: list[str],
    stop: asyncio.Event,
    out: list[tuple[float, float, int]],
) -> None:
    """Small requests (one text each) until ``stop``: (start, seconds, status) of each."""
    i = random.randrange(len(texts))
    while not stop.is_set():
        t = time.perf_counter()
        async with client.post(url + "/v1/predict", json={"texts": [texts[i % len(texts)]]}) as res:
            await res.read()
        out.append((t, time.perf_counter() - t, res.status))
        i += 1


async def big_window(
    url: str, small: list[str], body: bytes, baseline_s: float = 5.0, concurrency: int = 8
) -> dict[str, Any]:
    """Small-request latency for ``baseline_s``, then while one big request (``body``) runs."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=concurrency + 2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def run_small(window: Any) -> list[tuple[float, float, int]]:
            samples: list[tuple[float, float, int]] = []
            stop = asyncio.Event()
            workers = [small_loop(client, url, small, stop, samples) for _ in range(concurrency)]
            tasks = [asyncio.ensure_future(w) for w in workers]
            await window()
            stop.set()
            await asyncio.gather(*tasks)
            return samples

        async def metrics() -> str:
            async with client.get(url + "/metrics") as res:
                return await res.text()

        big: dict[str, Any] = {}

        async def send_big() -> None:
            headers = {"Content-Type": "application/json"}
            big["start"] = time.perf_counter()
            async with client.post(url + "/v1/predict", data=body, headers=headers) as res:
                answer = await res.read()
            big["seconds"] = time.perf_counter() - big["start"]
            big["status"] = res.status
            big["rows"] = len(json.loads(answer).get("results", [])) if res.status == 200 else 0

        await run_small(lambda: asyncio.sleep(1.0))  # warm-up
        baseline = await run_small(lambda: asyncio.sleep(baseline_s))
        before = await metrics()
        samples = await run_small(send_big)
        after = await metrics()
    end = big["start"] + big["seconds"]
    during = [s for t, s, code in samples if big["start"] <= t < end and code == 200]
    base = [s for _, s, code in baseline if code == 200]
    return {
        "big_seconds": big["seconds"],
        "big_status": big["status"],
        "big_rows": big["rows"],
        "small_during": len(during),
        "small_failed": sum(code != 200 for _, _, code in baseline + samples),
        "p50_during_ms": percentile(during, 50) * 1000 if during else float("nan"),
        "p99_during_ms": percentile(during, 99) * 1000 if during else float("nan"),
        "baseline_requests": len(base),
        "p50_baseline_ms": percentile(base, 50) * 1000,
        "p99_baseline_ms": percentile(base, 99) * 1000,
        "largest_pass": largest_pass(before, after),
        "largest_pass_work": largest_pass(before, after, "manyheads_batch_work"),
        "steps": metric(after, "manyheads_text_steps_total")
        - metric(before, "manyheads_text_steps_total"),
    }


def run_big(bundle: Path, texts: list[str]) -> dict[str, Any]:
    """Both servers of BIG_SERVERS started side by side, measured one after the other."""
    small = sorted(texts, key=len)[:100]
    body = json.dumps({"texts": big_texts(texts)}).encode()
    common = ("--max-body-mb", "32", "--max-chars", str(BIG_CHARS))
    servers = []
    try:
        for _, options in BIG_SERVERS:
            servers.append(ServerProcess(bundle, *common, *options))
        runs = {}
        for (name, options), server in zip(BIG_SERVERS, servers, strict=True):
            runs[name] = asyncio.run(big_window(server.url, small, body))
            runs[name]["options"] = " ".join(options) or "(defaults)"
            print(f"  big request against {name}: done", flush=True)
    finally:
        for server in servers:
            server.stop()
    a, b = (runs[name]["p99_during_ms"] for name, _ in BIG_SERVERS)
    return {"bundle": bundle.name, "body_mb": len(body) / 1e6, "servers": runs, "p99_ratio": b / a}


def print_big(big: dict[str, Any]) -> None:
    print(
        f"\nbig: one request of {BIG_TEXTS} texts x {BIG_CHARS:,} chars "
        f"({big['body_mb']:.1f} MB) among 8 clients of 1 short text each, bundle {big['bundle']}"
    )
    print(
        f"{'server':<12s} {'big s':>7s} {'status':>6s} {'small n':>7s} {'p50 ms':>8s} "
        f"{'p99 ms':>9s} {'base p50':>8s} {'base p99':>8s} {'largest pass':>12s} "
        f"{'small fail':>10s}  options"
    )
    for name, r in big["servers"].items():
        print(
            f"{name:<12s} {r['big_seconds']:7.1f} {r['big_status']:6d} {r['small_during']:7d} "
            f"{r['p50_during_ms']:8.1f} {r['p99_during_ms']:9.1f} {r['p50_baseline_ms']:8.1f} "
            f"{r['p99_baseline_ms']:8.1f} {r['largest_pass']:>12s} {r['small_failed']:10d}  "
            f"{r['options']}"
        )
    a, b = (name for name, _ in BIG_SERVERS)
    print(f"big: small-request p99 while the big one runs, {b} / {a}: {big['p99_ratio']:.1f}x")


LONG_CHARS = 100_000
LONG_SERVERS = [
    ("a: default", ()),
    ("b: one pass", ("--max-pass-tokens", "1000000000")),
]


def long_texts(texts: list[str]) -> dict[str, str]:
    """One text of LONG_CHARS characters of each kind: English (the held-out texts' words,
    shuffled; ~4.3 characters a token) and other scripts (~1 character a token)."""
    return {
        "english": big_texts(texts, n=1, chars=LONG_CHARS)[0],
        "other scripts": other_scripts_text(LONG_CHARS),
    }


def run_long(
    bundle: Path, texts: list[str], clients: int, baseline_s: float, throughput: int
) -> dict[str, Any]:
    """Both servers of LONG_SERVERS started side by side and measured one after the other:
    for each long text, ``clients`` clients alone for ``baseline_s``, then while the
    long text is answered; then what the token cap costs short texts: ``throughput``
    requests at concurrency 32 against each server in turn, 3 rounds."""
    small = [t for t in texts if len(t) <= 1000]
    servers = []
    try:
        for _, options in LONG_SERVERS:
            servers.append(ServerProcess(bundle, *options))
        runs: dict[str, dict[str, Any]] = {}
        for (name, options), server in zip(LONG_SERVERS, servers, strict=True):
            runs[name] = {"options": " ".join(options) or "(defaults)", "texts": {}}
            for kind, text in long_texts(texts).items():
                body = json.dumps({"texts": [text]}).encode()
                r = asyncio.run(big_window(server.url, small, body, baseline_s, clients))
                r["ratio_p99"] = r["p99_during_ms"] / r["p99_baseline_ms"]
                r["ratio_p50"] = r["p50_during_ms"] / r["p50_baseline_ms"]
                runs[name]["texts"][kind] = r
                print(f"  long {kind} text against {name}: done", flush=True)
        for _ in range(3 if throughput else 0):
            for (name, _), server in zip(LONG_SERVERS, servers, strict=True):
                level = asyncio.run(load_level(server.url, small, 32, throughput, 1))
                runs[name].setdefault("throughput", []).append(level)
        print("  throughput at concurrency 32: done", flush=True)
    finally:
        for server in servers:
            server.stop()
    return {
        "bundle": bundle.name,
        "clients": clients,
        "baseline_s": baseline_s,
        "small_texts": len(small),
        "servers": runs,
    }


def print_long(long: dict[str, Any]) -> None:
    print(
        f"\nlong: one text of {LONG_CHARS:,} characters among {long['clients']} clients of one "
        f"held-out text each (<= 1,000 chars), bundle {long['bundle']}; baseline "
        f"{long['baseline_s']:g} s alone just before each"
    )
    print(
        f"{'server':<12s} {'long text':<14s} {'long s':>7s} {'status':>6s} {'steps':>6s} "
        f"{'pass work':>10s} {'alone p50':>9s} {'alone p99':>9s} {'n':>5s} {'during p50':>10s} "
        f"{'during p99':>10s} {'n':>5s} {'p99 ratio':>9s} {'failed':>6s}"
    )
    for name, server in long["servers"].items():
        for kind, r in server["texts"].items():
            print(
                f"{name:<12s} {kind:<14s} {r['big_seconds']:7.1f} {r['big_status']:6d} "
                f"{r['steps']:6.0f} {r['largest_pass_work']:>10s} {r['p50_baseline_ms']:9.1f} "
                f"{r['p99_baseline_ms']:9.1f} {r['baseline_requests']:5d} "
                f"{r['p50_during_ms']:10.1f} {r['p99_during_ms']:10.1f} {r['small_during']:5d} "
                f"{r['ratio_p99']:8.2f}x {r['small_failed']:6d}"
            )
    levels = {n: v["throughput"] for n, v in long["servers"].items() if "throughput" in v}
    if levels:
        print("\nshort texts only, concurrency 32, 3 rounds alternating (median):")
        medians = {}
        for name, rounds in levels.items():
            rates = sorted(r["texts_per_s"] for r in rounds)
            mid = next(r for r in rounds if r["texts_per_s"] == rates[1])
            medians[name] = rates[1]
            print(
                f"{name:<12s} {rates[1]:7.1f} texts/s (rounds "
                f"{', '.join(f'{r:.1f}' for r in rates)}), p50 {mid['p50_ms']:.1f} ms, "
                f"p99 {mid['p99_ms']:.1f} ms, {mid['mean_texts_per_pass']:.1f} texts a pass, "
                f"{sum(r['failures'] for r in rounds)} failed"
            )
        a, b = medians.values()
        print(f"throughput with the token cap / without: {a / b:.2f}x")
    first = next(iter(long["servers"]))
    for kind, r in long["servers"][first]["texts"].items():
        verdict = "met" if r["ratio_p99"] <= 3 else "MISSED"
        print(
            f"long ({first}, {kind}): other clients' p99 {r['p99_during_ms']:.1f} ms during "
            f"vs {r['p99_baseline_ms']:.1f} ms alone = {r['ratio_p99']:.2f}x (bar <= 3x: "
            f"{verdict})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=5000, help="English Debian rows (grouped split)")
    ap.add_argument("--texts", type=int, default=1000, help="held-out texts to send")
    ap.add_argument("--bundle", help="bundle to serve (default: minilm, 5 heads, int8 ONNX)")
    ap.add_argument(
        "--concurrency",
        help="levels, comma-separated (default: 1,8,32,128; none with --poison or --big alone)",
    )
    ap.add_argument("--requests", type=int, default=1000, help="requests per concurrency level")
    ap.add_argument("--per-request", type=int, default=1, help="texts per request")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--max-pass-tokens", type=int, help="the levels' server's (default: its own)")
    ap.add_argument("--soak", type=int, default=0, help="soak requests (0: no soak)")
    ap.add_argument(
        "--soak-bundle", help="bundle for the soak (default: the 5 heads on the hashing trunk)"
    )
    ap.add_argument("--hot-every", type=float, default=2.0, help="seconds between head changes")
    ap.add_argument(
        "--poison", type=float, default=0, help="seconds of the poison run (0: no poison run)"
    )
    ap.add_argument("--poison-bundle", help="also run the poison run against this bundle")
    ap.add_argument("--big", action="store_true", help="small-request latency beside a big one")
    ap.add_argument(
        "--long",
        action="store_true",
        help="clients' latency alone and beside one 100,000-character text (MiniLM bundle)",
    )
    ap.add_argument("--long-bundle", help="bundle for --long (default: the minilm bundle)")
    ap.add_argument("--long-clients", type=int, default=3, help="--long: clients")
    ap.add_argument(
        "--long-baseline", type=float, default=20.0, help="--long: seconds alone before each"
    )
    ap.add_argument(
        "--long-throughput",
        type=int,
        default=300,
        help="--long: requests a round at concurrency 32, short texts only (0: none)",
    )
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
    chars = sorted(len(t) for t in texts)
    print(f"data: {source}, {len(texts)} held-out texts, median {chars[len(chars) // 2]} chars")
    results: dict[str, Any] = {"machine": machine(), "n_texts": len(texts)}

    def side_bundle() -> Path:
        """The soak's bundle (also the poison run's and the big run's)."""
        if args.soak_bundle:
            return Path(args.soak_bundle)
        return speed_bundle("hashing", train, HEADS, cache)

    import numpy as np

    others = args.poison or args.big or args.long
    concurrency = args.concurrency if args.concurrency is not None or others else "1,8,32,128"
    levels = [int(c) for c in (concurrency or "").split(",") if c]
    if levels:
        source_folder = speed_bundle("minilm", train, HEADS, cache)
        bundle = Path(args.bundle) if args.bundle else exported_bundle(source_folder, "int8")
        print(f"bundle: {bundle.name} ({', '.join(Bundle.load(bundle, cache=None).heads)})")
        results["bundle"] = bundle.name
        local = Bundle.load(bundle, cache=None)
        local.predict(texts[:64])
        tokens = (
            () if args.max_pass_tokens is None else ("--max-pass-tokens", str(args.max_pass_tokens))
        )
        server = ServerProcess(
            bundle,
            "--max-batch",
            str(args.max_batch),
            "--max-wait-ms",
            str(args.max_wait_ms),
            *tokens,
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
        soak_bundle = side_bundle()
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

    if args.poison:
        bundles = [side_bundle(), *([Path(args.poison_bundle)] if args.poison_bundle else [])]
        results["poison"] = []
        for folder in bundles:
            results["poison"].append(run_poison(folder, texts, args.poison))
            print_poison(results["poison"][-1])

    if args.big:
        results["big"] = run_big(side_bundle(), texts)
        print_big(results["big"])

    if args.long:
        folder = (
            Path(args.long_bundle)
            if args.long_bundle
            else speed_bundle("minilm", train, HEADS, cache)
        )
        results["long"] = run_long(
            folder, texts, args.long_clients, args.long_baseline, args.long_throughput
        )
        print_long(results["long"])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
