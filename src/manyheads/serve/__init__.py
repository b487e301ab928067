"""HTTP service: one process answering every head of a bundle (FastAPI + uvicorn)."""

from __future__ import annotations

from .app import MicroBatcher, create_app

__all__ = ["MicroBatcher", "create_app"]
