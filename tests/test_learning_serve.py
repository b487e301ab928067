"""The running service learns: corrections over HTTP (kept on disk before the answer),
hostile bodies refused in one line, background updates, rollback, two replicas on one
folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from manyheads import Bundle
from manyheads.bundle.feedback import FEEDBACK_FILE

pytestmark = pytest.mark.heavy
httpx = pytest.importorskip("httpx")

OLD = ("libs", "utils", "devel", "doc")
KEY = "learn-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def folder(tmp_path: Path, debian_rows: list[dict[str, Any]]) -> Path:
    old = [r for r in debian_rows if r["section"] in OLD]
    bundle = Bundle("hashing")
    bundle.fit_head("section", [r["text"] for r in old], [r["section"] for r in old])
    bundle.save(tmp_path / "b")
    (tmp_path / "keys.txt").write_text(KEY + "\n")
    return tmp_path / "b"


def _new(debian_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in debian_rows if r["section"] not in OLD]


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"text": r["text"], "labels": {"section": r["section"]}} for r in rows]


def _logged(folder: Path) -> int:
    path = folder / FEEDBACK_FILE
    return len(path.read_text().splitlines()) if path.exists() else 0


def _error(resp: Any) -> tuple[int, str, str]:
    err = resp.json()["error"]
    return resp.status_code, err["code"], err["message"]


def test_feedback_over_http(folder: Path, debian_rows: list, start_server: Any) -> None:
    keys = folder.parent / "keys.txt"
    srv = start_server(
        folder, "--api-key-file", keys, "--max-feedback", "40", "--max-chars", "5000"
    )
    rows = _rows(_new(debian_rows)[:30])
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        assert client.post("/v1/feedback", json=rows).status_code == 401
        resp = client.post("/v1/feedback", json=rows, headers=AUTH)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"kept": {"section": 30}, "rows": 30}
        assert _logged(folder) == 30  # on disk when the answer came
        heads = client.get("/v1/heads", headers=AUTH).json()["heads"]
        assert heads[0]["feedback"] == {"total": 30, "pending": 30, "new": 30}
        assert heads[0]["generation"] == 1 and heads[0]["last_update"] is None

        def post(body: Any) -> tuple[int, str, str]:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            return _error(client.post("/v1/feedback", content=raw, headers=AUTH))

        assert post({"text": "x"})[:2] == (422, "bad_feedback")
        assert post([]) == (422, "bad_feedback", "no feedback rows given")
        assert post([{"text": "x", "labels": {}}])[2] == "a feedback row needs at least one label"
        assert post([{"text": "x", "labels": {"nope": "a"}}])[2].startswith(
            "feedback names unknown head 'nope'"
        )
        assert post([{"text": "x", "labels": {"section": {"a": 1}}}])[:2] == (422, "bad_data")
        assert post(b'[{"text": "x", "labels": {"section": NaN}}]')[:2] == (422, "bad_data")
        assert post(b'[{"text": "\\ud800", "labels": {"section": "libs"}}]')[:2] == (
            422,
            "bad_feedback",
        )
        assert post([{"text": 5, "labels": {"section": "libs"}}])[:2] == (422, "bad_feedback")
        assert post([{"text": "x" * 6000, "labels": {"section": "libs"}}])[:2] == (
            413,
            "text_too_long",
        )
        many = [{"text": "x", "labels": {"section": "libs"}}] * 1001
        assert post(many)[:2] == (413, "too_many_rows")
        status, code, message = post(_rows(_new(debian_rows)[30:50]))
        assert (status, code) == (413, "feedback_full") and "cap of 40 rows" in message
        assert _logged(folder) == 30  # nothing of a refused body kept
    assert "Traceback" not in srv.output()


def test_the_service_learns_and_rolls_back(
    folder: Path, debian_rows: list, start_server: Any
) -> None:
    keys = folder.parent / "keys.txt"
    srv = start_server(
        folder, "--api-key-file", keys, "--learn", "--learn-after", "60", "--learn-check", "0.3"
    )
    new = _new(debian_rows)
    probe = [r["text"] for r in new[300:310]]
    with httpx.Client(base_url=srv.url, timeout=60, headers=AUTH) as client:
        before = client.post("/v1/predict", json={"texts": probe}).json()["results"]
        assert client.post("/v1/feedback", json=_rows(new[:40])).status_code == 200
        time.sleep(1.5)  # fewer than --learn-after: no update
        assert client.get("/v1/heads").json()["heads"][0]["generation"] == 1
        assert client.post("/v1/feedback", json=_rows(new[40:250])).status_code == 200
        deadline, head = time.time() + 60, {}
        while time.time() < deadline:
            head = client.get("/v1/heads").json()["heads"][0]
            if head["last_update"] is not None:
                break
            time.sleep(0.3)
        assert head["generation"] == 2, head
        assert head["last_update"]["promoted"] is True
        assert len(set(head["labels"]) - set(OLD)) > 10  # it learnt new sections
        after = client.post("/v1/predict", json={"texts": probe}).json()["results"]
        assert after != before
        resp = client.post("/v1/heads/section/rollback")
        assert resp.status_code == 200 and resp.json()["generation"] == 1
        again = client.post("/v1/predict", json={"texts": probe}).json()["results"]
        assert again == before  # the generation answers as it did
        assert _error(client.post("/v1/heads/section/rollback", json={"to": 9}))[:2] == (
            422,
            "bad_data",
        )
        assert _error(client.post("/v1/heads/section/rollback", json={"to": "x"}))[:2] == (
            422,
            "bad_generation",
        )
    assert "Traceback" not in srv.output()


def test_two_replicas_on_one_folder(folder: Path, debian_rows: list, start_server: Any) -> None:
    keys = folder.parent / "keys.txt"
    options = ("--api-key-file", keys, "--watch", "--learn", "--learn-after", "100")
    a = start_server(folder, *options, "--learn-check", "0.3")
    b = start_server(folder, *options, "--learn-check", "0.3")
    new = _new(debian_rows)[:240]
    n_old = len(Bundle.load(folder).training_data("section")[0])
    with httpx.Client(timeout=60, headers=AUTH) as client:
        for i in range(0, 240, 20):
            url = (a if i % 40 else b).url
            assert client.post(url + "/v1/feedback", json=_rows(new[i : i + 20])).status_code == 200
        deadline = time.time() + 90
        gens: list[int] = []
        while time.time() < deadline:
            gens = [
                client.get(s.url + "/v1/heads").json()["heads"][0]["generation"] for s in (a, b)
            ]
            if min(gens) >= 2:
                break
            time.sleep(0.3)
        assert min(gens) >= 2, gens
    # every correction went into the head or is still waiting: none lost
    bundle = Bundle.load(folder)
    kept = bundle.training_data("section")
    assert kept is not None
    assert len(kept[0]) - n_old + _logged(folder) == 240
    for srv in (a, b):
        assert "Traceback" not in srv.output()


WRITER = """
import sys
from manyheads import Bundle
bundle = Bundle.load(sys.argv[1], cache=None)
i = 0
while True:
    texts = [f"t{i + k} a package of tools number {i + k}" for k in range(5)]
    bundle.add_feedback(texts, {"section": ["utils"] * 5})
    print(*(t.split(" ", 1)[0] for t in texts), flush=True)
    i += 5
"""
UPDATER = """
import sys
from manyheads import Bundle
Bundle.load(sys.argv[1], cache=None).update_heads(["section"], margin=50.0)
print("updated", flush=True)
"""


def _killed(code: str, folder: Path, delay: float) -> list[str]:
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(delay)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return out.decode().split()


def test_kill_9_loses_no_acknowledged_correction(folder: Path) -> None:
    """Writers and updaters killed at random: every correction acknowledged is in the log
    or in the head's kept data, and the bundle loads with a whole head."""
    import random

    rng = random.Random(0)
    acked: set[str] = set()
    for i in range(6):
        if i % 2 == 0:
            acked |= set(_killed(WRITER, folder, rng.uniform(1.5, 4.0)))
        else:
            _killed(UPDATER, folder, rng.uniform(1.0, 6.0))
        bundle = Bundle.load(folder, cache=None)
        bundle.predict(["a library for parsing"])
        kept = bundle.training_data("section")
        assert kept is not None
        texts = [r.text for r in bundle.feedback_rows()] + kept[0]
        found = {t.split(" ", 1)[0] for t in texts if t.startswith("t")}
        assert acked <= found, sorted(acked - found)[:5]
    assert acked  # the writers got corrections acknowledged before they were killed
