"""``manyheads serve``: serving a bundle over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import jobs
from ..bundle import has_bundle
from ..errors import ManyheadsError
from .common import (
    AnyBundleOpt,
    CacheDirOpt,
    LongTextsOpt,
    MaxCharsOpt,
    MaxLabelsOpt,
    NoCacheOpt,
    TierOpt,
    opt,
)


def serve(
    bundle: AnyBundleOpt = None,
    host: Annotated[str, opt("--host")] = "127.0.0.1",
    port: Annotated[int, opt("--port")] = 8000,
    api_key_file: Annotated[Path | None, opt("--api-key-file")] = None,
    max_batch: Annotated[int, opt("--max-batch")] = 64,
    max_wait_ms: Annotated[float, opt("--max-wait-ms")] = 10.0,
    watch: Annotated[bool, opt("--watch")] = False,
    max_texts: Annotated[int, opt("--max-texts")] = 1000,
    max_chars: MaxCharsOpt = 100000,
    long_texts: LongTextsOpt = "refuse",
    max_body_mb: Annotated[float, opt("--max-body-mb")] = 16.0,
    max_pass_chars: Annotated[int, opt("--max-pass-chars")] = 100000,
    max_pass_tokens: Annotated[int, opt("--max-pass-tokens")] = 512,
    max_labels: MaxLabelsOpt = 1000,
    max_label_chars: Annotated[int, opt("--max-label-chars")] = 200,
    max_heads: Annotated[int, opt("--max-heads")] = 256,
    body_timeout: Annotated[float, opt("--body-timeout")] = 30.0,
    max_connections: Annotated[int, opt("--max-connections")] = 1000,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
    tier: TierOpt = None,
) -> None:
    """Serve every head of the bundle over HTTP: POST /v1/predict, head updates
    (PUT/DELETE /v1/heads/NAME, POST /v1/heads/NAME/train), /metrics, a playground at /."""
    from ..bundle import bundle_folder
    from ..errors import require
    from ..serve import ServeConfig, check_listen, create_app, load_api_keys

    uvicorn = require("uvicorn", "serve")
    check_listen(host, port)  # before loading anything, and before announcing
    if max_connections < 1:
        raise ManyheadsError(f"--max-connections must be a positive integer, got {max_connections}")
    name = bundle or jobs.DEFAULT_BUNDLE
    folder = bundle_folder(name, tier)
    if not has_bundle(folder):
        raise ManyheadsError(f"no bundle at {folder} (missing bundle.json)")
    if not max_body_mb > 0:
        raise ManyheadsError(f"--max-body-mb must be > 0, got {max_body_mb}")
    config = ServeConfig(
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_texts=max_texts,
        max_chars=max_chars,
        long_texts=long_texts,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        max_pass_chars=max_pass_chars,
        max_pass_tokens=max_pass_tokens,
        max_labels=max_labels,
        max_label_chars=max_label_chars,
        max_heads=max_heads,
        body_timeout_s=body_timeout,
        api_keys=tuple(load_api_keys(api_key_file)) if api_key_file is not None else (),
        watch=watch,
        tier=tier,
    )
    cache = jobs.cache_setting(cache_dir, no_cache)
    app_ = create_app(name, config, cache=cache, preload=True)
    typer.echo(f"manyheads: serving {folder} on http://{host}:{port}", err=True)
    # idle keep-alive connections stay open 75 s (uvicorn's default is 5 s): a client
    # reusing a pooled connection just as the server closes it sees a reset
    uvicorn.run(
        app_,
        host=host,
        port=port,
        log_level="warning",
        timeout_keep_alive=75,
        limit_concurrency=max_connections,
    )
