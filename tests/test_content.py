"""The built-in `content` bundle and the labelling code behind it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from manyheads import Bundle
from manyheads.bundle import builtin_root

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import content_data as cd  # noqa: E402

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def content():
    return Bundle.load("content", cache=None)


def test_the_bundle_is_in_the_package_and_small():
    folder = builtin_root() / "content"
    assert (folder / "bundle.json").is_file()
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size <= 5 * 1024 * 1024, f"content bundle is {size / 1e6:.2f} MB"
    sources = json.loads((folder / "SOURCES.json").read_text())
    assert sources["summary"]["generated"] > 0 and sources["test"]
    # the trunk's weights are stored once, in its ONNX graph
    from safetensors.numpy import load_file

    assert not [k for k in load_file(folder / "heads.safetensors") if k.startswith("trunk/")]
    assert len(list(folder.rglob("*.onnx"))) == 1


def test_heads_and_labels(content):
    assert set(content.heads) == {"code_language", "language", "kind", "risk"}
    assert len(content.labels("code_language")) == 18 and "none" in content.labels("code_language")
    assert len(content.labels("language")) >= 40
    assert set(content.labels("kind")) == set(cd.KINDS)
    assert set(content.labels("risk")) == set(cd.RISKS)
    assert content.trunk_name == "byte" or content.trunk.__class__.__name__ == "ByteTrunk"


def test_predict_keeps_the_scores_asked_for(content):
    texts = ["def f(): pass", "", "Hallo Welt, wie geht es dir?", 'token = "hunter2-Prod!"']
    whole = content.predict(texts)
    top = content.predict(texts, scores="top")
    none = content.predict(texts, scores="none")
    for one, best, bare in zip(whole, top, none, strict=True):
        for head, answer in one.items():
            ranked = sorted(answer["scores"].items(), key=lambda kv: -kv[1])[:5]
            assert list(best[head]["scores"].items()) == ranked  # highest first
            assert bare[head] == {k: v for k, v in answer.items() if k != "scores"}
            assert {k: v for k, v in best[head].items() if k != "scores"} == bare[head]
    assert none[1]["kind"] == {"label": None, "score": None}  # empty text: no label
    with pytest.raises(ValueError, match="scores must be one of all, top, none, got 'best'"):
        content.predict(texts, scores="best")


def test_every_tier_answers(content):
    assert content.tiers
    for tier in content.tiers:
        b = Bundle.load("content", tier=tier, cache=None)
        assert b.trunk.dim == tier
        assert b.predict(["import os\nprint(os.getcwd())"])[0]["code_language"]["label"]


def test_cli_predict_without_a_bundle_uses_content(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "manyheads.cli", "predict", "def f(): return 1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    answer = json.loads(out.stdout.strip().splitlines()[0])
    assert answer["code_language"]["label"] == "python"


def test_obvious_answers(content):
    texts = [
        "Der schnelle braune Fuchs springt über den faulen Hund und läuft in den Wald.",
        "Le renard brun rapide saute par-dessus le chien paresseux dans la forêt.",
        "Быстрая коричневая лиса прыгает через ленивую собаку в лесу.",
        '#include <stdio.h>\nint main(void) {\n    printf("hi\\n");\n    return 0;\n}\n',
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
        "-----END RSA PRIVATE KEY-----",
    ]
    got = content.predict(texts)
    assert [g["language"]["label"] for g in got[:3]] == ["de", "fr", "ru"]
    assert got[0]["kind"]["label"] == "prose"
    assert got[3]["code_language"]["label"] in ("c", "c_header", "cpp")
    assert got[3]["kind"]["label"] == "code"
    assert "private_key" in got[4]["risk"]["labels"]


def test_texts_without_natural_language_answer_zxx(content):
    texts = [
        "SELECT * FROM users;",
        '{"id": 12, "name": "widget", "tags": ["a", "b"]}',
        "name: build\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n",
        "import os\nprint(os.getcwd())",
        "Der schnelle braune Fuchs springt über den faulen Hund.",
    ]
    got = content.predict(texts)
    assert [g["language"]["label"] for g in got] == [cd.ZXX] * 4 + ["de"]
    assert (got[0]["kind"]["label"], got[0]["code_language"]["label"]) == ("code", "sql")
    assert got[2]["kind"]["label"] == "config"
    assert cd.ZXX in content.labels("language")


# ------------------------------------------------------------------ labelling code
def test_generated_secrets_match_the_patterns_that_label_real_text():
    rng = random.Random(0)
    for kind in cd.RISKS:
        for _ in range(50):
            value = cd.gen_secret(kind, rng)
            assert kind in cd.detect_risks(value), (kind, value)


def test_patterns_leave_ordinary_text_and_code_alone():
    clean = [
        "password = getpass.getpass()",
        'if not password:\n    raise ValueError("no password")',
        "Enter your password to unlock the keyring.",
        "version 1.2.3-4 released on 2024-05-01",
        "call +x on the file",
        "token = tokenizer.next()",
        "def secret_key(self):\n    return self._key",
    ]
    for text in clean:
        assert cd.detect_risks(text) == [], text
    assert cd.detect_risks("mail me at anna@example.org") == ["email"]


def test_secrets_go_in_at_line_boundaries_inside_the_windows():
    rng = random.Random(1)
    host = {"text": "\n".join(f"line {i} " + "x" * 60 for i in range(40)), "group": "g"}
    row = cd.with_secrets({**host, "risk": []}, ["jwt", "password"], rng)
    assert row["generated"] and row["group"] == "g"
    assert row["risk"] == ["jwt", "password"]
    assert set(cd.detect_risks(row["text"])) >= {"jwt", "password"}
    assert len(row["text"]) < 1400  # a long host is cut to its head and tail first


def test_locales_map_to_iso_codes():
    assert cd.iso_code("pt_BR") == "pt"
    assert cd.iso_code("sr@latin") == "sr"
    assert cd.iso_code("zh_TW") == "zh"
    assert cd.iso_code("ast") == "ast"  # no ISO 639-1 code: kept as it is


def test_a_scripts_first_line_names_its_code_language():
    assert cd.shebang_language("#!/usr/bin/env python3\nprint(1)") == "python"
    assert cd.shebang_language("#!/usr/bin/python3.11 -u\n") == "python"
    assert cd.shebang_language("#! /bin/sh -e\n") == "shell"
    assert cd.shebang_language("#!/usr/bin/env -S perl -w\n") == "perl"
    assert cd.shebang_language("#!/usr/bin/nickle\n") is None  # not a corpus language
    assert cd.shebang_language("import os\n") is None


def _snippet_tree(root: Path) -> None:
    (root / "db").mkdir(parents=True)
    (root / "db" / "schema.sql").write_text(
        "CREATE TABLE users (id int PRIMARY KEY, name text);\nSELECT * FROM users;\n"
    )
    (root / "doc").mkdir()
    (root / "doc" / "README.md").write_text("# Title\n\nSome words about the tool.\n")
    (root / "ci.yml").write_text("name: build\non: [push]\njobs:\n  test:\n    x: 1\n")
    licensed = "#!/bin/sh\n# Copyright 2020 Someone\n# Licensed under the GPL\nset -e\necho hi\n"
    for name, text in [("tool", licensed), ("plain", "#!/bin/sh\necho nothing to see\n")]:
        (root / name).write_text(text)
        (root / name).chmod(0o755)
    (root / "not-run").write_text(licensed)  # no suffix and not executable: not a script
    (root / "link.sql").symlink_to(root / "db" / "schema.sql")


def test_snippets_are_found_by_type_and_labelled(tmp_path):
    _snippet_tree(tmp_path)
    rows = cd.snippet_rows(
        [tmp_path],
        random.Random(0),
        exclude={tmp_path / "ci.yml"},
        code_groups={f"code:{tmp_path / 'db' / 'schema.sql'}"},
        per_type=10,
        per_file=2,
    )
    by_type = {r["snippet"]: r for r in rows}
    assert set(by_type) == {"sql", "markdown", "licensed_script"}  # ci.yml excluded
    assert {r["source"] for r in rows if r["snippet"] == "sql"} == {f"snippet:{tmp_path / 'db'}"}
    sql = by_type["sql"]
    assert (sql["kind"], sql["code_language"], sql["language"]) == ("code", "sql", cd.ZXX)
    assert sql["group"] == f"code:{tmp_path / 'db' / 'schema.sql'}"  # the code corpus's group
    assert by_type["markdown"]["kind"] == "markup" and by_type["markdown"]["language"] is None
    assert by_type["markdown"]["group"] == f"snippet:{tmp_path / 'doc'}"
    scripts = [r for r in rows if r["snippet"] == "licensed_script"]
    assert {r["group"] for r in scripts} == {f"snippet:{tmp_path / 'tool'}"}  # not 'plain'
    assert scripts[0]["text"].startswith("#!/bin/sh\n# Copyright")  # its head comes first
    assert scripts[0]["code_language"] == "shell" and scripts[0]["kind"] == "code"
    assert len([r for r in rows if r["snippet"] == "sql"]) <= 2  # per_file, and no link
    assert all(len(r["text"].strip()) >= 12 for r in rows)


def test_mixing_in_rows_keeps_the_others_in_order():
    rows = [{"i": i} for i in range(50)]
    more = [{"m": i} for i in range(7)]
    mixed = cd._mix_in(rows, more, random.Random(3))
    assert [r for r in mixed if "i" in r] == rows and [r for r in mixed if "m" in r] == more
    assert mixed[:7] != more  # put in among them, not in front


def test_scores_count_zxx_and_snippets_apart_from_natural_language():
    def row(text, kind, language, snippet=None, code_language="none"):
        return {
            "text": text, "kind": kind, "language": language, "snippet": snippet,
            "code_language": code_language, "generated": False, "risk": [],
        }  # fmt: skip

    rows = [
        row("Ein ganz normaler deutscher Satz.", "prose", "de"),
        row("Une phrase française ordinaire ici.", "prose", "fr"),
        row("SELECT * FROM users;", "code", cd.ZXX, "sql", "sql"),
        row("key: value", "config", cd.ZXX, "yaml"),
        row("2024-01-01 INFO started", "log", cd.ZXX),
    ]
    pred = {
        "language": ["de", "de", cd.ZXX, "en", cd.ZXX],
        "kind": ["prose", "prose", "code", "prose", "log"],
        "code_language": ["none", "none", "cpp", "none", "none"],
    }
    got = cd.score(rows, pred)
    assert got["language_20"] == 0.5 and got["language_all"] == 0.5  # zxx rows not counted
    assert got["zxx"] == pytest.approx(2 / 3)
    assert got["zxx_by_kind"] == {"code": 1.0, "config": 0.0, "log": 1.0}
    assert got["snippets"]["sql"] == {"n": 1, "kind": 1.0, "code_language": 0.0, "zxx": 1.0}
    assert got["snippets"]["yaml"] == {"n": 1, "kind": 0.0, "code_language": 1.0, "zxx": 0.0}


def test_the_language_head_learns_from_capped_natural_and_zxx_rows():
    import build_content_bundle as build

    kinds = ["prose", "code", "code", "log", "code", "config"]
    rows = [
        {"language": cd.ZXX if kind != "prose" else "de", "kind": kind, "i": i}
        for i, kind in enumerate(kinds * 3)
    ] + [{"language": None, "kind": "markup", "i": 18}]
    got = build.head_rows(rows, "language", 2, 2)
    # 2 natural rows; 2 zxx rows of each kind at most; in their order
    assert [r["i"] for r in got] == [0, 1, 2, 3, 5, 6, 9, 11]
    assert [r["i"] for r in build.head_rows(rows, "kind", 3, 0)] == [0, 1, 2]
    assert len(build.head_rows(rows, "kind", None, 0)) == 19


def test_split_is_by_group_and_stable():
    assert cd.split_of("code:foo") == cd.split_of("code:foo")
    parts = [cd.split_of(f"g{i}") for i in range(2000)]
    share = {p: parts.count(p) / len(parts) for p in ("train", "val", "test")}
    assert 0.65 < share["train"] < 0.75 and 0.12 < share["test"] < 0.18


@pytest.mark.heavy
def test_the_build_script_reexports_a_bundle_with_its_tiers(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import stat

    import build_content_bundle as build

    source = builtin_root() / "content"
    with pytest.raises(SystemExit, match="another --out folder"):
        build.main(["--reexport", str(source), "--out", str(source)])
    assert build.main(["--reexport", str(source), "--out", str(tmp_path / "again")]) == 0
    texts = ["def f(): return 1", "Bonjour à tous, voici le programme.", "user@example.org"]
    for tier in (256, 32):
        old = Bundle.load(source, cache=None, tier=tier)
        new = Bundle.load(tmp_path / "again", cache=None, tier=tier)
        assert new.trunk_fingerprint == old.trunk_fingerprint
        assert [p["code_language"]["label"] for p in new.predict(texts)] == [
            p["code_language"]["label"] for p in old.predict(texts)
        ]
    files = [f for f in (tmp_path / "again").rglob("*") if f.is_file()]
    assert not [f for f in files if f.name == ".lock"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o666 & ~umask}  # not 0600
    assert (tmp_path / "again" / "SOURCES.json").read_bytes() == (
        source / "SOURCES.json"
    ).read_bytes()


def test_the_build_script_refuses_bad_head_options_before_reading_any_data(tmp_path):
    import build_content_bundle as build

    source = builtin_root() / "content"
    with pytest.raises(SystemExit, match="--all-rows-heads: unknown heads nope"):
        build.main(["--all-rows-heads", "code_language,nope", "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="--crop-tasks: unknown heads kinds"):
        build.main(["--crop-tasks", "language,kinds", "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="--trunk-from: give another --out folder"):
        build.main(["--trunk-from", str(source), "--out", str(source)])
    with pytest.raises(SystemExit, match="has no SOURCES.json"):
        build.main(["--trunk-from", str(tmp_path), "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------ the texts of issue 34
# ordinary texts the risk head once gave a label with certainty (emoji, a URL with a
# query, digits, dates, versions, fortunes) and their neighbours
ORDINARY = [
    "😀🎉🔥👍",
    "🚀",
    "Great job 👍🎉",
    "https://www.example.com/search?q=manyheads&page=2&lang=en",
    "https://github.com/acme/tool/issues?state=open&sort=updated",
    "1234567890",
    "3.14159",
    "2024-05-01T12:00:03Z",
    "5 Dec 2026",
    "version 1.2.3-4",
    "v2.14.0-rc1",
    "Fixed in commit 3f78f83a9b1c.",
    "550e8400-e29b-41d4-a716-446655440000",
    "Chi dorme non piglia pesci.",
    "Meglio un uovo oggi che una gallina domani.",
    "A journey of a thousand miles begins with a single step.",
    "You will be successful in your work.",
    "Enter your password to continue.",
    "password = ********",
    "(◕‿◕)",
]


@pytest.mark.parametrize("name", ["content", "content-fast"])
def test_ordinary_texts_get_no_risk_label(name):
    bundle = Bundle.load(name, cache=None)
    got = bundle.predict(ORDINARY, scores="none")
    alarms = {
        t: g["risk"]["labels"] for t, g in zip(ORDINARY, got, strict=True) if g["risk"]["labels"]
    }
    assert alarms == {}


JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9l"
    "IiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
SNIPPETS = {
    # text: (kind, code_language, language, risk labels that must be there)
    "1234567890": ({"data"}, "none", cd.ZXX, set()),
    "server:\n  host: 0.0.0.0\n  port: 8080\nlogging:\n  level: info\n": (
        {"config"}, "none", cd.ZXX, set()),
    JWT: ({"data", "config"}, "none", cd.ZXX, {"jwt"}),
    "SELECT id, name FROM users WHERE active = 1 ORDER BY id;": ({"code"}, "sql", cd.ZXX, set()),
    "Contact Anna at anna@example.org or call +1 415-555-0100 for details.": (
        {"prose"}, "none", "en", {"email", "phone"}),
    "desc must be a transliteration descriptor returned by the wctrans(3) function.": (
        {"prose"}, "none", "en", set()),
}  # fmt: skip


def test_short_snippets_get_the_answers_people_expect(content):
    got = content.predict(list(SNIPPETS), scores="none")
    wrong = {}
    for (text, (kinds, code, language, risks)), g in zip(SNIPPETS.items(), got, strict=True):
        answer = (g["kind"]["label"], g["code_language"]["label"], g["language"]["label"])
        if (
            answer[0] not in kinds
            or answer[1:] != (code, language)
            or not risks <= set(g["risk"]["labels"])
        ):
            wrong[text[:40]] = (*answer, g["risk"]["labels"])
    assert wrong == {}


def test_prototypes_and_see_also_lists_are_zxx_and_sentences_about_them_are_not(content):
    texts = [
        "wctrans_t wctrans(const char *name);",
        "int pthread_create(pthread_t *restrict thread, const pthread_attr_t *restrict attr,"
        " void *(*start_routine)(void *), void *restrict arg);",
        "towctrans(3), iswctype(3)",
        "The pthread_create() function starts a new thread in the calling process.",
    ]
    got = [g["language"]["label"] for g in content.predict(texts, scores="none")]
    assert got == [cd.ZXX, cd.ZXX, cd.ZXX, "en"]
