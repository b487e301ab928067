"""The HTTP service, started as a real uvicorn server in a subprocess."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from manyheads import Bundle

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory, debian_rows):
    folder = tmp_path_factory.mktemp("serve") / "b"
    b = Bundle(trunk="hashing", cache=None)
    rows = debian_rows[:400]
    texts = [r["text"] for r in rows]
    b.fit_head("section", texts, [r["section"] for r in rows])
    b.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    b.save(folder)
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "manyheads.cli",
            "serve",
            "-b",
            str(folder),
            "--port",
            str(port),
            "--max-batch",
            "32",
            "--max-wait-ms",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the server did not become ready")
    yield url, b
    proc.terminate()
    proc.wait(timeout=20)


def test_predict_matches_bundle_predict(server, debian_test_rows):
    url, bundle = server
    texts = [r["text"] for r in debian_test_rows[:20]]
    res = httpx.post(url + "/v1/predict", json={"texts": texts}, timeout=30)
    assert res.status_code == 200
    got = res.json()["results"]
    want = bundle.predict(texts)
    assert [g["section"]["label"] for g in got] == [w["section"]["label"] for w in want]
    assert [g["role"]["labels"] for g in got] == [w["role"]["labels"] for w in want]
    sub = httpx.post(url + "/v1/predict", json={"texts": texts[:2], "heads": ["library"]})
    assert set(sub.json()["results"][0]) == {"library"}


def test_concurrent_requests_get_their_own_rows_back(server, debian_test_rows):
    url, bundle = server
    texts = [r["text"] for r in debian_test_rows[:200]]
    want = [w["section"]["label"] for w in bundle.predict(texts)]

    def one(i: int) -> tuple[int, list[str]]:
        chunk = texts[i : i + 1 + i % 3]
        r = httpx.post(url + "/v1/predict", json={"texts": chunk}, timeout=60)
        assert r.status_code == 200, r.text
        return i, [a["section"]["label"] for a in r.json()["results"]]

    with ThreadPoolExecutor(16) as pool:
        for i, labels in pool.map(one, range(150)):
            assert labels == want[i : i + 1 + i % 3]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"not json", 400, "bad_json"),
        (b'{"texts": ["\xff\xfe"]}', 400, "bad_encoding"),
        (b"[1, 2]", 422, "bad_request"),
        (b'{"texts": "one"}', 422, "bad_texts"),
        (b'{"texts": [1]}', 422, "bad_texts"),
        (b'{"texts": []}', 422, "empty_texts"),
        (b'{"texts": ["a"], "heads": "section"}', 422, "bad_heads"),
        (b'{"texts": ["a"], "heads": ["nope"]}', 404, "unknown_head"),
        (json.dumps({"texts": ["a"] * 1001}).encode(), 413, "too_many_texts"),
        (json.dumps({"texts": ["a" * 100_001]}).encode(), 413, "text_too_long"),
    ],
)
def test_bad_input_gets_a_4xx_json_error(server, body, status, code):
    url, _ = server
    res = httpx.post(url + "/v1/predict", content=body, timeout=30)
    assert res.status_code == status, res.text
    assert res.json()["error"]["code"] == code
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}  # still alive


def test_health_and_ready(server):
    url, _ = server
    ready = httpx.get(url + "/readyz").json()
    assert ready["status"] == "ready" and set(ready["heads"]) == {"section", "library", "role"}


def test_serve_refuses_a_missing_bundle(tmp_path: Path, capsys):
    from manyheads.cli import main

    assert main(["serve", "-b", str(tmp_path / "none")]) == 1
    assert "no bundle at" in capsys.readouterr().err


def test_heads_lists_names_kinds_labels_and_metrics(server):
    url, bundle = server
    listed = {h["name"]: h for h in httpx.get(url + "/v1/heads").json()["heads"]}
    assert set(listed) == {"section", "library", "role"}
    assert listed["library"]["kind"] == "binary"
    assert listed["section"]["labels"] == bundle.labels("section")
    assert "accuracy" in listed["section"]["metrics"]
