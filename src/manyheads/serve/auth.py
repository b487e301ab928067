"""API keys: read from a file, checked in constant time, never logged."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from ..errors import ConfigError

MIN_KEY_LENGTH = 16


def load_api_keys(path: str | Path) -> list[str]:
    """The keys in ``path``: one per line; blank lines and lines starting with ``#`` are
    skipped. Refuses a missing or empty file and keys shorter than 16 characters."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"API key file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the API key file {path}: {exc}") from exc
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        if any(c.isspace() for c in key):
            raise ConfigError(f"{path}, line {number}: a key cannot contain whitespace")
        if len(key) < MIN_KEY_LENGTH:
            # the key itself is not shown: error messages end up in logs
            raise ConfigError(
                f"{path}, line {number}: key too short ({len(key)} characters; "
                f"at least {MIN_KEY_LENGTH})"
            )
        keys.append(key)
    if not keys:
        raise ConfigError(f"the API key file {path} holds no key")
    return keys


class KeyChecker:
    """Checks ``Authorization: Bearer KEY`` headers against the configured keys.

    Keys are kept as SHA-256 digests and compared with ``hmac.compare_digest``
    against every key (no early exit), so timing says nothing about a key.
    """

    def __init__(self, keys: list[str] | None) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys or []]

    @property
    def configured(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> bool:
        if not self._digests or not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = False
        for known in self._digests:
            found |= hmac.compare_digest(digest, known)
        return found
