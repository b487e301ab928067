"""The service's OpenAPI schema against a reviewed snapshot.

After a deliberate API change, rewrite the snapshot with
``MANYHEADS_UPDATE_SNAPSHOTS=1 bash scripts/test.sh tests/test_openapi.py`` and
review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from manyheads.heads import KINDS

pytest.importorskip("fastapi")

from manyheads.serve import create_app

SNAPSHOT = Path(__file__).parent / "snapshots" / "openapi.json"


def _schema(tmp_path: Path) -> dict:
    schema = create_app(tmp_path / "any-bundle").openapi()  # the bundle loads at startup only
    schema["info"].pop("version", None)  # the package version is not part of the API
    return json.loads(json.dumps(schema, sort_keys=True))


def test_openapi_schema_matches_the_snapshot(tmp_path):
    schema = _schema(tmp_path)
    if os.environ.get("MANYHEADS_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    want = json.loads(SNAPSHOT.read_text())
    assert schema == want, "the API changed: review it, then update the snapshot (see above)"


def test_schema_documents_every_endpoint_and_body(tmp_path):
    schema = _schema(tmp_path)
    paths = schema["paths"]
    assert set(paths) == {
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/drift",
        "/v1/heads",
        "/v1/heads/{name}",
        "/v1/heads/{name}/train",
        "/v1/predict",
    }
    assert set(paths["/v1/heads/{name}"]) == {"get", "put", "delete"}
    body = paths["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["texts"]
    train = paths["/v1/heads/{name}/train"]["post"]["requestBody"]["content"]["application/json"]
    assert train["schema"]["properties"]["kind"]["enum"] == list(KINDS)
    assert "413" in paths["/v1/predict"]["post"]["responses"]
