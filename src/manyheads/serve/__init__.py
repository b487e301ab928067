"""HTTP service: one process answering every head of a bundle (FastAPI + uvicorn)."""

from __future__ import annotations

from .app import create_app
from .auth import load_api_keys
from .batcher import MicroBatcher
from .config import ServeConfig, check_listen
from .payload import head_from_json, head_to_json

__all__ = [
    "MicroBatcher",
    "ServeConfig",
    "check_listen",
    "create_app",
    "head_from_json",
    "head_to_json",
    "load_api_keys",
]
