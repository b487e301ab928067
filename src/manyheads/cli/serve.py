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
)


def serve(
    bundle: AnyBundleOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File of API keys, one per line. Write endpoints always need a key; "
            "with this file, reads too (not /healthz, /readyz, the page at /).",
        ),
    ] = None,
    max_batch: Annotated[
        int, typer.Option("--max-batch", help="Most texts merged into one trunk pass.")
    ] = 64,
    max_wait_ms: Annotated[
        float,
        typer.Option(
            "--max-wait-ms",
            help="Longest wait for more requests to merge (only under concurrent load).",
        ),
    ] = 10.0,
    watch: Annotated[
        bool, typer.Option("--watch", help="Reload the bundle when its folder changes on disk.")
    ] = False,
    max_texts: Annotated[
        int, typer.Option("--max-texts", help="Most texts in one predict request.")
    ] = 1000,
    max_chars: MaxCharsOpt = 100_000,
    long_texts: LongTextsOpt = "refuse",
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", help="Largest request body, in MB.")
    ] = 16.0,
    max_pass_chars: Annotated[
        int,
        typer.Option(
            "--max-pass-chars",
            help="Most characters in one trunk pass: a bigger request is answered over "
            "several passes, taking turns with the others.",
        ),
    ] = 100_000,
    max_labels: MaxLabelsOpt = 1000,
    max_label_chars: Annotated[
        int, typer.Option("--max-label-chars", help="Most characters in one label.")
    ] = 200,
    max_heads: Annotated[int, typer.Option("--max-heads", help="Most heads in the bundle.")] = 256,
    body_timeout: Annotated[
        float,
        typer.Option(
            "--body-timeout", help="Seconds to wait for the next piece of a request body (408)."
        ),
    ] = 30.0,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            help="Most connections and requests at once; beyond it the server answers 503.",
        ),
    ] = 1000,
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
