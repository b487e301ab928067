"""The labelled texts behind the built-in ``content`` bundle (read by
``scripts/build_content_bundle.py`` and ``bench/content_eval.py``).

Every row: ``text``, ``group`` (rows of one group stay on one side of a split),
``source``, ``generated`` (bool), and its labels for the four tasks, ``None``
where a row says nothing about a task:

- ``code_language``: the 17 languages of the shared code corpus, ``none`` for
  every text that is not source code;
- ``language``: ISO 639-1 code (where one exists) of prose from the shared
  gettext and Debian-description corpora; ``None`` for code, configs, data...;
- ``kind``: code / prose / markup / config / data / log; code and prose from the
  shared corpora, markup / config / data / log (and more prose) from the real
  files of the Debian system the script runs on;
- ``risk``: a list from private_key, api_token, jwt, password, email, phone.

Real rows are labelled for ``risk`` by strict patterns (:func:`detect_risks`):
a real file that holds a literal password assignment or an email address is a
real positive. Generated rows (``generated: true``) are real rows with one or
two generated secrets (random values in the documented formats) put in at a
line boundary; they keep their host's other labels and group. Every negative
is a real text. Every code text and half of the markup / config / data / log
texts also give a short real piece of themselves (1-3 lines,
:func:`short_piece`), same labels and group, so one line of code is learnt as
code too.

Texts with no natural language (code, config, data, log) answer ``language``
``zxx`` (ISO 639-2 "no linguistic content"); markup is left unlabelled for
``language`` (a manual page or a Markdown file is prose in markup, of any
language). Snippets people paste (:func:`snippet_rows`): pieces of real SQL,
Markdown, YAML files and scripts that open with a licence comment, found on the
system, each row carrying its ``snippet`` type (``None`` for every other row).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import random
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

RISKS = ("private_key", "api_token", "jwt", "password", "email", "phone")
KINDS = ("code", "prose", "markup", "config", "data", "log")
ZXX = "zxx"  # ISO 639-2: no linguistic content
ZXX_KINDS = ("code", "config", "data", "log")  # kinds whose texts answer language zxx

# --------------------------------------------------------------------------- language
# gettext locale -> ISO 639-1 where one exists (else the locale's own code);
# locales in another script than their language's usual one are left out.
SKIP_LOCALES = {"en@shaw", "pa_PK", "tt@iqtelif", "az_IR", "sr@ije"}


def iso_code(lang: str) -> str:
    base = lang.split("@")[0].split("_")[0].split(".")[0].lower()
    return {"nob": "nb", "nno": "nn", "fil": "tl", "kmr": "ku", "no": "nb"}.get(base, base)


def _read(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def prose_rows(shared: Path, rng: random.Random, *, min_texts: int, per_language: int) -> list:
    """Prose with its language: gettext strings (untranslated copies dropped) and their
    English originals, Debian descriptions (a translation equal to the English text
    of its package dropped). Languages with at least ``min_texts`` texts of >= 20
    characters are kept, ``per_language`` texts each at most."""
    by_lang: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen_en: set[str] = set()
    for r in _read(shared / "gettext.jsonl.gz"):
        if r["locale"] in SKIP_LOCALES:
            continue
        text, source = r["text"].strip(), (r.get("source_en") or "").strip()
        lang = iso_code(r["lang"])
        if source and source not in seen_en and len(source) >= 3:
            seen_en.add(source)
            by_lang["en"].append({"text": source, "group": f"gettext:{r['group']}"})
        if lang == "en" or not text or text == source:
            continue
        by_lang[lang].append({"text": text, "group": f"gettext:{r['group']}"})
    english: dict[str, str] = {}
    deb = list(_read(shared / "debdesc.jsonl.gz"))
    for r in deb:
        if r["lang"] == "en":
            english[r["package"]] = r["text"].strip()
    for r in deb:
        lang, text = iso_code(r["lang"]), r["text"].strip()
        if lang != "en" and english.get(r["package"]) == text:
            continue  # an untranslated copy
        by_lang[lang].append({"text": text, "group": f"debdesc:{r['group']}"})
    rows = []
    for lang, items in sorted(by_lang.items()):
        if sum(len(i["text"]) >= 20 for i in items) < min_texts:
            continue
        rng.shuffle(items)
        # half of the texts of >= 20 characters, then the rest in order
        items.sort(key=lambda i: len(i["text"]) < 20)
        for item in items[:per_language]:
            rows.append(
                {
                    **item,
                    "source": item["group"].split(":")[0],
                    "kind": "prose",
                    "code_language": "none",
                    "language": lang,
                }
            )
    return rows


def code_rows(shared: Path, rng: random.Random, *, per_language: int) -> list:
    by_lang: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _read(shared / "code.jsonl.gz"):
        by_lang[r["lang"]].append(r)
    rows = []
    for lang, items in sorted(by_lang.items()):
        rng.shuffle(items)
        for r in items[:per_language]:
            rows.append(
                {
                    "text": r["text"],
                    "group": f"code:{r['group']}",
                    "source": "code",
                    "kind": "code",
                    "code_language": lang,
                    "language": None,
                }
            )
    return rows


# --------------------------------------------------------------------------- system files
MARKUP = {".html", ".htm", ".xhtml", ".md", ".markdown", ".rst", ".xml", ".tex", ".texi", ".sgml"}
CONFIG = {".conf", ".cfg", ".ini", ".toml", ".yaml", ".yml", ".desktop", ".service", ".rules"}
DATA = {".json", ".csv", ".tsv", ".ids", ".tab", ".geojson", ".jsonl"}


def _system_kind(path: Path) -> str | None:
    name, suffix = path.name, path.suffix.lower()
    parts = path.parts
    if suffix == ".gz" and "man" in parts:
        return "markup"  # roff manual pages
    if suffix == ".gz":
        return None
    if suffix in MARKUP:
        return "markup"
    if suffix in DATA:
        return "data"
    if suffix in CONFIG or (parts[:2] == ("/", "etc") and suffix in ("", ".d", ".defs")):
        return "config"
    if suffix == ".log" or (parts[:3] == ("/", "var", "log") and suffix == ""):
        return "log"
    if "common-licenses" in parts:
        return "prose"
    if name in ("README", "AUTHORS", "THANKS", "NEWS") and suffix == "":
        return "prose"
    return None


def _read_text(path: Path, limit: int = 200_000) -> str | None:
    try:
        if path.stat().st_size > 50_000_000:
            return None
        if path.suffix == ".gz":
            with gzip.open(path) as fh:
                raw = fh.read(limit)
        else:
            raw = path.read_bytes()[:limit]
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw[:4096]:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _chunks(text: str, rng: random.Random, count: int) -> list[str]:
    """Up to ``count`` pieces of 150-1,000 characters, cut at line boundaries."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    starts = list(range(len(lines)))
    rng.shuffle(starts)
    used: set[int] = set()
    for start in starts:
        if len(out) >= count:
            break
        if start in used:
            continue
        size = rng.randint(150, 1000)
        piece, i = "", start
        while i < len(lines) and len(piece) < size and i not in used:
            piece += lines[i]
            i += 1
        used.update(range(start, i))
        piece = piece.strip("\n")
        if len(piece.strip()) >= 40:
            out.append(piece[:1500])
    return out


def _files(roots: list[Path]) -> Iterator[Path]:
    """The regular files under ``roots`` (no symbolic links, no hidden or ``__`` folders),
    in a fixed order."""
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in sorted(dirnames) if not d.startswith((".", "__"))]
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if path.is_file() and not path.is_symlink():
                    yield path


def system_files(roots: list[Path]) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = defaultdict(list)
    for path in _files(roots):
        kind = _system_kind(path)
        if kind is not None:
            found[kind].append(path)
    return found


def system_rows(
    roots: list[Path], rng: random.Random, *, per_kind: int, per_file: int
) -> list[dict[str, Any]]:
    rows = []
    for kind, paths in sorted(system_files(roots).items()):
        paths = list(paths)
        rng.shuffle(paths)
        # few files of a kind (logs): more pieces from each
        each = max(per_file, -(-per_kind // max(len(paths), 1)))
        got = 0
        for path in paths:
            if got >= per_kind:
                break
            text = _read_text(path)
            if not text:
                continue
            if text.startswith("#!") and kind == "config":
                continue  # a script under /etc is code
            for n, piece in enumerate(_chunks(text, rng, min(each, per_kind - got))):
                rows.append(
                    {
                        "text": piece,
                        # adjacent pieces of a file share a group
                        "group": f"file:{path}#{n // 10}",
                        "source": f"system:{path.parent}",
                        "kind": kind,
                        "code_language": "none",
                        "language": None,
                    }
                )
                got += 1
    return rows


# --------------------------------------------------------------------------- risk
_KEY = r"[\w.-]*(?:password|passwd|passwort|pwd|secret)[\w.-]*"
_PATTERNS = {
    "private_key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    "api_token": re.compile(
        r"\b(?:AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{60,}"
        r"|xox[abprs]-[A-Za-z0-9-]{10,}|sk_(?:live|test)_[A-Za-z0-9]{20,}"
        r"|sk-(?:proj-)?[A-Za-z0-9_-]{32,}|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20})"
        # a hex key or an AWS secret access key assigned to a key-like name
        r"|(?i:\b[\w-]*(?:api[_-]?key|secret[_-]?key|access[_-]?key|app[_-]?secret|auth[_-]?token"
        r"|client[_-]?secret)[\"']?\s*[:=]\s*[\"']?(?:[0-9a-f]{32,64}\b|[A-Za-z0-9/+]{40}(?![\w/+])))"
    ),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"),
    "password": re.compile(
        # a literal value assigned to a password-like key: quoted (6+ characters),
        # unquoted (6+ characters with a digit or symbol), XML element, or --flag value
        rf"(?i)\b{_KEY}[\"']?\s*(?:=|:|=>)\s*[\"'](?![$%]|\*+[\"'])([^\"'\s{{}}<>()]{{6,}})[\"']"
        rf"|\b{_KEY}\s*(?:=|:)\s*(?=[^\s\"']*[\d!#%&*@^~+])(?![$%]|\*+(?:\s|$))[^\s\"'{{}}<>()\[\],;]{{6,}}(?=\s|$)"
        rf"|<(?P<tag>{_KEY})>[^<\s]{{6,}}</(?P=tag)>"
        rf"|--{_KEY}[ =][^\s\"'$-][^\s\"']{{5,}}"
        # credentials in a URL: scheme://user:password@host
        r"|\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?![$%{])[^\s:/@]{6,}@[\w.-]+"
    ),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,12}\b"),
    "phone": re.compile(
        # international (+CC ...), or North American (NNN) NNN-NNNN / NNN.NNN.NNNN
        r"(?<![\w.+])\+\d{1,3}[ .-]?\(?\d{1,4}\)?(?:[ .-]\d{2,8}){1,4}(?![\w.])"
        r"|(?<![\w.])\(\d{3}\) \d{3}-\d{4}(?![\w.])|(?<![\w.])\d{3}\.\d{3}\.\d{4}(?![\w.])"
    ),
}


def detect_risks(text: str) -> list[str]:
    """The risks strict patterns find in a real text (its labels)."""
    return [name for name in RISKS if _PATTERNS[name].search(text)]


_WORDS = [
    "river", "blue", "tiger", "Maple", "sun", "Orbit", "delta", "stone", "Echo", "pixel",
    "forest", "cobalt", "Lima", "north", "quartz",
]  # fmt: skip
_NAMES = ["anna", "j.smith", "li.wei", "m_garcia", "olga", "admin", "kim99", "p.dubois"]
_DOMAINS = [
    "example.com", "mail.example.org", "corp.example.net", "uni-example.de", "example.co.uk",
]  # fmt: skip


_HEX_KEY_NAMES = [
    "api_key", "API_KEY", "apiKey", "apikey", "secret_key", "SECRET_KEY", "access_key",
    "x-api-key", "X-API-Key", "auth_token", "AUTH_TOKEN", "app_secret", "client_secret",
]  # fmt: skip


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def gen_secret(kind: str, rng: random.Random) -> str:
    """One generated value of ``kind`` (random, in its documented format)."""
    alnum = string.ascii_letters + string.digits
    if kind == "private_key":
        label = rng.choice(
            ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"]
        )
        body = base64.b64encode(rng.randbytes(rng.choice([48, 96, 180, 400]))).decode()
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"
    if kind == "api_token":
        form = rng.randrange(9)
        if form == 0:
            return "AKIA" + _rand(rng, string.ascii_uppercase + string.digits, 16)
        if form == 1:
            return rng.choice(["ghp_", "gho_", "ghs_", "ghu_", "ghr_"]) + _rand(rng, alnum, 36)
        if form == 2:
            numbers = "-".join(_rand(rng, string.digits, 12) for _ in range(2))
            return f"xoxb-{numbers}-{_rand(rng, alnum, 24)}"
        if form == 3:
            return rng.choice(["sk_live_", "sk_test_"]) + _rand(rng, alnum, 24)
        if form == 4:
            return "sk-" + _rand(rng, alnum + "-_", 48)
        if form == 5:
            return "AIza" + _rand(rng, alnum + "-_", 35)
        if form == 6:
            return "glpat-" + _rand(rng, alnum + "-_", 20)
        if form == 7:
            return "github_pat_" + _rand(rng, alnum + "_", 82)
        name = rng.choice(_HEX_KEY_NAMES)  # a hex key assigned to a key-like name
        value = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([32, 40, 64])))
        return rng.choice([f"{name}={value}", f'{name} = "{value}"', f"{name}: {value}"])
    if kind == "jwt":
        header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
        payload = {
            "sub": str(rng.randrange(10**6)),
            "name": rng.choice(_NAMES),
            "iat": 1500000000 + rng.randrange(10**8),
        }
        if rng.random() < 0.5:
            payload["role"] = rng.choice(["admin", "user", "service"])
        parts = [_b64url(json.dumps(header).encode()), _b64url(json.dumps(payload).encode())]
        return ".".join([*parts, _b64url(rng.randbytes(rng.choice([32, 64, 256])))])
    if kind == "password":
        value = rng.choice(
            [
                _rand(rng, alnum, rng.randint(8, 20)) + str(rng.randint(0, 99)),
                rng.choice(_WORDS) + str(rng.randint(10, 9999)) + rng.choice("!#@*$."),
                _rand(rng, alnum + "!#%&*-_", rng.randint(10, 32)),
            ]
        )
        key = rng.choice(
            ["password", "PASSWORD", "db_password", "DB_PASSWORD", "passwd", "admin_password",
             "secret", "client_secret", "MYSQL_ROOT_PASSWORD", "pwd", "smtp_password",
             "spring.datasource.password", "db.password", "mail.smtp.password"]
        )  # fmt: skip
        if rng.random() < 0.12:  # credentials in a connection URL
            scheme = rng.choice(["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "amqp",
                                 "https", "ftp", "smtp"])  # fmt: skip
            plain = "".join(c for c in value if c not in "@/:%$") or "pw" + value
            user = rng.choice(_NAMES).replace(".", "")
            host = rng.choice(["db", "localhost", "db.internal", "10.0.0.5", "cache"])
            return f"{scheme}://{user}:{plain}@{host}:{rng.randint(1000, 9999)}/app"
        return rng.choice(
            [
                f'{key} = "{value}"',
                f"{key}={value}",
                f"{key}: {value}",
                f'"{key}": "{value}"',
                f"{key} = '{value}'",
                f'$this->{key} = "{value}";',
                f'export {key.upper()}="{value}"',
                f"<{key}>{value}</{key}>",
                f"--{key.lower()} {value}",
            ]
        )
    if kind == "email":
        name = rng.choice(_NAMES) + rng.choice(["", str(rng.randint(1, 99))])
        return f"{name}@{rng.choice(_DOMAINS)}"
    if kind == "phone":
        d = string.digits
        return rng.choice(
            [
                f"+1 {_rand(rng, d, 3)}-555-{_rand(rng, d, 4)}",
                f"({_rand(rng, '23456789', 1)}{_rand(rng, d, 2)}) 555-{_rand(rng, d, 4)}",
                f"+44 20 {_rand(rng, d, 4)} {_rand(rng, d, 4)}",
                f"+49 30 {_rand(rng, d, 8)}",
                f"+33 1 {' '.join(_rand(rng, d, 2) for _ in range(4))}",
                f"+81 3-{_rand(rng, d, 4)}-{_rand(rng, d, 4)}",
                f"+91 {_rand(rng, '6789', 1)}{_rand(rng, d, 4)} {_rand(rng, d, 5)}",
                f"{_rand(rng, '23456789', 1)}{_rand(rng, d, 2)}.555.{_rand(rng, d, 4)}",
            ]
        )
    raise ValueError(kind)


_LEADS = {
    "email": ["", "Contact: ", "mailto:", "Reply to ", "From: ", "# Maintainer: ", "email = "],
    "phone": ["", "Tel: ", "Phone: ", "Call ", "phone = ", "+ ", "mobile: "],
    "api_token": ["", "token = ", "API_KEY=", "Authorization: Bearer ", "api_key: ", '"key": '],
    "jwt": ["", "Authorization: Bearer ", "token: ", "jwt=", "Cookie: session="],
    "private_key": [""],
    "password": [""],
}


def with_secrets(host: dict[str, Any], kinds: list[str], rng: random.Random) -> dict[str, Any]:
    """``host`` with generated secrets of ``kinds`` put in at line boundaries, kept
    within the text's first or last 400 characters (inside the trunk's head + tail
    windows)."""
    text = host["text"]
    if len(text) > 900:
        text = text[:450] + "\n" + text[-450:]
    lines = text.split("\n")
    for kind in kinds:
        line = rng.choice(_LEADS[kind]) + gen_secret(kind, rng)
        if kind in ("email", "phone", "api_token") and rng.random() < 0.4 and lines:
            i = rng.randrange(len(lines))  # inside a line of prose or code
            words = lines[i].split(" ")
            j = rng.randrange(len(words) + 1)
            lines[i] = " ".join([*words[:j], line, *words[j:]])
        else:
            lines.insert(rng.randrange(len(lines) + 1), line)
    out = "\n".join(lines)
    return {
        **host,
        "text": out,
        "generated": True,
        "risk": sorted(set(kinds) | set(detect_risks(host["text"]))),
    }


def short_piece(row: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """A real short piece of ``row`` (1-3 consecutive non-blank lines, 8-200 characters)
    with its labels and group: people also ask about one line of code or config."""
    lines = [x for x in row["text"].split("\n") if len(x.strip()) >= 4]
    if not lines:
        return None
    start = rng.randrange(len(lines))
    piece = "\n".join(lines[start : start + rng.choice([1, 1, 2, 3])]).strip()[:200]
    if len(piece) < 8 or piece == row["text"].strip():
        return None
    return {**row, "text": piece}


# --------------------------------------------------------------------------- snippets
SNIPPET_ROOTS = ["/usr/share", "/usr/lib", "/usr/bin", "/usr/sbin", "/usr/local", "/etc", "/opt"]
SNIPPET_TYPES = ("sql", "markdown", "yaml", "licensed_script")
# each snippet type's labels (a licensed script's code_language comes from its #! line)
SNIPPET_LABELS: dict[str, dict[str, Any]] = {
    "sql": {"kind": "code", "code_language": "sql", "language": ZXX},
    "markdown": {"kind": "markup", "code_language": "none", "language": None},
    "yaml": {"kind": "config", "code_language": "none", "language": ZXX},
    "licensed_script": {"kind": "code", "language": ZXX},
}
_SHEBANG_LANGUAGES = {
    "python": "python", "sh": "shell", "bash": "shell", "dash": "shell", "ksh": "shell",
    "zsh": "shell", "perl": "perl", "ruby": "ruby", "tclsh": "tcl", "wish": "tcl",
    "node": "javascript", "nodejs": "javascript",
}  # fmt: skip
_SCRIPT_SUFFIXES = {"", ".py", ".sh", ".bash", ".pl", ".rb", ".tcl", ".js"}
_LICENCE = re.compile(
    r"(?i)licen[cs]e|copyright|GNU (?:Lesser )?General Public|Permission is hereby granted"
)


def shebang_language(text: str) -> str | None:
    """The code language of a script's ``#!`` line (``#!/usr/bin/env python3`` ->
    python), ``None`` when it names no interpreter of the code corpus."""
    if not text.startswith("#!"):
        return None
    words = text[2:].split("\n", 1)[0].split()
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words:
        return None
    name = re.sub(r"[\d.]+$", "", words[0].rsplit("/", 1)[-1])
    return _SHEBANG_LANGUAGES.get(name)


def _snippet_type(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix == ".sql":
        return "sql"
    if suffix in (".md", ".markdown"):
        return "markdown"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    # a script: a file with a script's suffix, or an executable one without a suffix
    if suffix in _SCRIPT_SUFFIXES and (suffix or os.access(path, os.X_OK)):
        try:
            with open(path, "rb") as fh:
                if fh.read(2) == b"#!":
                    return "licensed_script"  # if its head names a licence (checked on read)
        except OSError:
            return None
    return None


def snippet_files(roots: list[Path], exclude: set[Path]) -> dict[str, list[Path]]:
    """Files of each snippet type under ``roots`` (symbolic links and ``exclude`` left out)."""
    found: dict[str, list[Path]] = defaultdict(list)
    for path in _files(roots):
        kind = None if path in exclude else _snippet_type(path)
        if kind is not None:
            found[kind].append(path)
    return found


def _piece(lines: list[str], start: int, count: int) -> str:
    return "\n".join(lines[start : start + count]).strip("\n")[:1500]


def snippet_pieces(text: str, kind: str, rng: random.Random, count: int) -> list[str]:
    """Up to ``count`` pieces of a file as people paste them: 1-20 consecutive lines
    (at least 12 non-blank characters); a licensed script's first piece is its head,
    the ``#!`` line and licence comment with a few lines after it."""
    lines = text.splitlines()
    out: list[str] = []
    if kind == "licensed_script":
        out.append(_piece(lines, 0, rng.randint(6, 40)))
    for _ in range(4 * count):
        if len(out) >= count or not lines:
            break
        piece = _piece(lines, rng.randrange(len(lines)), rng.choice([1, 2, 3, 5, 8, 12, 20]))
        if len(piece.strip()) >= 12 and piece not in out:
            out.append(piece)
    return out


def _snippet_group(path: Path, kind: str, code_groups: set[str]) -> str:
    """A snippet's group: its file's group in the code corpus when the file is there
    (so a file's rows stay on one side of the split whichever gatherer read them),
    else its folder (the YAML or Markdown files of one folder are alike), else the file."""
    if f"code:{path}" in code_groups:
        return f"code:{path}"
    if kind in ("yaml", "markdown"):
        return f"snippet:{path.parent}"
    return f"snippet:{path}"


def snippet_rows(
    roots: list[Path],
    rng: random.Random,
    *,
    exclude: set[Path],
    code_groups: set[str],
    per_type: int,
    per_file: int,
) -> list[dict[str, Any]]:
    """Snippets of real SQL, Markdown, YAML files and scripts opening with a licence
    comment (at most ``per_type`` rows of each, ``per_file`` of a file), labelled by
    their type (:data:`SNIPPET_LABELS`)."""
    rows = []
    for kind, paths in sorted(snippet_files(roots, exclude).items()):
        paths = list(paths)
        rng.shuffle(paths)
        got = 0
        for path in paths:
            if got >= per_type:
                break
            text = _read_text(path)
            if not text or not text.strip():
                continue
            labels = dict(SNIPPET_LABELS[kind])
            if kind == "licensed_script":
                language = shebang_language(text)
                if language is None or not _LICENCE.search(text[:3000]):
                    continue
                labels["code_language"] = language
            for piece in snippet_pieces(text, kind, rng, min(per_file, per_type - got)):
                rows.append(
                    {
                        "text": piece,
                        "group": _snippet_group(path, kind, code_groups),
                        "source": f"snippet:{path.parent}",
                        "snippet": kind,
                        **labels,
                    }
                )
                got += 1
    return rows


def _mix_in(rows: list[dict[str, Any]], more: list[dict[str, Any]], rng: random.Random) -> list:
    """``rows`` with ``more`` put in at random places (``rows`` keep their order)."""
    at = set(rng.sample(range(len(rows) + len(more)), len(more)))
    a, b = iter(rows), iter(more)
    return [next(b) if i in at else next(a) for i in range(len(rows) + len(more))]


# --------------------------------------------------------------------------- scores
def answers_to_labels(answers: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """A bundle's answers as one list of labels per head (a list of labels for risk)."""
    out = {n: [a[n]["label"] for a in answers] for n in ("code_language", "language", "kind")}
    out["risk"] = [a["risk"]["labels"] for a in answers]
    return out


def _accuracy(rows: list[dict[str, Any]], pred: list[Any], field: str, idx: list[int]) -> Any:
    if not idx:
        return None
    return sum(pred[i] == rows[i][field] for i in idx) / len(idx)


def score(rows: list[dict[str, Any]], pred: dict[str, list[Any]]) -> dict[str, Any]:
    """Test scores of one system. ``pred``: per head, one answer per row (a label; a
    list of labels for risk); heads left out are not scored.

    ``language_20`` / ``language_all``: accuracy on real (not generated: a generated
    row is mostly its secret) natural-language rows of >= 20 characters / all;
    ``zxx``: the share of code, config, data and log rows answered ``zxx`` (all of
    them, generated and short pieces too), ``zxx_by_kind`` per kind; ``snippets``:
    per snippet type, the accuracy of each head that labels it and its ``zxx`` share."""
    out: dict[str, Any] = {}
    everyone = list(range(len(rows)))
    if "code_language" in pred:
        p = pred["code_language"]
        code = [i for i, r in enumerate(rows) if r["kind"] == "code"]
        out["code_language"] = _accuracy(rows, p, "code_language", everyone)
        out["code_language_on_code"] = _accuracy(rows, p, "code_language", code)
    if "language" in pred:
        p = pred["language"]
        real = [
            i for i, r in enumerate(rows) if r["language"] not in (None, ZXX) and not r["generated"]
        ]
        out["language_20"] = _accuracy(
            rows, p, "language", [i for i in real if len(rows[i]["text"]) >= 20]
        )
        out["language_all"] = _accuracy(rows, p, "language", real)
        bare = [i for i, r in enumerate(rows) if r["kind"] in ZXX_KINDS]
        out["zxx"] = sum(p[i] == ZXX for i in bare) / max(len(bare), 1)
        out["zxx_by_kind"] = {
            kind: sum(p[i] == ZXX for i in of) / len(of)
            for kind in ZXX_KINDS
            if (of := [i for i in bare if rows[i]["kind"] == kind])
        }
    if "kind" in pred:
        out["kind"] = _accuracy(rows, pred["kind"], "kind", everyone)
    if "risk" in pred:
        from sklearn.metrics import f1_score

        want = np.array([[k in r["risk"] for k in RISKS] for r in rows])
        got = np.array([[k in p for k in RISKS] for p in pred["risk"]])
        out["risk_micro_f1"] = f1_score(want, got, average="micro", zero_division=0)
        out["risk_f1"] = {
            k: f1_score(want[:, j], got[:, j], zero_division=0) for j, k in enumerate(RISKS)
        }
        clean = [i for i, r in enumerate(rows) if not r["generated"] and not r["risk"]]
        out["risk_false_alarms_real"] = float(np.mean([bool(pred["risk"][i]) for i in clean]))
    snippets: dict[str, Any] = {}
    for kind in SNIPPET_TYPES:
        of = [i for i, r in enumerate(rows) if r.get("snippet") == kind]
        if not of:
            continue
        got_type: dict[str, Any] = {"n": len(of)}
        for head in ("kind", "code_language"):
            if head in pred:
                got_type[head] = _accuracy(rows, pred[head], head, of)
        if "language" in pred and SNIPPET_LABELS[kind]["language"] == ZXX:
            got_type["zxx"] = sum(pred["language"][i] == ZXX for i in of) / len(of)
        snippets[kind] = got_type
    if snippets:
        out["snippets"] = snippets
    return out


# --------------------------------------------------------------------------- all of it
def collect(
    shared: Path,
    system_roots: list[Path],
    *,
    seed: int = 0,
    code_per_language: int = 1500,
    prose_per_language: int = 1500,
    min_language_texts: int = 1500,
    system_per_kind: int = 2500,
    risk_fraction: float = 0.2,
    short_fraction: float = 0.5,
    short_code_fraction: float = 1.0,
    snippet_roots: list[Path] | None = None,
    snippets_per_type: int = 2500,
    more: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every labelled row (see the module's text). The rows from the shared corpora
    and ``system_roots`` come first in a fixed order for one ``seed``; snippets found
    under ``snippet_roots`` are put in among them with a generator of their own, so
    adding them moves no other row; so are ``more`` rows last
    (``content_shapes.more_rows``: manual pages, fortunes, generated shapes)."""
    rng = random.Random(seed)
    rows = code_rows(shared, rng, per_language=code_per_language)
    rows += prose_rows(shared, rng, min_texts=min_language_texts, per_language=prose_per_language)
    rows += system_rows(system_roots, rng, per_kind=system_per_kind, per_file=3)
    # short real pieces: of every code text (a line of code is a common question),
    # of a share of the other non-prose texts
    shorts = [
        short_piece(r, rng)
        for r in rows
        if r["kind"] != "prose"
        and rng.random() < (short_code_fraction if r["kind"] == "code" else short_fraction)
    ]
    rows += [r for r in shorts if r is not None]
    for r in rows:
        r["generated"] = False
        r["risk"] = detect_risks(r["text"])
    hosts = rng.sample(rows, int(len(rows) * risk_fraction))
    for host in hosts:
        kinds = rng.sample(RISKS, rng.choice([1, 1, 1, 2]))
        rows.append(with_secrets(host, kinds, rng))
    rng.shuffle(rows)
    for r in rows:
        r["snippet"] = None
    if snippet_roots:
        snippet_rng = random.Random(f"{seed}:snippets")
        snippets = snippet_rows(
            snippet_roots,
            snippet_rng,
            exclude={p for paths in system_files(system_roots).values() for p in paths},
            code_groups={r["group"] for r in rows if r["source"] == "code"},
            per_type=snippets_per_type,
            per_file=5,
        )
        for r in snippets:
            r["generated"] = False
            r["risk"] = detect_risks(r["text"])
        snippet_rng.shuffle(snippets)  # they come grouped by type
        rows = _mix_in(rows, snippets, snippet_rng)
    rows = _mix_in(rows, list(more or []), random.Random(f"{seed}:more:mix"))
    for r in rows:
        if r["kind"] in ZXX_KINDS:
            r["language"] = ZXX
    return rows


def split_of(group: str, seed: int = 0) -> str:
    """train (70%) / val (15%) / test (15%), by a hash of the group."""
    h = int(hashlib.sha256(f"{seed}:{group}".encode()).hexdigest()[:8], 16) % 100
    return "train" if h < 70 else "val" if h < 85 else "test"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by split, source, label; which rows are generated."""
    out: dict[str, Any] = {"rows": len(rows), "generated": sum(r["generated"] for r in rows)}
    for key in ("kind", "code_language", "language"):
        out[key] = dict(Counter(str(r[key]) for r in rows if r[key] is not None).most_common())
    out["risk_real"] = dict(Counter(k for r in rows if not r["generated"] for k in r["risk"]))
    out["risk_generated"] = dict(Counter(k for r in rows if r["generated"] for k in r["risk"]))
    out["snippet"] = dict(Counter(r["snippet"] for r in rows if r.get("snippet")))
    out["source"] = dict(Counter(r["source"].split(":")[0] for r in rows))
    out["split"] = dict(Counter(split_of(r["group"]) for r in rows))
    return out
