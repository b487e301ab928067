"""``manyheads serve``: serving a bundle over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .. import jobs
from ..bundle import has_bundle
from ..errors import ManyheadsError
from .options import (
    ANY_BUNDLE,
    CACHE,
    DEVICE,
    LONG_TEXTS,
    MAX_CHARS,
    MAX_LABELS,
    TIER,
    command,
    option,
    take,
)

# where the server listens, who may ask it
LISTEN = (
    option("host", str, "--host", "Address to listen on.", "127.0.0.1"),
    option("port", int, "--port", "Port to listen on.", 8000),
    option(
        "api_key_file",
        Path | None,
        "--api-key-file",
        "File of API keys, one per line. Write endpoints always need a key; with this file, "
        "reads too (not /healthz, /readyz, the page at /).",
        None,
    ),
)
# how requests are merged into trunk passes
BATCHING = (
    option("max_batch", int, "--max-batch", "Most texts merged into one trunk pass.", 64),
    option(
        "max_wait_ms",
        float,
        "--max-wait-ms",
        "Longest wait for more requests to merge (only under concurrent load).",
        10.0,
    ),
)
# the limits of one request, of a pass, of the heads
LIMITS = (
    option("max_texts", int, "--max-texts", "Most texts in one predict request.", 1000),
    MAX_CHARS,
    LONG_TEXTS,
    option("max_body_mb", float, "--max-body-mb", "Largest request body, in MB.", 16.0),
    option(
        "max_pass_chars",
        int,
        "--max-pass-chars",
        "Most characters in one trunk pass: a bigger request is answered over several passes,"
        " taking turns with the others; a longer text gets passes of its own.",
        100_000,
    ),
    option(
        "max_pass_tokens",
        int,
        "--max-pass-tokens",
        "Most tokens in one trunk pass, for a trunk that reads token windows (a transformer,"
        " an exported one): a text of more is read a few windows per pass, other requests"
        " answered between them.",
        512,
    ),
    MAX_LABELS,
    option("max_label_chars", int, "--max-label-chars", "Most characters in one label.", 200),
    option("max_heads", int, "--max-heads", "Most heads in the bundle.", 256),
    option(
        "body_timeout",
        float,
        "--body-timeout",
        "Seconds to wait for the next piece of a request body (408).",
        30.0,
    ),
    option(
        "max_connections",
        int,
        "--max-connections",
        "Most connections and requests at once; beyond it the server answers 503.",
        1000,
    ),
)


@command(
    ANY_BUNDLE,
    *LISTEN,
    *BATCHING,
    option("watch", bool, "--watch", "Reload the bundle when its folder changes on disk.", False),
    option(
        "learn",
        bool,
        "--learn",
        "Update a head in the background once it has --learn-after new corrections "
        "(POST /v1/feedback); promoted only when not worse.",
        False,
    ),
    option(
        "learn_after",
        int,
        "--learn-after",
        "New corrections of a head that start an update (with --learn).",
        100,
    ),
    option(
        "learn_check_s",
        float,
        "--learn-check",
        "Seconds between counts of the corrections (with --learn).",
        5.0,
    ),
    option(
        "max_feedback",
        int,
        "--max-feedback",
        "Corrections the bundle keeps before updates fold them in (then 413).",
        100_000,
    ),
    *LIMITS,
    *CACHE,
    DEVICE,
    option(
        "gpu_batch",
        int,
        "--gpu-batch",
        "Texts a trunk pass when the trunk runs on a GPU (a pass's characters and tokens "
        "grow with it).",
        1024,
    ),
    TIER,
)
def serve(**options: Any) -> None:
    """Serve every head of the bundle over HTTP: POST /v1/predict, head updates
    (PUT/DELETE /v1/heads/NAME, POST /v1/heads/NAME/train), corrections (POST
    /v1/feedback), /metrics, a playground at /."""
    from ..bundle import bundle_folder
    from ..errors import require
    from ..serve import ServeConfig, check_listen, create_app, load_api_keys

    bundle, host, port, api_key_file = take(options, "bundle", "host", "port", "api_key_file")
    max_connections, max_body_mb, body_timeout = take(
        options, "max_connections", "max_body_mb", "body_timeout"
    )
    cache_dir, no_cache = take(options, "cache_dir", "no_cache")
    uvicorn = require("uvicorn", "serve")
    check_listen(host, port)  # before loading anything, and before announcing
    if max_connections < 1:
        raise ManyheadsError(f"--max-connections must be a positive integer, got {max_connections}")
    name = bundle or jobs.DEFAULT_BUNDLE
    folder = bundle_folder(name, options["tier"])
    if not has_bundle(folder):
        raise ManyheadsError(f"no bundle at {folder} (missing bundle.json)")
    if not max_body_mb > 0:
        raise ManyheadsError(f"--max-body-mb must be > 0, got {max_body_mb}")
    config = ServeConfig(
        **options,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        body_timeout_s=body_timeout,
        api_keys=tuple(load_api_keys(api_key_file)) if api_key_file is not None else (),
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
