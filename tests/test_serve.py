"""The HTTP service, started as a real uvicorn server in a subprocess."""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import assert_same_answers, free_port

from manyheads import Bundle

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from manyheads.serve import head_from_json, head_to_json, load_api_keys  # noqa: E402

pytestmark = pytest.mark.heavy  # left out of scripts/test.sh --quick

KEY = "k3y-for-tests-0123456789abcdef"
OTHER_KEY = "another-key-0123456789abcdef"
BASE_HEADS = {"section", "library", "role"}


def _bundle(folder: Path, rows: list[dict]) -> Bundle:
    b = Bundle(trunk="hashing", cache=None)
    texts = [r["text"] for r in rows]
    b.fit_head("section", texts, [r["section"] for r in rows])
    b.fit_head("library", texts, [r["library"] for r in rows], kind="binary")
    b.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    b.save(folder)
    return b


def _head_json(name: str, texts: list[str], labels: list[str], trunk: str = "hashing") -> dict:
    """A head trained elsewhere, in the body form PUT takes."""
    b = Bundle(trunk=trunk, cache=None)
    b.fit_head(name, texts, labels)
    return head_to_json(*b.export_head(name))


@pytest.fixture(scope="module")
def server(tmp_path_factory, debian_rows, start_server):
    folder = tmp_path_factory.mktemp("serve") / "b"
    bundle = _bundle(folder, debian_rows[:400])
    srv = start_server(folder, "--max-batch", "32", "--max-wait-ms", "5")
    return srv.url, bundle


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, debian_rows, start_server):
    """A server with API keys, --watch, windowed long texts and a 1 MB body limit."""
    work = tmp_path_factory.mktemp("keyed")
    folder = work / "b"
    bundle = _bundle(folder, debian_rows[:400])
    keys = work / "keys.txt"
    keys.write_text(f"# service keys\n{KEY}\n\n{OTHER_KEY}\n")
    srv = start_server(
        folder,
        "--api-key-file",
        str(keys),
        "--watch",
        "--long-texts",
        "window",
        "--max-chars",
        "300",
        "--max-body-mb",
        "1",
    )
    return srv, folder, bundle


def _auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- predict -----------------------------------------------------------------


def test_predict_matches_bundle_predict(server, debian_test_rows):
    url, bundle = server
    texts = [r["text"] for r in debian_test_rows[:20]]
    res = httpx.post(url + "/v1/predict", json={"texts": texts}, timeout=30)
    assert res.status_code == 200
    got = res.json()["results"]
    want = bundle.predict(texts)
    assert [g["section"]["label"] for g in got] == [w["section"]["label"] for w in want]
    assert [g["role"]["labels"] for g in got] == [w["role"]["labels"] for w in want]
    assert [g["library"]["label"] for g in got] == [w["library"]["label"] for w in want]
    for g, w in zip(got, want, strict=True):
        assert g["section"]["score"] == pytest.approx(w["section"]["score"], abs=1e-5)
    sub = httpx.post(url + "/v1/predict", json={"texts": texts[:2], "heads": ["library"]})
    assert set(sub.json()["results"][0]) == {"library"}


def test_empty_text_gets_no_label(server):
    url, _ = server
    res = httpx.post(url + "/v1/predict", json={"texts": ["", "a C library", "  "]})
    assert res.status_code == 200, res.text
    empty, filled, blank = res.json()["results"]
    assert empty == blank and empty["role"] == {"labels": [], "scores": {}}
    assert empty["section"] == {"label": None, "score": None, "scores": {}}
    assert filled["section"]["label"] is not None


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
    # the passes merged requests
    metrics = httpx.get(url + "/metrics").text
    count = _metric(metrics, "manyheads_batch_requests_count")
    assert 0 < count < _metric(metrics, "manyheads_batch_requests_sum")


BAD_PREDICT_BODIES = [
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
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_PREDICT_BODIES)
def test_bad_input_gets_a_4xx_json_error(server, body, status, code):
    url, _ = server
    res = httpx.post(url + "/v1/predict", content=body, timeout=30)
    assert res.status_code == status, res.text
    assert res.json()["error"]["code"] == code
    assert res.json()["error"]["message"]
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}  # still alive


def test_bad_bodies_cost_no_trunk_pass(server):
    """Every mistake of a predict body, an unknown head too, is refused before a pass."""
    url, _ = server
    before = _metric(httpx.get(url + "/metrics").text, "manyheads_batch_requests_count")
    for body, status, _ in BAD_PREDICT_BODIES:
        assert httpx.post(url + "/v1/predict", content=body, timeout=30).status_code == status
    after = _metric(httpx.get(url + "/metrics").text, "manyheads_batch_requests_count")
    assert after == before


def test_a_body_over_the_limit_is_read_then_refused(keyed):
    srv, _, _ = keyed
    body = json.dumps({"texts": ["x" * 1000] * 1100}).encode()  # 1.1 MB > 1 MB
    res = httpx.post(srv.url + "/v1/predict", content=body, headers=_auth(), timeout=30)
    assert res.status_code == 413
    assert res.json()["error"]["code"] == "body_too_large"
    assert httpx.get(srv.url + "/healthz").status_code == 200


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("levels", [64, 5000])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/predict", '{{"texts": {}}}'),
        ("POST", "/v1/heads/deep/train", '{{"texts": ["a", "b"], "labels": {}}}'),
        ("PUT", "/v1/heads/deep", '{{"record": {{"labels": {}}}, "tensors": ""}}'),
    ],
)
def test_a_body_nested_too_deep_is_a_400(keyed, method, path, body, levels):
    """Deeper than the limit (64 levels with the outer object: 65) or than the JSON
    parser goes (5,000): a 400 with one line, never a 500."""
    srv, _, _ = keyed
    content = body.format(_nested(levels))
    res = httpx.request(method, srv.url + path, content=content, headers=_auth(), timeout=30)
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["code"] == "too_deep"
    assert error["message"] == "the request body nests arrays and objects more than 64 levels deep"
    assert httpx.get(srv.url + "/healthz").status_code == 200


def test_a_body_nested_to_the_limit_is_judged_as_usual(keyed):
    srv, _, _ = keyed
    content = '{"texts": ' + _nested(63) + "}"  # 64 levels with the outer object
    res = httpx.post(srv.url + "/v1/predict", content=content, headers=_auth(), timeout=30)
    assert res.status_code == 422 and res.json()["error"]["code"] == "bad_texts", res.text


def test_unknown_routes_and_methods_answer_json(server):
    url, _ = server
    res = httpx.get(url + "/v1/nope")
    assert res.status_code == 404 and res.json()["error"]["code"] == "not_found"
    res = httpx.get(url + "/v1/predict")
    assert res.status_code == 405 and res.json()["error"]["code"] == "method_not_allowed"


def test_long_texts_are_windowed_when_configured(keyed, debian_test_rows):
    srv, _, bundle = keyed
    long = " ".join(r["text"] for r in debian_test_rows[:6])
    assert len(long) > 300
    texts = [long, "a short text"]
    res = httpx.post(srv.url + "/v1/predict", json={"texts": texts}, headers=_auth(), timeout=30)
    assert res.status_code == 200, res.text
    got = res.json()["results"]
    want = bundle.predict(texts, max_chars=300)
    for g, w in zip(got, want, strict=True):
        assert g["section"]["label"] == w["section"]["label"]
        assert g["section"]["score"] == pytest.approx(w["section"]["score"], abs=1e-5)
        assert g["role"]["labels"] == w["role"]["labels"]


def test_health_and_ready(server):
    url, _ = server
    ready = httpx.get(url + "/readyz").json()
    assert ready["status"] == "ready" and set(ready["heads"]) == BASE_HEADS


def test_heads_lists_names_kinds_labels_and_metrics(server):
    url, bundle = server
    listed = {h["name"]: h for h in httpx.get(url + "/v1/heads").json()["heads"]}
    assert set(listed) == BASE_HEADS
    assert listed["library"]["kind"] == "binary"
    assert listed["section"]["labels"] == bundle.labels("section")
    assert "accuracy" in listed["section"]["metrics"]


def test_playground_page_is_served(server):
    url, _ = server
    res = httpx.get(url + "/")
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/html")
    assert 'id="predict"' in res.text and "/v1/predict" in res.text


# -- CLI ---------------------------------------------------------------------


def test_serve_refuses_a_missing_bundle(tmp_path: Path, capsys):
    from manyheads.cli import main

    assert main(["serve", "-b", str(tmp_path / "none")]) == 1
    assert "no bundle at" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-batch", "0"], "max_batch must be a positive integer"),
        (["--max-wait-ms", "-1"], "max_wait_ms must be between"),
        (["--max-texts", "0"], "--max-texts must be a positive integer, got 0"),
        (["--long-texts", "cut"], "--long-texts must be one of refuse, window, got 'cut'"),
        (["--max-body-mb", "0"], "--max-body-mb must be > 0"),
        (["--max-pass-chars", "0"], "--max-pass-chars must be a positive integer, got 0"),
        (["--max-pass-tokens", "-5"], "--max-pass-tokens must be a positive integer, got -5"),
    ],
)
def test_serve_refuses_bad_options(tmp_path: Path, capsys, options, message):
    from manyheads.cli import main

    folder = tmp_path / "b"
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 5, ["x", "y"] * 10)
    b.save(folder)
    assert main(["serve", "-b", str(folder), *options]) == 1
    assert message in capsys.readouterr().err


def _broken(folder: Path, how: str) -> None:
    if how == "half-bundle-json":
        text = (folder / "bundle.json").read_text()
        (folder / "bundle.json").write_text(text[: len(text) // 2])
    else:
        blob = (folder / "heads.safetensors").read_bytes()
        (folder / "heads.safetensors").write_bytes(blob[: len(blob) // 2])


@pytest.mark.parametrize("how", ["half-bundle-json", "truncated-weights"])
def test_serve_with_a_broken_bundle_is_one_line_and_exit_1(tmp_path: Path, capsys, how):
    from manyheads.cli import main

    folder = tmp_path / "b"
    b = Bundle(trunk="hashing", cache=None)
    b.fit_head("t", ["a b", "c d", "e f", "g h"] * 5, ["x", "y"] * 10)
    b.save(folder)
    _broken(folder, how)
    assert main(["serve", "-b", str(folder), "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert err.startswith("manyheads: error: ") and err.count("\n") == 1, err


def test_serve_checks_its_port_before_loading_or_announcing(tmp_path: Path, capsys):
    import socket

    from manyheads.cli import main

    assert main(["serve", "-b", str(tmp_path / "none"), "--port", "99999"]) == 1
    assert capsys.readouterr().err == (
        "manyheads: error: --port must be between 1 and 65535, got 99999\n"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "-b", "content", "--port", str(port)]) == 1
        err = capsys.readouterr().err
    assert err.startswith(f"manyheads: error: cannot listen on 127.0.0.1:{port}: "), err
    assert "serving" not in err and err.count("\n") == 1


def test_api_key_file_is_checked(tmp_path: Path):
    from manyheads.errors import ConfigError

    with pytest.raises(ConfigError, match="does not exist"):
        load_api_keys(tmp_path / "none")
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match="holds no key"):
        load_api_keys(empty)
    short = tmp_path / "short"
    short.write_text("abc123\n")
    with pytest.raises(ConfigError, match="too short") as info:
        load_api_keys(short)
    assert "abc123" not in str(info.value)  # keys never reach messages (or logs)
    spaced = tmp_path / "spaced"
    spaced.write_text("abcdefghijklmnop qrstuvwxyz\n")
    with pytest.raises(ConfigError, match="whitespace"):
        load_api_keys(spaced)
    good = tmp_path / "good"
    good.write_text(f"{KEY}\n# comment\n{OTHER_KEY}\n")
    assert load_api_keys(good) == [KEY, OTHER_KEY]


# -- auth --------------------------------------------------------------------


def test_writes_need_a_key_even_without_a_key_file(server, debian_rows):
    url, _ = server
    payload = _head_json("w", [r["text"] for r in debian_rows[:60]], ["a", "b", "c"] * 20)
    for method, path, body in [
        ("PUT", "/v1/heads/w", payload),
        ("DELETE", "/v1/heads/section", None),
        ("POST", "/v1/heads/w/train", {"texts": ["a", "b"], "labels": ["x", "y"]}),
    ]:
        res = httpx.request(method, url + path, json=body, headers=_auth())
        assert res.status_code == 401, (method, path, res.text)
        assert res.json()["error"]["code"] == "unauthorized"
        assert "--api-key-file" in res.json()["error"]["message"]
        assert res.headers["www-authenticate"] == "Bearer"
    assert set(httpx.get(url + "/readyz").json()["heads"]) == BASE_HEADS
    # reads are open without a key file
    assert httpx.get(url + "/v1/heads").status_code == 200
    assert httpx.get(url + "/metrics").status_code == 200


def test_with_a_key_file_reads_need_a_key_too(keyed):
    srv, _, _ = keyed
    body = {"texts": ["a text"]}
    for headers in [{}, _auth("wrong-key-0123456789abcdef"), {"Authorization": KEY}]:
        for method, path in [("POST", "/v1/predict"), ("GET", "/v1/heads"), ("GET", "/metrics")]:
            res = httpx.request(
                method, srv.url + path, json=body if method == "POST" else None, headers=headers
            )
            assert res.status_code == 401, (headers, path)
            assert res.json()["error"]["code"] == "unauthorized"
    for key in (KEY, OTHER_KEY):
        assert httpx.post(srv.url + "/v1/predict", json=body, headers=_auth(key)).status_code == 200
    # probes and the page stay open
    assert httpx.get(srv.url + "/healthz").status_code == 200
    assert httpx.get(srv.url + "/readyz").status_code == 200
    assert httpx.get(srv.url + "/").status_code == 200
    # keys never reach the log
    out = srv.output()
    assert KEY not in out and "wrong-key-0123456789abcdef" not in out


# -- hot head updates --------------------------------------------------------


def test_put_installs_a_head_trained_elsewhere_and_persists_it(keyed, debian_rows):
    srv, folder, _ = keyed
    rows = debian_rows[400:700]
    texts = [r["text"] for r in rows]
    local = Bundle(trunk="hashing", cache=None)
    local.fit_head("interface", texts, [r["interface"] for r in rows], kind="multilabel")
    payload = head_to_json(*local.export_head("interface"))
    res = httpx.put(srv.url + "/v1/heads/interface", json=payload, headers=_auth())
    assert res.status_code == 200, res.text
    assert "interface" in res.json()["heads"]
    probe = [r["text"] for r in debian_rows[1000:1010]]
    got = httpx.post(
        srv.url + "/v1/predict", json={"texts": probe, "heads": ["interface"]}, headers=_auth()
    ).json()["results"]
    want = local.predict(probe)
    assert [g["interface"]["labels"] for g in got] == [w["interface"]["labels"] for w in want]
    # persisted: the folder's bundle has it, with the same weights
    saved = Bundle.load(folder, cache=None)
    assert "interface" in saved.heads
    assert [a["interface"]["labels"] for a in saved.predict(probe)] == [
        w["interface"]["labels"] for w in want
    ]
    # GET returns the same head (record + tensors)
    record, tensors = head_from_json(
        httpx.get(srv.url + "/v1/heads/interface", headers=_auth()).json()
    )
    assert record["labels"] == local.labels("interface")
    _, want_tensors = local.export_head("interface")
    assert set(tensors) == set(want_tensors)


def test_put_refuses_another_trunks_head_and_bad_payloads(keyed, debian_rows):
    srv, _, _ = keyed
    texts = [r["text"] for r in debian_rows[:90]]
    other = Bundle(trunk={"type": "hashing", "dim": 1024}, cache=None)
    other.fit_head("x", texts, ["a", "b", "c"] * 30)
    res = httpx.put(
        srv.url + "/v1/heads/x", json=head_to_json(*other.export_head("x")), headers=_auth()
    )
    assert res.status_code == 409, res.text
    assert res.json()["error"]["code"] == "fingerprint_mismatch"
    good = _head_json("x", texts, ["a", "b", "c"] * 30)
    no_fp = {
        **good,
        "record": {k: v for k, v in good["record"].items() if k != "trunk_fingerprint"},
    }
    cases = [
        ("x", b"not json", 400, "bad_json"),
        ("x", json.dumps({"record": good["record"]}).encode(), 422, "bad_data"),
        ("x", json.dumps({**good, "tensors": "%%%"}).encode(), 422, "bad_data"),
        (
            "x",
            json.dumps({**good, "tensors": base64.b64encode(b"junk").decode()}).encode(),
            422,
            "bad_data",
        ),
        ("x", json.dumps(no_fp).encode(), 422, "bad_data"),
        ("bad name!", json.dumps(good).encode(), 422, "bad_data"),
    ]
    for name, body, status, code in cases:
        res = httpx.put(srv.url + f"/v1/heads/{name}", content=body, headers=_auth())
        assert res.status_code == status, (name, body[:40], res.text)
        assert res.json()["error"]["code"] == code
    assert "x" not in httpx.get(srv.url + "/readyz").json()["heads"]


def test_train_adds_a_head_from_texts_and_labels(keyed, debian_rows):
    srv, folder, _ = keyed
    rows = debian_rows[:300]
    body = {
        "texts": [r["text"] for r in rows],
        "labels": [r["library"] for r in rows],
        "kind": "binary",
    }
    res = httpx.post(srv.url + "/v1/heads/is_lib/train", json=body, headers=_auth(), timeout=120)
    assert res.status_code == 200, res.text
    summary = res.json()
    assert summary["kind"] == "binary" and summary["n_train"] + summary["n_val"] == 300
    assert summary["metrics"]["accuracy"] > 0.6 and summary["replaced"] is False
    got = httpx.post(srv.url + "/v1/predict", json={"texts": ["a C library"]}, headers=_auth())
    assert "is_lib" in got.json()["results"][0]
    assert "is_lib" in Bundle.load(folder, cache=None).heads
    again = httpx.post(srv.url + "/v1/heads/is_lib/train", json=body, headers=_auth(), timeout=120)
    assert again.json()["replaced"] is True


def test_train_adds_a_hierarchical_head_whose_answers_keep_their_parents(keyed, debian_rows):
    srv, _, _ = keyed
    rows = debian_rows[:300]
    paths = [[f"{r['library']}::{r['section']}"] for r in rows]
    body = {"texts": [r["text"] for r in rows], "labels": paths, "kind": "hierarchical"}
    res = httpx.post(srv.url + "/v1/heads/tree/train", json=body, headers=_auth(), timeout=120)
    assert res.status_code == 200, res.text
    assert res.json()["kind"] == "hierarchical" and res.json()["metrics"]["inconsistent"] == 0
    texts = [r["text"] for r in debian_rows[300:360]]
    got = httpx.post(srv.url + "/v1/predict", json={"texts": texts, "heads": ["tree"]},
                     headers=_auth()).json()["results"]  # fmt: skip
    for answer in got:
        labels = answer["tree"]["labels"]
        assert all(lab.split("::")[0] in labels for lab in labels)
    heads = httpx.get(srv.url + "/v1/heads", headers=_auth()).json()["heads"]
    assert {h["name"]: h["kind"] for h in heads}["tree"] == "hierarchical"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"texts": ["a", "b"], "labels": ["x"]}, 422, "bad_labels"),
        ({"texts": "a", "labels": ["x"]}, 422, "bad_texts"),
        ({"texts": [], "labels": []}, 422, "empty_texts"),
        ({"texts": ["a", "b"], "labels": ["x", "y"], "kind": "ordinal"}, 422, "bad_kind"),
        ({"texts": ["a", "b"], "labels": ["x", "y"], "head": "tree"}, 422, "bad_head_type"),
        ({"texts": ["a", "b"], "labels": ["x", "y"], "groups": [1]}, 422, "bad_groups"),
        ({"texts": ["a", "b"], "labels": ["x", "x"]}, 422, "bad_data"),  # one class
        ({"texts": ["a", "b"], "labels": [["x"], ["y"]]}, 422, "bad_data"),  # lists: multilabel
        ({"texts": ["a", "b"], "labels": ["x", None]}, 422, "bad_data"),
        ({"texts": ["a", "b"], "labels": [{"x": 1}, "y"], "kind": "multilabel"}, 422, "bad_data"),
        (
            {"texts": ["a", "b"], "labels": [["x::"], ["y"]], "kind": "hierarchical"},
            422,
            "bad_data",
        ),
    ],
)
def test_train_refuses_bad_bodies(keyed, body, status, code):
    srv, _, _ = keyed
    res = httpx.post(srv.url + "/v1/heads/bad/train", json=body, headers=_auth(), timeout=60)
    assert res.status_code == status, res.text
    assert res.json()["error"]["code"] == code
    assert "bad" not in httpx.get(srv.url + "/readyz").json()["heads"]


def test_delete_removes_a_head_and_persists(keyed, debian_rows):
    srv, folder, _ = keyed
    payload = _head_json("gone", [r["text"] for r in debian_rows[:60]], ["a", "b", "c"] * 20)
    assert httpx.put(srv.url + "/v1/heads/gone", json=payload, headers=_auth()).status_code == 200
    res = httpx.delete(srv.url + "/v1/heads/gone", headers=_auth())
    assert res.status_code == 200 and "gone" not in res.json()["heads"]
    assert "gone" not in Bundle.load(folder, cache=None).heads
    res = httpx.delete(srv.url + "/v1/heads/gone", headers=_auth())
    assert res.status_code == 404 and res.json()["error"]["code"] == "unknown_head"


def test_watch_reloads_a_bundle_changed_on_disk(keyed, debian_rows):
    srv, folder, _ = keyed
    on_disk = Bundle.load(folder, cache=None)
    on_disk.fit_head("from_disk", [r["text"] for r in debian_rows[:90]], ["a", "b", "c"] * 30)
    on_disk.save(folder)
    deadline = time.time() + 20
    while time.time() < deadline:
        if "from_disk" in httpx.get(srv.url + "/readyz").json()["heads"]:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the server did not reload the changed bundle")
    res = httpx.post(srv.url + "/v1/predict", json={"texts": ["x"]}, headers=_auth())
    assert "from_disk" in res.json()["results"][0]
    metrics = httpx.get(srv.url + "/metrics", headers=_auth()).text
    assert _metric(metrics, "manyheads_bundle_reloads_total") >= 1
    # the reload kept the server's own later changes working
    assert httpx.delete(srv.url + "/v1/heads/from_disk", headers=_auth()).status_code == 200


def test_hot_updates_under_load_never_fail_a_request_or_mix_head_sets(keyed, debian_rows):
    """Readers see the old head set or the new one, never a mix; no request fails."""
    srv, _, _ = keyed
    texts = [r["text"] for r in debian_rows[:120]]
    v1 = _head_json("hot", texts, ["alpha", "beta"] * 60)
    v2 = _head_json("hot", texts, ["gamma", "delta", "epsilon"] * 40)
    versions = [{"alpha", "beta"}, {"gamma", "delta", "epsilon"}]
    base = set(httpx.get(srv.url + "/readyz").json()["heads"]) - {"hot"}
    stop = threading.Event()
    problems: list[str] = []
    seen: set[str] = set()

    def reader(seed: int) -> int:
        rng = random.Random(seed)
        n = 0
        with httpx.Client(headers=_auth(), timeout=60) as client:
            while not stop.is_set():
                chunk = rng.sample(texts, rng.randint(1, 4))
                res = client.post(srv.url + "/v1/predict", json={"texts": chunk})
                n += 1
                if res.status_code != 200:
                    problems.append(f"{res.status_code} {res.text[:200]}")
                    continue
                results = res.json()["results"]
                sets = {frozenset(r) for r in results}
                if len(sets) != 1 or next(iter(sets)) not in (base, base | {"hot"}):
                    problems.append(f"mixed head sets {sets}")
                hot = {frozenset(r["hot"]["scores"]) for r in results if "hot" in r}
                if len(hot) > 1 or any(set(h) not in versions for h in hot):
                    problems.append(f"mixed hot head versions {hot}")
                seen.update("hot-" + "-".join(sorted(h)) for h in hot)
                seen.add(f"n{len(next(iter(sets)))}")
        return n

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(reader, i) for i in range(6)]
        for _ in range(6):
            for payload in (v1, v2):
                res = httpx.put(srv.url + "/v1/heads/hot", json=payload, headers=_auth())
                assert res.status_code == 200, res.text
                time.sleep(0.05)
            assert httpx.delete(srv.url + "/v1/heads/hot", headers=_auth()).status_code == 200
            time.sleep(0.05)
        stop.set()
        served = sum(f.result() for f in futures)
    assert not problems, problems[:5]
    assert served > 50
    assert any(s.startswith("hot-") for s in seen)  # the readers did see the hot head


def test_small_soak_with_malformed_requests_has_no_5xx(keyed, debian_test_rows):
    """~10% malformed requests of every kind among good ones: no 5xx, every good answer
    matches the bundle's own."""
    srv, _, bundle = keyed
    texts = [r["text"][:300] for r in debian_test_rows[:100]]
    want = {t: w["section"]["label"] for t, w in zip(texts, bundle.predict(texts), strict=True)}
    bad = [(b, s, c) for b, s, c in BAD_PREDICT_BODIES if c != "text_too_long"]  # windowed here
    bad.append((json.dumps({"texts": ["x" * 1000] * 1100}).encode(), 413, "body_too_large"))

    def one(i: int) -> str | None:
        rng = random.Random(i)
        if i % 10 == 0:
            body, status, code = bad[(i // 10) % len(bad)]
            res = httpx.post(srv.url + "/v1/predict", content=body, headers=_auth(), timeout=60)
            ok = res.status_code == status and res.json()["error"]["code"] == code
            return None if ok else f"{code}: {res.status_code} {res.text[:100]}"
        chunk = rng.sample(texts, rng.randint(1, 3))
        res = httpx.post(
            srv.url + "/v1/predict",
            json={"texts": chunk, "heads": ["section"]},
            headers=_auth(),
            timeout=60,
        )
        if res.status_code != 200:
            return f"{res.status_code} {res.text[:100]}"
        got = [r["section"]["label"] for r in res.json()["results"]]
        return None if got == [want[t] for t in chunk] else "mismatched answer"

    with ThreadPoolExecutor(8) as pool:
        problems = [p for p in pool.map(one, range(600)) if p]
    assert not problems, problems[:5]
    metrics = httpx.get(srv.url + "/metrics", headers=_auth()).text
    assert 'status="500"' not in metrics
    assert httpx.get(srv.url + "/healthz").status_code == 200


def test_metrics_count_requests_batches_and_labels(keyed):
    srv, _, bundle = keyed
    texts = ["a python library", "a game for children", "tools for the shell"]
    httpx.post(srv.url + "/v1/predict", json={"texts": texts}, headers=_auth())
    metrics = httpx.get(srv.url + "/metrics", headers=_auth()).text
    assert 'manyheads_requests_total{method="POST",route="/v1/predict",status="200"}' in metrics
    assert (
        'manyheads_request_seconds_bucket{le="0.005",method="POST",route="/v1/predict"}' in metrics
    )
    assert _metric(metrics, "manyheads_batch_texts_count") >= 1
    assert "manyheads_queue_depth" in metrics
    assert _metric(metrics, "manyheads_heads") == len(
        httpx.get(srv.url + "/readyz").json()["heads"]
    )
    label = bundle.predict(texts[:1])[0]["section"]["label"]
    assert (
        _metric(metrics, f'manyheads_predicted_labels_total{{head="section",label="{label}"}}') >= 1
    )
    assert 'manyheads_predicted_labels_total{head="library"' in metrics


def test_metrics_count_the_schema_and_docs_under_their_own_routes(server):
    url, _ = server
    for page in ("/docs", "/openapi.json"):
        assert httpx.get(url + page).status_code == 200
    httpx.get(url + "/no/such/page")
    metrics = httpx.get(url + "/metrics").text
    for page in ("/docs", "/openapi.json"):
        assert _metric(
            metrics, f'manyheads_requests_total{{method="GET",route="{page}",status="200"}}'
        )
    assert 'route="(unmatched)",status="404"' in metrics
    assert 'route="(unmatched)",status="200"' not in metrics


def _metric(text: str, name: str) -> float:
    """The value of the sample ``name`` (with its labels, if given) in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " ") or (("{" in name) and line.startswith(name)):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}")


# -- the micro-batcher, in process --------------------------------------------


def test_micro_batcher_merges_concurrent_calls_and_keeps_rows_in_order():
    import asyncio

    from manyheads.serve import MicroBatcher

    passes: list[list[str]] = []

    def predict(texts: list[str]) -> list[dict]:
        passes.append(list(texts))
        return [{"echo": {"label": t}} for t in texts]

    async def main() -> None:
        batcher = MicroBatcher(predict, max_batch=64, max_wait_ms=10_000)
        batcher.start()
        try:
            # a lone request does not wait for company (max wait is 10 s here)
            alone = await asyncio.wait_for(batcher.submit(["solo"]), timeout=5)
            assert alone == [{"echo": {"label": "solo"}}]
            chunks = [[f"r{i}-t{j}" for j in range(1 + i % 3)] for i in range(20)]
            got = await asyncio.wait_for(
                asyncio.gather(*(batcher.submit(c) for c in chunks)), timeout=20
            )
            for chunk, answer in zip(chunks, got, strict=True):
                assert [a["echo"]["label"] for a in answer] == chunk
            assert batcher.expected >= 20
        finally:
            await batcher.stop()

    asyncio.run(main())
    assert passes[0] == ["solo"]
    assert len(passes) <= 3  # 20 concurrent requests merged into one or two passes
    assert all(len(p) <= 64 for p in passes)


def test_micro_batcher_hands_a_failed_pass_to_its_callers_only():
    import asyncio

    from manyheads.errors import DataError
    from manyheads.serve import MicroBatcher

    def predict(texts: list[str]) -> list[dict]:
        if "boom" in texts:
            raise DataError("bad text")
        return [{"h": {"label": t}} for t in texts]

    async def main() -> None:
        batcher = MicroBatcher(predict, max_batch=1, max_wait_ms=0)
        batcher.start()
        try:
            with pytest.raises(DataError):
                await batcher.submit(["boom"])
            assert await batcher.submit(["fine"]) == [{"h": {"label": "fine"}}]
        finally:
            await batcher.stop()

    asyncio.run(main())


def test_micro_batcher_caps_a_pass_in_trunk_work_and_characters():
    import asyncio

    from manyheads.serve import MicroBatcher

    passes: list[list[str]] = []

    def predict(texts: list[str]) -> list[dict]:
        passes.append(list(texts))
        return [{"h": {"label": t}} for t in texts]

    def words(texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    async def main() -> list[list[dict]]:
        batcher = MicroBatcher(
            predict, measure=words, max_wait_ms=0, max_pass_chars=40, max_pass_work=10
        )
        batcher.start()
        try:
            calls = [[f"w{i} " * 4] for i in range(6)] + [["a b", "c d"], ["x" * 30, "y"]]
            return await asyncio.gather(*(batcher.submit(c) for c in calls))
        finally:
            await batcher.stop()

    got = asyncio.run(main())
    assert [a["h"]["label"] for a in got[-1]] == ["x" * 30, "y"]
    assert [r[0]["h"]["label"] for r in got[:6]] == [f"w{i} " * 4 for i in range(6)]
    for texts in passes:  # at most 10 words and 40 characters a pass
        assert sum(words(texts)) <= 10 and sum(map(len, texts)) <= 40, texts
    assert len(passes) >= 4


def test_micro_batcher_serves_other_requests_between_the_steps_of_a_long_text():
    import asyncio

    from manyheads.serve import MicroBatcher

    log: list[object] = []
    first_step, go_on = threading.Event(), threading.Event()

    class Steps:
        divisible = True

        def __init__(self, text: str) -> None:
            self.text, self.left = text, 3

        @property
        def done(self) -> bool:
            return self.left == 0

        def step(self, budget: int) -> int:
            log.append(("step", budget))
            if not first_step.is_set():
                first_step.set()
                go_on.wait(10)  # the others come while the first step runs
            self.left -= 1
            return budget

        def answers(self) -> list[dict]:
            return [{"h": {"label": f"long {len(self.text)}"}}]

    def predict(texts: list[str]) -> list[dict]:
        log.append(list(texts))
        return [{"h": {"label": t}} for t in texts]

    async def main() -> list[list[dict]]:
        batcher = MicroBatcher(
            predict, start=Steps, max_wait_ms=0, max_pass_chars=10**6, max_pass_work=100
        )
        batcher.start()
        try:
            long = asyncio.create_task(batcher.submit(["a", "L" * 500, "b"]))
            while not first_step.is_set():
                await asyncio.sleep(0.001)
            small = [asyncio.create_task(batcher.submit([f"s{i}"])) for i in range(3)]
            while batcher.depth < 3:
                await asyncio.sleep(0.001)
            go_on.set()
            return await asyncio.wait_for(asyncio.gather(long, *small), timeout=10)
        finally:
            await batcher.stop()

    long, *small = asyncio.run(main())
    assert [a["h"]["label"] for a in long] == ["a", "long 500", "b"]
    assert [s[0]["h"]["label"] for s in small] == ["s0", "s1", "s2"]
    # the text over the cap (500 > 100) in steps of at most 100, each a pass of its
    # own; the requests that came during its first step answered before its second
    assert log == [["a"], ("step", 100), ["s0", "s1", "s2"], ("step", 100), ("step", 100), ["b"]]


@pytest.fixture(scope="module")
def long_served(tmp_path_factory, tiny_st_dir, debian_rows, start_server):
    """A bundle on the tiny transformer (16-token windows), served with passes of at most
    16 tokens: one window."""
    folder = tmp_path_factory.mktemp("long") / "b"
    rows = debian_rows[:150]
    texts = [r["text"] for r in rows]
    bundle = Bundle(trunk=str(tiny_st_dir), cache=None)
    bundle.fit_head("section", texts, [r["section"] for r in rows])
    bundle.fit_head("role", texts, [r["role"] for r in rows], kind="multilabel")
    bundle.save(folder)
    return start_server(folder, "--max-pass-tokens", "16"), bundle


def test_a_long_text_is_read_over_many_passes_while_others_are_answered(
    long_served, debian_test_rows
):
    srv, bundle = long_served
    long = " ".join(r["text"] for r in debian_test_rows)[:20_000]
    short = [r["text"][:60] for r in debian_test_rows[:5]]
    tokens = bundle.trunk.work([long])[0]
    url = srv.url + "/v1/predict"
    with httpx.Client(timeout=300) as client, ThreadPoolExecutor(1) as pool:
        before = _metric(client.get(srv.url + "/metrics").text, "manyheads_text_steps_total")
        pending = pool.submit(client.post, url, json={"texts": [long]})
        while (
            _metric(client.get(srv.url + "/metrics").text, "manyheads_text_steps_total") == before
        ):
            time.sleep(0.005)  # its first step has begun
        meanwhile = []
        for text in short:
            res = client.post(url, json={"texts": [text]})
            assert res.status_code == 200, res.text
            assert_same_answers(res.json()["results"], bundle.predict([text]), atol=1e-5)
            meanwhile.append(not pending.done())
        res = pending.result()
        metrics = client.get(srv.url + "/metrics").text
    assert res.status_code == 200, res.text
    assert meanwhile == [True] * len(short)  # answered while the long text was read
    assert_same_answers(res.json()["results"], bundle.predict([long]), atol=1e-5)
    assert _metric(metrics, "manyheads_text_steps_total") - before >= tokens / 16 > 300
    # no pass held more than 16 tokens
    count = _metric(metrics, "manyheads_batch_work_count")
    assert _metric(metrics, 'manyheads_batch_work_bucket{le="16.0"}') == count


def test_writes_to_the_builtin_bundle_are_refused(start_server, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEY + "\n")
    srv = start_server(Path("content"), "--api-key-file", str(keys))
    body = {"texts": ["a", "b", "c", "d"], "labels": ["x", "y", "x", "y"]}
    for res in (
        httpx.delete(srv.url + "/v1/heads/risk", headers=_auth()),
        httpx.post(srv.url + "/v1/heads/new/train", json=body, headers=_auth(), timeout=60),
    ):
        assert res.status_code == 409, res.text
        assert "the built-in bundle 'content' is read-only" in res.json()["error"]["message"]
    assert "risk" in httpx.get(srv.url + "/readyz").json()["heads"]
