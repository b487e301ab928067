"""The rows behind the built-in `content` bundle that come from manual pages, fortunes
and generated shapes (scripts/content_shapes.py)."""

from __future__ import annotations

import gzip
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import content_data as cd  # noqa: E402
import content_shapes as cs  # noqa: E402

# 80 files of the shared code corpus and 300 kaomoji (no test needs ../shared)
SAMPLE = Path(__file__).resolve().parent / "shapes"

PAGE = r""".\" Copyright (c) someone
.TH WCTRANS 3 2022-12-15 "Linux man-pages 6.03"
.SH NAME
wctrans \- wide-character translation mapping
.SH SYNOPSIS
.nf
.B #include <wctype.h>
.PP
.BI "wctrans_t wctrans(const char *" name );
.fi
.SH DESCRIPTION
The
.I desc
argument must be a transliteration descriptor returned by the
.BR wctrans (3)
function.
.PP
It returns \fBzero\fP on success \- and \(lqminus one\(rq otherwise.
.SH SEE ALSO
.BR towctrans (3),
.BR iswctype (3)
"""


def _gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(text)


def test_a_manual_page_is_read_as_paragraphs_a_synopsis_and_see_also():
    blocks = cs.man_sections(PAGE)
    text: dict[tuple[str, bool], list[str]] = {}
    for section, lines, nofill in blocks:
        text.setdefault((section, nofill), []).append(" ".join(" ".join(lines).split()))
    assert text[("DESCRIPTION", False)] == [
        "The desc argument must be a transliteration descriptor returned by the wctrans(3)"
        " function.",
        'It returns zero on success - and "minus one" otherwise.',
    ]
    assert "wctrans_t wctrans(const char *name);" in text[("SYNOPSIS", True)]
    assert text[("SEE ALSO", False)] == ["towctrans(3), iswctype(3)"]
    assert (
        cs.roff_text(r"It returns \fBzero\fP \- and \(lqone\(rq") == 'It returns zero - and "one"'
    )


def test_manual_pages_give_prose_by_language_and_zxx_for_prototypes(tmp_path):
    _gz(tmp_path / "man" / "man3" / "wctrans.3.gz", PAGE)
    german = PAGE.replace("The\n.I desc\nargument must be", "Das Argument\n.I desc\nmuss ein")
    _gz(tmp_path / "man" / "de" / "man3" / "wctrans.3.gz", german)
    (tmp_path / "man" / "man3" / "alias.3.gz").symlink_to(
        tmp_path / "man" / "man3" / "wctrans.3.gz"
    )
    rows = cs.man_rows(tmp_path / "man", random.Random(0), per_language={"en": 10, "*": 10})
    got = Counter((r["language"], r["kind"], r["code_language"]) for r in rows)
    assert got[("en", "prose", "none")] == 2 and got[("de", "prose", "none")] == 2
    assert got[(cd.ZXX, "code", "c")] == 1 and got[(cd.ZXX, "data", "none")] == 1  # English only
    assert {r["group"] for r in rows} == {"man:wctrans"}  # a page's languages stay together
    assert any("returned by the wctrans(3) function." in r["text"] for r in rows)


def test_fortunes_are_split_and_take_their_language_from_the_folder(tmp_path):
    (tmp_path / "it").mkdir()
    (tmp_path / "off").mkdir()
    (tmp_path / "wisdom").write_text("A first fortune, long enough.\n%\nA second one, long too.\n")
    (tmp_path / "wisdom.dat").write_bytes(b"\x00\x01")
    (tmp_path / "it" / "proverbi").write_text("Chi va piano va sano e va lontano.\n%\n")
    (tmp_path / "off" / "rude").write_text("Something left out of every row.\n")
    (tmp_path / "leggi").write_text("La legge di Murphy vale sempre.\n")
    rows = cs.fortune_rows(random.Random(0), per_language=10, root=tmp_path)
    assert sorted((r["language"], r["text"]) for r in rows) == [
        ("en", "A first fortune, long enough."),
        ("en", "A second one, long too."),
        ("it", "Chi va piano va sano e va lontano."),
        ("it", "La legge di Murphy vale sempre."),
    ]
    assert {r["kind"] for r in rows} == {"prose"}


def test_masks_and_hex_keys_are_labelled_by_the_strict_patterns():
    for text in ("password = ********", "secret: *****", 'password = "********"'):
        assert cd.detect_risks(text) == [], text
    assert cd.detect_risks("API_KEY=0123456789abcdef0123456789abcdef") == ["api_token"]
    assert "api_token" in cd.detect_risks(
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    assert cd.detect_risks("Checksum 0123456789abcdef0123456789abcdef matches.") == []


@pytest.fixture(scope="module")
def shapes():
    return cs.shape_rows(SAMPLE, random.Random(0), per_shape=60)


def test_ordinary_shapes_carry_no_risk_and_secret_shapes_carry_theirs(shapes):
    names = Counter(r["shape"] for r in shapes)
    for name in cs.ORDINARY:
        assert 0 < names[name] <= 60, name
    for r in shapes:
        if r["shape"] in cs.ORDINARY:
            assert r["risk"] == [], r
        elif r["shape"] == "contact":  # a number before a full stop is not one
            assert "email" in r["risk"] and set(r["risk"]) <= {"email", "phone"}, r
        else:
            assert r["shape"].split("-")[0] in r["risk"], r
    contact = [r for r in shapes if r["shape"] == "contact"]
    assert sum("phone" in r["risk"] for r in contact) >= 0.75 * len(contact)
    assert all(r["generated"] for r in shapes)
    assert len({r["group"] for r in shapes if r["shape"] == "emoji"}) == 2  # groups of 50


def test_short_snippets_carry_the_labels_people_expect(shapes):
    def labels(name):
        return {
            (r["kind"], r["code_language"], r["language"]) for r in shapes if r["shape"] == name
        }

    assert labels("number") == {("data", "none", cd.ZXX)}
    assert labels("sql_line") == {("code", "sql", cd.ZXX)}
    assert labels("kv_config") == {("config", "none", cd.ZXX)}
    assert labels("contact") == {("prose", "none", "en")}
    assert labels("jwt-alone") == {("data", "none", cd.ZXX)}
    assert any(r["text"] == "1234567890" for r in shapes if r["shape"] == "number")


def test_the_build_refuses_a_start_that_it_did_not_build(tmp_path):
    import build_content_bundle as build

    with pytest.raises(SystemExit, match="--start: .* has no SOURCES.json"):
        build.main(["--start", str(tmp_path), "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def test_rows_only_needs_a_file_for_the_rows(tmp_path):
    import build_content_bundle as build

    with pytest.raises(SystemExit, match="--rows-only: give --rows PATH"):
        build.main(["--rows-only", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def test_collect_keeps_the_more_rows_beside_the_snippets(monkeypatch, tmp_path):
    """The manual pages, fortunes and shapes given as ``more`` are in the rows once each,
    and so is each snippet, when snippets are found too."""

    def row(text: str, kind: str = "prose") -> dict:
        return {"text": text, "group": text, "source": "t", "kind": kind,
                "code_language": "none", "language": "en"}  # fmt: skip

    monkeypatch.setattr(cd, "code_rows", lambda *a, **k: [row(f"code {i}") for i in range(20)])
    monkeypatch.setattr(cd, "prose_rows", lambda *a, **k: [row(f"prose {i}") for i in range(20)])
    monkeypatch.setattr(cd, "system_rows", lambda *a, **k: [])
    monkeypatch.setattr(cd, "system_files", lambda roots: {})
    snippets = [row(f"snippet {i}") for i in range(7)]
    monkeypatch.setattr(cd, "snippet_rows", lambda *a, **k: [dict(r) for r in snippets])
    more = [row(f"man page {i}") for i in range(5)]
    rows = cd.collect(tmp_path, [], snippet_roots=[tmp_path], more=more, short_fraction=0.0,
                      short_code_fraction=0.0, risk_fraction=0.0)  # fmt: skip
    texts = Counter(r["text"] for r in rows)
    assert all(texts[r["text"]] == 1 for r in [*more, *snippets])
    assert len(rows) == 20 + 20 + 7 + 5
