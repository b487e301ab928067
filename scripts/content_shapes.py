"""More rows for the built-in ``content`` bundle (read by ``scripts/content_data.py``):
real prose of manual pages and fortunes, and the short shapes people paste.

- :func:`man_rows`: paragraphs of the roff manual pages on the system (English
  under ``man1``..``man8``, other languages under ``man/<lang>/``) as prose with
  their language; the C prototypes of a page's SYNOPSIS (sections 2 and 3) as C
  code, and its SEE ALSO list as data, both ``zxx``. A sentence naming a function
  (``... returned by the wctrans(3) function.``) is prose of its language.
- :func:`fortune_rows`: the fortunes on the system (``/usr/share/games/fortunes``),
  by language, as prose.
- :func:`shape_rows`: generated short texts of many shapes with their labels.
  Ordinary ones (emoji, URLs with queries, numbers, dates, versions, hashes and
  UUIDs in prose and in data, identifiers, paths, base64 in data files,
  placeholders where a secret would go, sentences about passwords) carry no risk;
  secrets in their usual shapes (a key alone, on a config or ``.env`` line, in a
  JSON document, in a sentence; AWS key pairs, hex API keys) carry theirs; short
  snippets (one line of SQL, a few lines of YAML, a sentence with an e-mail
  address and a phone number) carry their kind and language. Every risk label is
  the strict patterns' (:func:`content_data.detect_risks`), so a shape that happens
  to hold an e-mail address is labelled so.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import string
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import content_data as cd

# --------------------------------------------------------------------------- manual pages
_ESCAPES = [
    (re.compile(r"\\f(?:\[[^]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\*(?:\[[^]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\((?:em|en)"), "-"),
    (re.compile(r"\\\((?:lq|rq|dq)"), '"'),
    (re.compile(r"\\\((?:aq|oq|cq)"), "'"),
    (re.compile(r"\\\(..|\\\[[^]]*\]"), ""),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[e\\]"), r"\\"),
    (re.compile(r"\\[ ~0|^&:%]"), lambda m: " " if m.group(0)[1] in " ~0" else ""),
    (re.compile(r"\\[sv]-?\d+"), ""),
    (re.compile(r"\\c$"), ""),
]
_FONT_MACROS = {".B", ".I", ".SM", ".SB"}
_ALTERNATING = {".BR", ".RB", ".BI", ".IB", ".IR", ".RI"}
_BREAKS = {".PP", ".P", ".LP", ".TP", ".IP", ".HP", ".SS", ".sp", ".br", ".RS", ".RE", ".TQ"}


def roff_text(line: str) -> str:
    """A roff line as plain text (escapes and font changes taken out)."""
    for pattern, repl in _ESCAPES:
        line = pattern.sub(repl, line)
    return line


def _macro_args(rest: str) -> list[str]:
    return [a[1:-1] if a.startswith('"') else a for a in re.findall(r'"[^"]*"|\S+', rest)]


def man_sections(source: str) -> list[tuple[str, list[str], bool]]:
    """A roff page as ``(section, lines, preformatted)`` blocks: a block ends at a
    paragraph macro, a new section or a change between filled and ``.nf`` text."""
    blocks: list[tuple[str, list[str], bool]] = []
    section, lines, nofill = "", [], False

    def close() -> None:
        if lines:
            blocks.append((section, list(lines), nofill))
        lines.clear()

    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"")) or raw.strip() in (".", "'"):
            continue
        if raw.startswith((".", "'")):
            macro, _, rest = raw.partition(" ")
            if macro == ".SH":
                close()
                section = " ".join(_macro_args(rest)).upper()
            elif macro in (".nf", ".EX"):
                close()
                nofill = True
            elif macro in (".fi", ".EE"):
                close()
                nofill = False
            elif macro in _FONT_MACROS:
                lines.append(roff_text(" ".join(_macro_args(rest))))
            elif macro in _ALTERNATING:
                lines.append(roff_text("".join(_macro_args(rest))))
            elif macro in _BREAKS:
                close()
            continue
        lines.append(roff_text(raw))
    close()
    return blocks


def _man_language(path: Path) -> str | None:
    parts = path.parts
    i = parts.index("man")
    sub = parts[i + 1]
    if sub.startswith("man"):
        return "en"
    return cd.iso_code(sub) if "." not in sub else None


def man_rows(root: Path, rng: random.Random, *, per_language: dict[str, int]) -> list[dict]:
    """Rows of the manual pages under ``root`` (see the module's text): at most
    ``per_language[lang]`` prose paragraphs (``per_language["*"]`` for a language
    not named) and 1,500 prototypes and SEE ALSO lists, a few of each page."""
    pages: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.gz")):
        if path.is_symlink() or not path.is_file():
            continue
        lang = _man_language(path)
        if lang:
            pages[lang].append(path)
    rows: list[dict] = []
    bare = 0
    for lang, paths in sorted(pages.items()):
        rng.shuffle(paths)
        most, got = per_language.get(lang, per_language["*"]), 0
        for path in paths:
            if got >= most and (lang != "en" or bare >= 1500):
                break
            text = cd._read_text(path)
            if not text or text.lstrip().startswith(".so "):
                continue
            group = f"man:{path.name.split('.')[0]}"
            chapter = path.parent.name[3:4]
            paragraphs, extra = [], []
            for section, lines, nofill in man_sections(text):
                body = "\n".join(x for x in lines if x.strip()).strip()
                if not body:
                    continue
                if section == "SYNOPSIS" and chapter in "23" and nofill and "(" in body:
                    extra.append((body, "code", "c"))
                elif section in ("SEE ALSO", "VOIR AUSSI", "SIEHE AUCH") and "(" in body:
                    extra.append((body, "data", "none"))
                elif not nofill and section not in ("NAME", "SYNOPSIS", "SEE ALSO"):
                    flat = " ".join(body.split())
                    if len(flat) >= 30 and len(flat.split()) >= 5:
                        paragraphs.append(flat[:1200])
            rng.shuffle(paragraphs)
            for p in paragraphs[: max(0, min(4, most - got))]:
                rows.append(_row(p, group, "man", "prose", "none", lang))
                got += 1
            for body, kind, code in extra[:2]:
                if bare < 1500 and lang == "en":
                    rows.append(_row(body[:1200], group, "man", kind, code, cd.ZXX))
                    bare += 1
    return rows


def _row(text: str, group: str, source: str, kind: str | None, code: str | None,
         language: str | None, **more: Any) -> dict[str, Any]:  # fmt: skip
    return {"text": text, "group": group, "source": source, "kind": kind,
            "code_language": code, "language": language, **more}  # fmt: skip


# --------------------------------------------------------------------------- fortunes
FORTUNE_ROOT = Path("/usr/share/games/fortunes")
# files of the top folder that are not English (the rest are)
_FORTUNE_FILES = {
    "brasil": "pt", "definizioni": "it", "formiche": "it", "italia": "it", "itatrek": "it",
    "leggi": "it", "luttazzi": "it", "paolotedeschi": "it", "zuse": "it", "norm": "it",
    "luke": "it", "jackfr": "it", "magic": "en",
}  # fmt: skip
_FORTUNE_FOLDERS = {"cz": "cs"}


def fortune_files(root: Path = FORTUNE_ROOT) -> dict[str, list[Path]]:
    """The fortune files under ``root`` by language (``.dat`` indexes and the
    ``.u8`` copies left out; a folder is a language; ``off/`` left out)."""
    found: dict[str, list[Path]] = defaultdict(list)
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix in (".dat", ".u8") or "off" in path.parts:
            continue
        rel = path.relative_to(root).parts
        if len(rel) == 1:
            found[_FORTUNE_FILES.get(rel[0], "en")].append(path)
        else:
            found[_FORTUNE_FOLDERS.get(rel[0], rel[0])].append(path)
    return found


def fortunes_of(path: Path) -> list[str]:
    text = cd._read_text(path, limit=3_000_000)
    if not text:
        return []
    return [f.strip("\n") for f in re.split(r"\n%\n", text) if len(f.strip()) >= 20]


def fortune_rows(rng: random.Random, *, per_language: int, root: Path = FORTUNE_ROOT) -> list:
    rows = []
    for lang, paths in sorted(fortune_files(root).items()):
        items = [(p, i, f) for p in paths for i, f in enumerate(fortunes_of(p))]
        rng.shuffle(items)
        for path, i, text in items[:per_language]:
            rows.append(_row(text[:1500], f"fortune:{path.name}#{i // 10}", "fortune",
                             "prose", "none", lang))  # fmt: skip
    return rows


# --------------------------------------------------------------------------- shapes
_EMOJI = [*range(0x1F300, 0x1F5FF), *range(0x1F600, 0x1F64F), *range(0x1F680, 0x1F6C5),
          *range(0x1F90C, 0x1F9FF), *range(0x2600, 0x26FF), *range(0x1FA70, 0x1FAF8)]  # fmt: skip
_WORDS = [
    "release",
    "notes",
    "build",
    "server",
    "report",
    "update",
    "cache",
    "client",
    "mirror",
    "upload",
    "archive",
    "status",
    "backup",
    "config",
    "profile",
    "search",
    "image",
    "video",
    "music",
    "index",
    "weather",
    "news",
    "docs",
    "support",
    "login",
    "account",
    "order",
    "invoice",
    "payment",
    "ticket",
]
_HOSTS = ("www.debian.org", "example.com", "github.com", "docs.python.org", "en.wikipedia.org",
          "maps.example.net", "shop.example.co.uk", "cdn.example.org", "localhost:8080",
          "api.example.io", "news.ycombinator.com", "www.youtube.com")  # fmt: skip
_QUERY_KEYS = ("q", "id", "page", "lang", "sort", "ref", "utm_source", "utm_medium", "v", "t",
               "session", "token_type", "search", "tab", "offset", "limit", "format",
               "s", "key", "sig", "code", "state", "nonce", "gclid", "fbclid", "campaign",
               "item", "cat", "hl", "from", "p", "query")  # fmt: skip
_NAMES = ("Anna", "Ben", "Chen", "Dmitri", "Eva", "Farid", "Grace", "Hiro", "Ines", "Jonas")
_TABLES = ("users", "orders", "items", "accounts", "events", "products", "logs", "sessions")
_COLUMNS = ("id", "name", "email", "created_at", "status", "price", "user_id", "total", "title")
_LOREM = ("The build finished without errors.", "Please check the attached report.",
          "This release fixes two crashes.", "See the changelog for details.",
          "The mirror was synced last night.", "Let me know if this works for you.")  # fmt: skip
_PROSE_PASSWORD = (
    "Enter your password to continue.", "Forgot your password?",
    "The password must be at least 12 characters long.", "Your API token has expired.",
    "Never share your secret key with anyone.", "Passwords do not match.",
    "Generate a new access token in your account settings.",
    "The private key is stored in your home directory.", "Wrong password, try again.",
    "Set the password with the passwd command.", "Tokens are revoked after 30 days.",
)  # fmt: skip
_PLACEHOLDERS = ("********", "${DB_PASSWORD}", "<your-password>", "$SECRET", "changeme",
                 "{{ vault_password }}", "%(password)s", "xxxxxxxx", "<YOUR_API_KEY>",
                 "os.environ['API_KEY']", "REPLACE_ME", "null", "\"\"", "${{ secrets.TOKEN }}",
                 "getenv(\"PASSWORD\")", "none", "*****")  # fmt: skip


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _emoji(rng: random.Random, n: int) -> str:
    return "".join(chr(rng.choice(_EMOJI)) for _ in range(n))


def _query_value(rng: random.Random) -> str:
    return rng.choice([
        rng.choice(_WORDS), str(rng.randint(1, 99999)), _hex(rng, rng.choice([8, 16])),
        cd._rand(rng, string.ascii_letters + string.digits, 11),
        cd._rand(rng, string.ascii_letters + string.digits + "-_", rng.randint(4, 40)),
    ])  # fmt: skip


def _url(rng: random.Random) -> str:
    path = "/".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 3)))
    url = f"{rng.choice(['https', 'http'])}://{rng.choice(_HOSTS)}/{path}"
    if rng.random() < 0.8:
        pairs = [f"{rng.choice(_QUERY_KEYS)}={_query_value(rng)}" for _ in range(rng.randint(1, 4))]
        url += "?" + "&".join(pairs)
    return url


def _date(rng: random.Random) -> str:
    y, m, d = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
    hh, mm, ss = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    return rng.choice([
        f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{m}/{d}/{y}", f"{d}.{m}.{y}",
        f"{y}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z", f"{d} {months[m - 1]} {y}",
        f"{months[m - 1]} {d}, {y} {hh:02d}:{mm:02d}", f"{hh:02d}:{mm:02d}",
        f"{y}-{m:02d}-{d:02d} {hh:02d}:{mm:02d}:{ss:02d}",
        # with a time zone (RFC 2822, ISO 8601, syslog, HTTP)
        f"{rng.choice(_DAYS)}, {d} {months[m - 1]} {y} {hh:02d}:{mm:02d}:{ss:02d} {_zone(rng)}",
        f"{y}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}{_zone(rng, ':')}",
        f"{months[m - 1]} {d:2d} {hh:02d}:{mm:02d}:{ss:02d}",
        f"{y}-{m:02d}-{d:02d} {hh:02d}:{mm:02d}:{ss:02d} {_zone(rng)}",
        f"{rng.choice(_DAYS)}, {d:02d} {months[m - 1]} {y} {hh:02d}:{mm:02d}:{ss:02d} GMT",
    ])  # fmt: skip


_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def _zone(rng: random.Random, sep: str = "") -> str:
    """A time zone offset: +0200, -05:30 (``sep`` between hours and minutes)."""
    return f"{rng.choice('+-')}{rng.randint(0, 12):02d}{sep}{rng.choice(['00', '30'])}"


def _number(rng: random.Random) -> str:
    n = rng.randint(0, 10 ** rng.randint(1, 12))
    return rng.choice([
        str(n), f"{n:,}", f"{n / 100:.2f}", f"{rng.randint(0, 100)}%", f"#{n}",
        f"{rng.choice('$€£')}{n / 100:,.2f}", f"{n} {rng.choice(['MB', 'kB', 'ms', 'items'])}",
        "1234567890", "0123456789", f"{rng.random():.6f}", f"-{n}", str(n) * 2,
        str(rng.randint(0, 999)), str(rng.randint(0, 99999)), f"+{rng.randint(1, 9999)}",
        f"0{rng.randint(0, 10**9)}",
    ])  # fmt: skip


def _version(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 30), rng.randint(0, 40), rng.randint(0, 200)
    return rng.choice([
        f"{a}.{b}.{c}", f"v{a}.{b}.{c}", f"{a}.{b}", f"{a}.{b}.{c}-rc{rng.randint(1, 5)}",
        f"{a}.{b}-{rng.randint(1, 9)}+deb{rng.randint(9, 13)}u{rng.randint(1, 9)}",
        f"Version {a}.{b}.{c}", f"{rng.choice(_WORDS)} {a}.{b}.{c}",
        f"{a}.{b}.{c}+git{rng.randint(2015, 2026)}{rng.randint(1, 12):02d}"
        f"{rng.randint(1, 28):02d}.{_hex(rng, 7)}",
    ])  # fmt: skip


def _identifier(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(1, 3))
    return rng.choice([
        "_".join(words), words[0] + "".join(w.title() for w in words[1:]),
        "".join(w.title() for w in words), "-".join(words), ".".join(words),
        "/usr/" + "/".join(words), "_".join(words).upper(), "~/" + "/".join(words) + ".txt",
    ])  # fmt: skip


def _b64(rng: random.Random, n: int) -> str:
    import base64

    return base64.b64encode(rng.randbytes(n)).decode()


def _emoji_run(r: random.Random) -> str:
    return _emoji(r, r.randint(1, 8))


def _emoji_words(r: random.Random) -> str:
    return f"{r.choice(_LOREM)} {_emoji(r, r.randint(1, 4))}"


def _url_in_prose(r: random.Random) -> str:
    return f"{r.choice(_LOREM)} See {_url(r)}"


def _numbers(r: random.Random) -> str:
    return " ".join(_number(r) for _ in range(r.randint(2, 8)))


def _hash_in_prose(r: random.Random) -> str:
    return r.choice([
        f"Fixed in commit {_hex(r, r.choice([7, 12, 40]))}.",
        f"The SHA-256 of the file is {_hex(r, 64)}.",
        f"Merge {_hex(r, 7)} into {_hex(r, 7)}",
        f"Checksum {_hex(r, 32)} matches the download.",
        f"Build {_hex(r, 12)} passed all tests.",
    ])  # fmt: skip


def _hash_line(r: random.Random) -> str:
    return r.choice([
        f"{_hex(r, 64)}  {_identifier(r)}.tar.gz",
        f"sha256:{_hex(r, 64)}",
        f"MD5 ({_identifier(r)}) = {_hex(r, 32)}",
        f"commit {_hex(r, 40)}",
        _hex(r, r.choice([32, 40, 64])),
        f"{_hex(r, 40)} refs/heads/{r.choice(_WORDS)}",
    ])  # fmt: skip


def _uuid(r: random.Random) -> str:
    return str(uuid.UUID(int=r.getrandbits(128), version=4))


def _address(r: random.Random) -> str:
    return r.choice([
        ".".join(str(r.randint(0, 255)) for _ in range(4)),
        ":".join(f"{r.randint(0, 255):02x}" for _ in range(6)),
        f"fe80::{_hex(r, 4)}:{_hex(r, 4)}",
        f"{r.randint(1, 254)}.{r.randint(0, 255)}.0.0/16",
    ])  # fmt: skip


def _base64_data(r: random.Random) -> str:
    return r.choice([
        json.dumps({"name": _identifier(r),
                    "icon": "data:image/png;base64,iVBORw0KGgo" + _b64(r, 60)}),
        json.dumps({"version": _version(r), "integrity": "sha512-" + _b64(r, 64)}),
        json.dumps({"id": str(uuid.UUID(int=r.getrandbits(128))), "thumbnail": _b64(r, 90)}),
        f"{_identifier(r)},{_b64(r, 24)},{r.randint(0, 9999)}",
    ])  # fmt: skip


_SECRET_NAMES = ["password", "api_key", "secret", "token", "DB_PASSWORD", "client_secret"]


def _placeholder(r: random.Random) -> str:
    return f"{r.choice(_SECRET_NAMES)}{r.choice([' = ', '=', ': '])}{r.choice(_PLACEHOLDERS)}"


def _password_prose(r: random.Random) -> str:
    return r.choice(_PROSE_PASSWORD)


_SETTINGS = ["dir", "size", "mode", "host", "port", "name", "timeout"]


def _kv_config(r: random.Random) -> str:
    def line() -> str:
        key = f"{r.choice(_WORDS)}_{r.choice(_SETTINGS)}"
        value = r.choice([str(r.randint(1, 65535)), r.choice(_WORDS), "true", "false",
                          _identifier(r)])  # fmt: skip
        return f"{key}: {value}"

    return "\n".join(line() for _ in range(r.randint(1, 6)))


def _sql_line(r: random.Random) -> str:
    t, c = _TABLES, _COLUMNS
    return r.choice([
        f"SELECT {', '.join(r.sample(c, r.randint(1, 4)))} FROM {r.choice(t)} "
        f"WHERE {r.choice(c)} = {r.randint(1, 999)} ORDER BY {r.choice(c)};",
        f"SELECT * FROM {r.choice(t)};",
        f"DELETE FROM {r.choice(t)} WHERE id = {r.randint(1, 999)};",
        f"UPDATE {r.choice(t)} SET {r.choice(c)} = '{r.choice(_WORDS)}' "
        f"WHERE id = {r.randint(1, 99)};",
        f"INSERT INTO {r.choice(t)} ({', '.join(r.sample(c, 2))}) "
        f"VALUES ({r.randint(1, 99)}, '{r.choice(_WORDS)}');",
        f"CREATE TABLE {r.choice(t)} (id INTEGER PRIMARY KEY, {r.choice(c)} TEXT NOT NULL);",
        f"SELECT COUNT(*) FROM {r.choice(t)} GROUP BY {r.choice(c)};",
    ])  # fmt: skip


_DATA = ("data", "none", cd.ZXX)
_PROSE = ("prose", "none", "en")
# name: ((kind, code_language, language), generator; None: a kaomoji of the shared corpus)
ORDINARY = {
    "emoji": ((None, "none", None), _emoji_run),
    "emoji_words": (_PROSE, _emoji_words),
    "url": (_DATA, _url),
    "url_in_prose": (_PROSE, _url_in_prose),
    "number": (_DATA, _number),
    "numbers": (_DATA, _numbers),
    "date": (_DATA, _date),
    "version": (_DATA, _version),
    "hash_in_prose": (_PROSE, _hash_in_prose),
    "hash_line": (_DATA, _hash_line),
    "uuid": (_DATA, _uuid),
    "address": (_DATA, _address),
    "identifier": ((None, "none", cd.ZXX), _identifier),
    "base64_data": (_DATA, _base64_data),
    "placeholder": (("config", "none", cd.ZXX), _placeholder),
    "password_prose": (_PROSE, _password_prose),
    "kv_config": (("config", "none", cd.ZXX), _kv_config),
    "sql_line": (("code", "sql", cd.ZXX), _sql_line),
    # real texts, drawn from a pool (:func:`pools`)
    "kaomoji_text": ((None, "none", None), None),
    "code_identifier": ((None, "none", cd.ZXX), None),
    "doc_url": (_DATA, None),
}

# secrets in their usual shapes: (kind, code_language, language) by shape, the value
_SECRET_SHAPES = {
    "alone": ("data", "none", cd.ZXX),
    "env": ("config", "none", cd.ZXX),
    "json": ("data", "none", cd.ZXX),
    "sentence": ("prose", "none", "en"),
    "header": ("data", "none", cd.ZXX),
}


_ONLY_SHAPE = {"private_key": "alone", "password": "env"}


def _aws_pair(rng: random.Random) -> str:
    key = "AKIA" + cd._rand(rng, string.ascii_uppercase + string.digits, 16)
    secret = cd._rand(rng, string.ascii_letters + string.digits + "+/", 40)
    return rng.choice([
        f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}",
        f"AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY={secret}",
        f"aws_access_key_id: {key}",
    ])  # fmt: skip


def _hex_key(rng: random.Random) -> str:
    name = rng.choice(["api_key", "API_KEY", "apikey", "secret_key", "access_key", "APP_SECRET",
                       "X-Api-Key", "auth_token", "SENDGRID_API_KEY", "client_secret"])  # fmt: skip
    value = _hex(rng, rng.choice([32, 40, 64]))
    return rng.choice([f"{name} = \"{value}\"", f"{name}={value}", f"{name}: {value}",
                       f'"{name}": "{value}"'])  # fmt: skip


def secret_text(kind: str, shape: str, rng: random.Random) -> str:
    """A generated secret of ``kind`` in ``shape`` (see :data:`_SECRET_SHAPES`)."""
    if kind == "api_token" and rng.random() < 0.3:
        value = _aws_pair(rng) if rng.random() < 0.5 else _hex_key(rng)
        return value if shape in ("alone", "env") else f"{rng.choice(_LOREM)}\n{value}"
    value = cd.gen_secret(kind, rng)
    if kind in ("password", "private_key") or shape == "alone":
        return value
    key = {"api_token": "API_TOKEN", "jwt": "JWT", "email": "EMAIL", "phone": "PHONE"}[kind]
    if shape == "env":
        return f"{rng.choice([key, key.lower(), 'export ' + key])}={value}"
    if shape == "json":
        return json.dumps({"user": rng.choice(_NAMES).lower(), key.lower(): value})
    if shape == "header":
        if kind == "api_token" and "=" not in value and rng.random() < 0.5:
            repo = f"{rng.choice(_NAMES).lower()}/{rng.choice(_WORDS)}"
            return f"git clone https://{value}@github.com/{repo}.git"
        return f"curl -H 'Authorization: Bearer {value}' {_url(rng)}"
    return rng.choice([f"My {key.lower()} is {value}, keep it safe.",
                       f"{rng.choice(_NAMES)} sent {value} yesterday.",
                       f"Use {value} for the test account."])  # fmt: skip


def contact_sentence(rng: random.Random) -> str:
    """An English sentence holding an e-mail address and a phone number."""
    name = rng.choice(_NAMES)
    email, phone = cd.gen_secret("email", rng), cd.gen_secret("phone", rng)
    return rng.choice([
        f"Contact {name} at {email} or call {phone} for details.",
        f"For questions, write to {email} or phone {phone} during office hours.",
        f"{name} can be reached at {phone} and {email}.",
        f"Please send the signed form to {email}; urgent matters: {phone}.",
    ])  # fmt: skip


def pools(shared: Path, doc_root: Path = Path("/usr/share/doc")) -> dict[str, list[str]]:
    """Real texts for the shapes drawn from a pool: kaomoji of the shared corpus,
    names from the shared code corpus (files of the train and validation splits
    only), URLs of the system's README, NEWS and changelog files (the packages'
    copyright files left out)."""
    names: set[str] = set()
    with gzip.open(shared / "code.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if cd.split_of(f"code:{r['group']}") != "test":
                names.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]{5,40}\b", r["text"][:2000]))
    urls: set[str] = set()
    docs = [p for p in sorted(doc_root.glob("*/*")) if p.name.split(".")[0] in _DOC_NAMES]
    for path in docs[:1500]:
        text = cd._read_text(path, limit=300_000) or ""
        urls.update(u.rstrip(".,;)>'\"") for u in re.findall(r"https?://[^\s<>\"'()]+", text))
    return {
        "kaomoji_text": kaomoji_texts(shared),
        "code_identifier": sorted(names),
        "doc_url": sorted(urls) or ["https://www.debian.org/"],
    }


_DOC_NAMES = {"README", "NEWS", "changelog", "CHANGES", "TODO", "FAQ", "AUTHORS", "THANKS"}


def kaomoji_texts(shared: Path) -> list[str]:
    with gzip.open(shared / "kaomoji.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh]


def shape_rows(shared: Path, rng: random.Random, *, per_shape: int) -> list[dict[str, Any]]:
    """Generated short rows (see the module's text): ``per_shape`` of each ordinary
    shape, of each secret kind and shape, and of contact sentences. Rows of a shape
    come in groups of 50 (a split keeps each shape on every side)."""
    rows: list[dict[str, Any]] = []
    real = pools(shared)
    for name, ((kind, code, lang), make) in ORDINARY.items():
        for i in range(per_shape):
            text = rng.choice(real[name]) if make is None else make(rng)
            rows.append(_row(text, f"shape:{name}:{i // 50}", "shape", kind, code, lang,
                             shape=name))  # fmt: skip
    for secret in cd.RISKS:
        for shape, (kind, code, lang) in _SECRET_SHAPES.items():
            if secret in ("private_key", "password") and shape != _ONLY_SHAPE[secret]:
                continue  # a key block or a password line is one shape
            for i in range(per_shape // 2):
                text = secret_text(secret, shape, rng)
                if secret not in cd.detect_risks(text):
                    continue  # a value the strict patterns pass over (``%`` at its start)
                rows.append(_row(text, f"shape:{secret}-{shape}:{i // 50}", "shape", kind,
                                 code, lang, shape=f"{secret}-{shape}"))  # fmt: skip
    rows = [r for r in rows if not (r["shape"] in ORDINARY and cd.detect_risks(r["text"]))]
    for i in range(per_shape):
        rows.append(_row(contact_sentence(rng), f"shape:contact:{i // 50}", "shape", "prose",
                         "none", "en", shape="contact"))  # fmt: skip
    for r in rows:
        r["risk"] = cd.detect_risks(r["text"])
        r["generated"] = True
    return rows


def more_rows(
    shared: Path,
    seed: int,
    man_root: Path | None,
    man_per_language: dict[str, int] | None,
    fortunes_per_language: int,
    shapes_per_kind: int,
) -> list[dict[str, Any]]:
    """Manual-page paragraphs, fortunes and generated shapes, each from a generator
    of its own: the rows ``content_data.collect`` mixes in last (``more``)."""
    more: list[dict[str, Any]] = []
    if man_root is not None and man_root.is_dir():
        more += man_rows(
            man_root, random.Random(f"{seed}:man"), per_language=man_per_language or {"*": 500}
        )
    if fortunes_per_language:
        rng = random.Random(f"{seed}:fortune")
        more += fortune_rows(rng, per_language=fortunes_per_language)
    for r in more:
        r["generated"] = False
        r["risk"] = cd.detect_risks(r["text"])
    if shapes_per_kind:
        more += shape_rows(shared, random.Random(f"{seed}:shapes"), per_shape=shapes_per_kind)
    for r in more:
        r.setdefault("snippet", None)
    return more
