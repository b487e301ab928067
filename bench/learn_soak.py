"""The learning loop under attack: kill -9 during corrections and updates, and corrections
arriving while the service answers, in one run.

On real English Debian package descriptions (examples/debian-en-train.jsonl.gz), a
`hashing` bundle with a multiclass `section` head that knows four sections:

1. --kills N (default 30) tries, alternating: (a) a writer process that keeps corrections
   five rows at a time (`Bundle.add_feedback`), printing each row's text once the call
   has returned (acknowledged: fsync'd); (b) an updater process (`Bundle.update_heads`,
   fed first with 60 new corrections). Each is killed with SIGKILL after a seeded random
   delay (uniform in [0, 1.2 x its normal run]). After each kill: the bundle loads and
   answers; every acknowledged correction is in the log or in the head's kept training
   data (none lost); the head is the old generation or the new one, whole (its record
   and its kept data agree: loading checks the data's hash).
2. --load SECONDS (default 10): a server (`serve --learn --learn-after 200`) answers 10
   predict clients (one held-out text a request) for SECONDS alone, then again while 10
   clients send corrections (5 rows a request) and the server updates the head in the
   background; p50/p99 of predict in both phases, their ratio, and the count of 5xx.
   Each client sends one request every --interval-ms (default 50 ms: 200 predicts/s and
   1,000 corrections/s in all). The clients run in this process on the same machine:
   unpaced (--interval-ms 0), ten more clients of anything (even GET /healthz) slow
   the predict clients' p99 several times on 2 cores, which measures the machine.

    .venv/bin/python bench/learn_soak.py [--kills 30] [--load 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import EXAMPLES, machine, write_json

OLD = ("libs", "utils", "devel", "doc")
ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import sys, json, time
from manyheads import Bundle
folder, start = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[3])]
bundle = Bundle.load(folder, cache=None)
i = start
while True:
    chunk = rows[i % len(rows) : i % len(rows) + 5] or rows[:5]
    texts = [f"t{i + k} {r['text']}" for k, r in enumerate(chunk)]
    bundle.add_feedback(texts, {"section": [r["section"] for r in chunk]})
    for t in texts:
        print(t.split(" ", 1)[0], flush=True)
    i += 5
    time.sleep(0.02)
"""

UPDATER = """
import sys
from manyheads import Bundle
Bundle.load(sys.argv[1], cache=None).update_heads(["section"], min_feedback=1)
print("updated", flush=True)
"""


def read_rows() -> list[dict[str, Any]]:
    with gzip.open(EXAMPLES, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def make_bundle(folder: Path, rows: list[dict[str, Any]]) -> None:
    from manyheads import Bundle

    old = [r for r in rows if r["section"] in OLD]
    bundle = Bundle("hashing", cache=None)
    bundle.fit_head("section", [r["text"] for r in old], [r["section"] for r in old])
    bundle.save(folder)


def present(folder: Path) -> set[str]:
    """The tags of every correction in the log or folded into the head's kept data."""
    from manyheads import Bundle

    bundle = Bundle.load(folder, cache=None)
    bundle.predict(["a library for parsing"])
    texts = [r.text for r in bundle.feedback_rows()]
    kept = bundle.training_data("section")
    assert kept is not None, "the head's kept data is gone"
    texts += kept[0]
    return {t.split(" ", 1)[0] for t in texts if t.startswith("t") and t[1:2].isdigit()}


def run_child(code: str, *args: str, delay: float) -> tuple[list[str], bool]:
    """Start ``code`` in a fresh interpreter, SIGKILL it after ``delay`` s (or once it
    has finished); its output lines and whether it had finished by itself."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    end = time.perf_counter() + delay
    while time.perf_counter() < end and proc.poll() is None:
        time.sleep(0.05)
    finished = proc.poll() is not None
    if not finished:
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return out.decode().split(), finished


def kills(n: int, seed: int) -> dict[str, Any]:
    from manyheads import Bundle

    rng = random.Random(seed)
    rows = read_rows()
    new = [r for r in rows if r["section"] not in OLD]
    work = Path(tempfile.mkdtemp(prefix="learn-soak-"))
    folder = work / "b"
    make_bundle(folder, rows)
    feed = work / "feed.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in new))
    # the writer keeps writing until killed: killed after up to --writer-s seconds; the
    # updater's normal run (on 60 new corrections) sizes its delays
    writer_s = 4.0
    Bundle.load(folder, cache=None).add_feedback(
        [f"w{k} {r['text']}" for k, r in enumerate(new[:60])],
        {"section": [r["section"] for r in new[:60]]},
    )
    t0 = time.perf_counter()
    out, done = run_child(UPDATER, str(folder), delay=300.0)
    update_s = time.perf_counter() - t0
    assert done and out == ["updated"], out
    acked: set[str] = set()
    start, lost, tries, mid_write = 100_000, 0, [], 0
    for i in range(n):
        if i % 2 == 0:
            delay = rng.uniform(0, 1.2 * writer_s)
            out, done = run_child(WRITER, str(folder), str(start), str(feed), delay=delay)
            start += 10_000
            acked |= set(out)
            what = "feedback"
        else:
            Bundle.load(folder, cache=None).add_feedback(
                [f"u{i}-{k} {r['text']}" for k, r in enumerate(new[:60])],
                {"section": [r["section"] for r in new[:60]]},
            )
            delay = rng.uniform(0, 1.2 * update_s)
            out, done = run_child(UPDATER, str(folder), delay=delay)
            what = "update"
        found = present(folder)
        missing = acked - found
        lost += len(missing)
        temps = [p.name for p in folder.rglob(".*.tmp")]
        mid_write += bool(temps)
        tries.append(
            {"what": what, "delay": round(delay, 2), "finished": done, "lost": len(missing)}
        )
    return {
        "kills": sum(not t["finished"] for t in tries),
        "tries": len(tries),
        "feedback_kills": sum(t["what"] == "feedback" and not t["finished"] for t in tries),
        "update_kills": sum(t["what"] == "update" and not t["finished"] for t in tries),
        "acknowledged": len(acked),
        "lost": lost,
        "temps_left_by_a_kill": mid_write,
        "writer_s": round(writer_s, 2),
        "update_s": round(update_s, 2),
    }


async def _paced(t0: float, k: int, interval: float) -> None:
    """Wait for a client's ``k``-th slot: one request every ``interval`` seconds."""
    await asyncio.sleep(max(0.0, t0 + k * interval - time.perf_counter()))


async def _clients(
    url: str, texts: list[str], seconds: float, feedback: list | None, interval: float
) -> dict:
    import httpx

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    headers = {"Authorization": "Bearer soak-key-0123456789abcdef"}
    stop = time.perf_counter() + seconds

    t0 = time.perf_counter()

    async def predictor(w: int, client: Any) -> None:
        k, n = w, 0
        while time.perf_counter() < stop:
            await _paced(t0 + w * interval / 10, n, interval)
            n += 1
            t = time.perf_counter()
            r = await client.post(url + "/v1/predict", json={"texts": [texts[k % len(texts)]]})
            latencies.append(time.perf_counter() - t)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            k += 10

    async def corrector(w: int, client: Any) -> None:
        assert feedback is not None
        k, n = w * 5, 0
        while time.perf_counter() < stop:
            await _paced(t0 + w * interval / 10, n, interval)
            n += 1
            body = feedback[k % len(feedback) : k % len(feedback) + 5] or feedback[:5]
            r = await client.post(url + "/v1/feedback", json=body)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            k += 50

    limits = httpx.Limits(max_connections=40)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as c:
        jobs = [predictor(w, c) for w in range(10)]
        if feedback is not None:
            jobs += [corrector(w, c) for w in range(10)]
        await asyncio.gather(*jobs)
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {
        "predicts": len(latencies),
        "p50_ms": round(q(0.5), 2),
        "p99_ms": round(q(0.99), 2),
        "status": statuses,
    }


def load(seconds: float, learn_after: int, interval: float) -> dict[str, Any]:
    import httpx

    rows = read_rows()
    work = Path(tempfile.mkdtemp(prefix="learn-load-"))
    folder = work / "b"
    make_bundle(folder, rows)
    (work / "keys").write_text("soak-key-0123456789abcdef\n")
    with socket_port() as port:
        pass
    cmd = [sys.executable, "-m", "manyheads.cli", "serve", "-b", str(folder), "--port"]
    cmd += [str(port), "--no-cache"]
    if learn_after:
        cmd += ["--learn", "--learn-after", str(learn_after), "--learn-check", "1"]
    cmd += ["--api-key-file", str(work / "keys")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = open(work / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        texts = [r["text"] for r in rows[-400:]]
        new = [r for r in rows if r["section"] not in OLD]
        feedback = [{"text": r["text"], "labels": {"section": r["section"]}} for r in new]
        alone = asyncio.run(_clients(url, texts, seconds, None, interval))
        mixed = asyncio.run(_clients(url, texts, seconds, feedback, interval))
        heads = httpx.get(
            url + "/v1/heads", headers={"Authorization": "Bearer soak-key-0123456789abcdef"}
        )
        head = heads.json()["heads"][0]
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    fives = sum(n for s, n in {**alone["status"], **mixed["status"]}.items() if int(s) >= 500)
    return {
        "alone": alone,
        "with_feedback": mixed,
        "p99_ratio": round(mixed["p99_ms"] / alone["p99_ms"], 2),
        "5xx": fives,
        "generation_after": head["generation"],
        "last_update": head["last_update"],
    }


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return int(self.s.getsockname()[1])

    def __exit__(self, *exc: Any) -> None:
        self.s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--load", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--interval-ms",
        type=float,
        default=50.0,
        help="each client sends one request every this many ms (0: as fast as it can)",
    )
    ap.add_argument(
        "--learn-after", type=int, default=200, help="serve --learn-after (0: no --learn)"
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    results: dict[str, Any] = {"machine": machine()}
    if args.kills:
        k = kills(args.kills, args.seed)
        results["kills"] = k
        print(
            f"kill -9: {k['kills']} kills in {k['tries']} tries ({k['feedback_kills']} during "
            f"corrections, {k['update_kills']} during updates); {k['acknowledged']} "
            f"corrections acknowledged, {k['lost']} lost; a kill left temp files "
            f"{k['temps_left_by_a_kill']} times"
        )
    if args.load:
        lo = load(args.load, args.learn_after, args.interval_ms / 1000)
        results["load"] = lo
        a, m = lo["alone"], lo["with_feedback"]
        for what, r in (("predict alone", a), ("with 10 feedback clients", m)):
            print(f"{what}: {r['predicts']} requests, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms")
        print(f"p99 ratio {lo['p99_ratio']} (bar <= 2); 5xx: {lo['5xx']}; statuses {m['status']}")
        print(f"head after: generation {lo['generation_after']}, last update {lo['last_update']}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
