"""The ``manyheads`` command: parse, call one library function, print.

Library errors become ``manyheads: error: MESSAGE`` on stderr and exit code 1;
usage errors exit 2. No traceback is shown for either.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from . import workflows
from .bundle import BUILTIN_BUNDLES, copy_bundle
from .errors import ManyheadsError
from .store import has_bundle

app = typer.Typer(
    name="manyheads",
    help="One shared encoder, many small heads: train, evaluate and run text classifiers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # plain help: wraps every description at the terminal's width (no cut-off cells,
    # no type column that calls a flag <bool>)
    rich_markup_mode=None,
)
heads_app = typer.Typer(
    help="List or remove the heads of a bundle.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(heads_app, name="heads")


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"manyheads {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """One shared encoder, many small heads: train, evaluate and run text classifiers."""


def _bundle_note(value: str | None) -> str | None:
    """Say which bundle answers when a built-in name is also a folder here."""
    name = workflows.DEFAULT_BUNDLE if value is None else value
    if name in BUILTIN_BUNDLES and has_bundle(Path(name)):
        typer.echo(
            f"manyheads: note: {name!r} is the built-in bundle; the bundle folder ./{name} "
            f"here is used when written as a path: -b ./{name}",
            err=True,
        )
    return value


TASK_HELP = (
    "A head to train: NAME[=FIELD][:KIND], FIELD defaulting to NAME and KIND to "
    "multiclass (or binary, multilabel), e.g. topic, lang=language, tags:multilabel; "
    "repeat for more heads."
)
# a string, not a Path: "./content" (a folder) and "content" (the built-in) differ
BundleOpt = Annotated[
    str,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder (a built-in bundle by name: {', '.join(BUILTIN_BUNDLES)}).",
        callback=_bundle_note,
    ),
]
AnyBundleOpt = Annotated[
    str | None,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder, or a built-in bundle: {', '.join(BUILTIN_BUNDLES)} "
        f"(default: {workflows.DEFAULT_BUNDLE}); a folder named like one is written "
        "as a path (./content).",
        callback=_bundle_note,
    ),
]
TierOpt = Annotated[
    int | None,
    typer.Option(
        "--tier",
        help="Byte bundles: the tier (embedding size) to answer at (default: the bundle's).",
    ),
]
TextFieldOpt = Annotated[str, typer.Option("--text-field", help="Field holding the text.")]
HeadsOpt = Annotated[
    str | None, typer.Option("--heads", help="Comma-separated subset of heads (default: all).")
]
CacheDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Embedding cache folder (default: $MANYHEADS_CACHE_DIR or the user cache folder).",
    ),
]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not use the embedding cache.")]
MaxCharsOpt = Annotated[
    int, typer.Option("--max-chars", help="Most characters in one text (see --long-texts).")
]
LongTextsOpt = Annotated[
    str,
    typer.Option(
        "--long-texts",
        help="Texts over --max-chars: 'refuse' (an error naming the text) or 'window' (read "
        "in pieces of --max-chars, probabilities averaged).",
    ),
]
MaxLabelsOpt = Annotated[
    int, typer.Option("--max-labels", help="Most labels (classes) of one head.")
]
LabelSepOpt = Annotated[
    str, typer.Option("--label-sep", help="Separator of multilabel fields given as strings.")
]


def _split(heads: str | None) -> list[str] | None:
    if heads is None:
        return None
    names = [h.strip() for h in heads.split(",") if h.strip()]
    if not names:
        raise typer.BadParameter("--heads needs at least one head name")
    return names


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def _trunk_line(summary: Any) -> str:
    """The byte trunk's training: time, loss per epoch, learned task weights."""
    losses = ", ".join(f"{v:.4f}" for v in summary.losses)
    weights = ", ".join(f"{n} {w:.3f}" for n, w in summary.task_weights.items())
    return (
        f"trained byte trunk in {summary.seconds:.1f} s ({summary.epochs} epochs, "
        f"{summary.steps} steps; loss per epoch: {losses}; task weights: {weights})"
    )


def _tiers_table(tiers: dict[int, list[Any]]) -> str:
    """Validation metrics of the heads fitted at a byte bundle's other tiers."""
    rows = [
        [
            s.name,
            tier,
            s.metrics.get("accuracy"),
            s.metrics.get("macro_f1"),
            s.metrics.get("micro_f1"),
            s.metrics.get("ece"),
        ]
        for tier, summaries in tiers.items()
        for s in summaries
    ]
    header = ["head", "tier", "val_acc", "val_macro_f1", "val_micro_f1", "val_ece"]
    return _table(rows, header)


def _summary_table(summaries: list[Any]) -> str:
    """One line per trained head: sizes, validation metrics, seconds."""
    rows = [
        [
            s.name,
            s.kind,
            s.n_classes,
            s.n_train,
            s.n_val,
            s.metrics.get("accuracy"),
            s.metrics.get("macro_f1"),
            s.metrics.get("micro_f1"),
            s.metrics.get("ece"),
            round(s.seconds, 2),
        ]
        for s in summaries
    ]
    header = [
        "head",
        "kind",
        "classes",
        "train",
        "val",
        "val_acc",
        "val_macro_f1",
        "val_micro_f1",
        "val_ece",
        "seconds",
    ]
    return _table(rows, header)


@app.command()
def train(
    data: Annotated[Path, typer.Argument(help="CSV, TSV, JSONL or Parquet file.")],
    bundle: BundleOpt,
    task: Annotated[
        list[str],
        typer.Option("--task", "-t", help=TASK_HELP),
    ],
    text_field: TextFieldOpt = "text",
    group_field: Annotated[
        str | None,
        typer.Option(
            "--group-field",
            help="Rows sharing a group stay on one side of the train/validation split.",
        ),
    ] = None,
    trunk: Annotated[
        str | None,
        typer.Option(
            "--trunk",
            help="Trunk of a new bundle: minilm+tfidf (default), minilm, hashing, tfidf, a model "
            "folder path, or several joined by '+' (with weights: minilm@1+tfidf@0.5); or byte "
            "(a byte trunk trained here on the file's tasks).",
        ),
    ] = None,
    tier: Annotated[
        int | None,
        typer.Option(
            "--tier",
            help="--trunk byte: the tier (one of the trunk's dims) the bundle answers at "
            "(default: the largest); the other tiers go to BUNDLE/tiers/.",
        ),
    ] = None,
    trunk_epochs: Annotated[
        int | None,
        typer.Option(
            "--trunk-epochs",
            help=f"--trunk byte: training epochs (default {workflows.BYTE_TRUNK_EPOCHS}).",
        ),
    ] = None,
    byte_config: Annotated[
        str | None,
        typer.Option(
            "--byte-config",
            help="--trunk byte: the trunk's shape, a JSON object of ByteConfig fields "
            '(e.g. \'{"channels": 64, "dims": [32, 64]}\').',
        ),
    ] = None,
    label_sep: LabelSepOpt = ",",
    val_fraction: Annotated[
        float,
        typer.Option("--val-fraction", help="Share of rows held out to validate each head."),
    ] = 0.2,
    c: Annotated[
        str,
        typer.Option(
            "--C",
            help="Inverse regularisation strength, or 'auto' (default) to pick it on the "
            "validation split.",
        ),
    ] = "auto",
    class_weight: Annotated[
        str | None, typer.Option("--class-weight", help="'balanced' for imbalanced labels.")
    ] = None,
    head: Annotated[
        str,
        typer.Option(
            "--head",
            help="linear (fused, default), mlp (one hidden layer), or auto "
            "(the better of both on the validation split).",
        ),
    ] = "linear",
    thresholds: Annotated[
        str,
        typer.Option(
            "--thresholds",
            help="What binary/multilabel thresholds maximise on the "
            "validation split: accuracy (default) or f1.",
        ),
    ] = "accuracy",
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the split and of training (same seed, same heads)."),
    ] = 0,
    max_labels: MaxLabelsOpt = 1000,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Train heads from DATA into BUNDLE (created if missing; other heads are kept)."""
    report = workflows.train_report(
        data,
        bundle,
        task,
        trunk=trunk,
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        val_fraction=val_fraction,
        C=c,
        class_weight=class_weight,
        head=head,
        thresholds=thresholds,
        seed=seed,
        tier=tier,
        trunk_epochs=trunk_epochs,
        byte_config=byte_config,
        cache_dir=cache_dir,
        no_cache=no_cache,
        max_labels=max_labels,
        progress=True,
        on_trunk=lambda summary: typer.echo(_trunk_line(summary)),
    )
    typer.echo(_summary_table(report.heads))
    if report.tiers:
        typer.echo(f"other tiers (the bundle answers at tier {report.tier}; --tier N picks one):")
        typer.echo(_tiers_table(report.tiers))
    typer.echo(f"saved {bundle}")


@app.command()
def finetune(
    data: Annotated[Path, typer.Argument(help="CSV, TSV, JSONL or Parquet file.")],
    bundle: BundleOpt,
    task: Annotated[
        list[str],
        typer.Option("--task", "-t", help=TASK_HELP),
    ],
    epochs: Annotated[int, typer.Option("--epochs", help="Fine-tuning epochs.")] = 2,
    max_length: Annotated[
        int, typer.Option("--max-length", help="Tokens per text while training (truncated).")
    ] = 128,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 16,
    lr: Annotated[float, typer.Option("--lr", help="Trunk learning rate.")] = 2e-5,
    holdout: Annotated[
        float,
        typer.Option(
            "--holdout",
            help="Share of the rows (grouped) left out of fine-tuning to calibrate the heads on.",
        ),
    ] = 0.2,
    text_field: TextFieldOpt = "text",
    group_field: Annotated[str | None, typer.Option("--group-field")] = None,
    label_sep: LabelSepOpt = ",",
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the split and of training (same seed, same heads)."),
    ] = 0,
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Fine-tune the bundle's transformer trunk on DATA's tasks (LP-FT); refit every head."""
    summary = workflows.finetune_file(
        data,
        bundle,
        task,
        text_field=text_field,
        group_field=group_field,
        label_sep=label_sep,
        epochs=epochs,
        max_length=max_length,
        batch_size=batch_size,
        lr=lr,
        holdout=holdout,
        seed=seed,
        cache_dir=cache_dir,
        no_cache=no_cache,
        progress=True,
    )
    r = summary.report
    losses = ", ".join(f"{v:.4f}" for v in r.losses)
    typer.echo(f"fine-tuned trunk in {r.seconds:.1f} s ({r.steps} steps; loss per epoch: {losses})")
    typer.echo(_summary_table(summary.heads))
    for name in summary.dropped:
        typer.echo(
            f"note: removed head {name!r}: the bundle kept no training data for it, "
            "so it cannot be refitted on the new trunk",
            err=True,
        )
    typer.echo(f"saved {bundle} (trunk fingerprint {r.fingerprint})")


@app.command("eval")
def eval_(
    data: Annotated[Path, typer.Argument(help="Labelled CSV, TSV, JSONL or Parquet file.")],
    bundle: BundleOpt,
    heads: HeadsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    text_field: TextFieldOpt = "text",
    label_sep: LabelSepOpt = ",",
    cache_dir: CacheDirOpt = None,
    no_cache: NoCacheOpt = False,
    tier: TierOpt = None,
) -> None:
    """Evaluate the bundle's heads on DATA (heads whose field DATA lacks are skipped)."""
    metrics, notes = workflows.evaluate_file(
        data,
        bundle,
        heads=_split(heads),
        text_field=text_field,
        label_sep=label_sep,
        cache_dir=cache_dir,
        no_cache=no_cache,
        tier=tier,
    )
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if as_json:
        typer.echo(json.dumps({"heads": metrics}))
        return
    rows = [
        [
            n,
            m["kind"],
            m["n"],
            m.get("accuracy"),
            m.get("macro_f1"),
            m.get("micro_f1"),
            m.get("ece"),
        ]
        for n, m in metrics.items()
    ]
    typer.echo(_table(rows, ["head", "kind", "n", "accuracy", "macro_f1", "micro_f1", "ece"]))


def _answer_cell(name: str, answer: dict[str, Any]) -> str:
    """``head: label 0.98``, ``head: a 0.91, b 0.62`` (multilabel), ``head: -`` (none)."""
    if "labels" in answer:
        scores = answer.get("scores", {})
        picked = [
            f"{lab} {scores[lab]:.2f}" if lab in scores else str(lab) for lab in answer["labels"]
        ]
        return f"{name}: {', '.join(picked) or '-'}"
    if answer["label"] is None:
        return f"{name}: -"
    return f"{name}: {answer['label']} {answer['score']:.2f}"


def _compact(number: int, text: str, answer: dict[str, Any]) -> str:
    """One line per text for a terminal: its number, its start, each head's answer."""
    preview = json.dumps(text[:37] + ("..." if len(text) > 37 else ""), ensure_ascii=False)
    cells = "  ".join(_answer_cell(n, a) for n, a in answer.items())
    return f"{number:>3}  {preview:<42}  {cells}"


@app.command()
def predict(
    texts: Annotated[list[str] | None, typer.Argument(help="Texts to classify.")] = None,
    bundle: AnyBundleOpt = None,
    input_file: Annotated[
        Path | None,
        typer.Option(
            "--input",
            "-i",
            help="CSV/TSV/JSONL/Parquet (--text-field) or plain text, one text per line.",
        ),
    ] = None,
    text_field: TextFieldOpt = "text",
    heads: HeadsOpt = None,
    tier: TierOpt = None,
    max_chars: MaxCharsOpt = 100_000,
    long_texts: LongTextsOpt = "refuse",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="JSON lines even on a terminal (always when the output is piped)."
        ),
    ] = False,
    scores: Annotated[
        str | None,
        typer.Option(
            "--scores",
            help="Class scores in the JSON lines: all (default), top (the best five) or "
            "none; implies --json.",
        ),
    ] = None,
) -> None:
    """Answer each text with every head: one compact line per text on a terminal, one
    JSON line per text when piped or with --json (a file is read as it goes)."""
    as_json = as_json or scores is not None or not sys.stdout.isatty()
    rows = workflows.predict_rows(
        bundle or workflows.DEFAULT_BUNDLE,
        texts or [],
        input_file=input_file,
        text_field=text_field,
        heads=_split(heads),
        tier=tier,
        max_chars=max_chars,
        long_texts=long_texts,
        scores=scores or "all",
    )
    for number, (text, answer) in enumerate(rows, 1):
        line = json.dumps(answer, ensure_ascii=False) if as_json else _compact(number, text, answer)
        typer.echo(line)


@app.command("export")
def export(
    bundle: BundleOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="New (or empty) folder to write.")],
    int8: Annotated[
        bool, typer.Option("--int8", help="Quantise the encoder's weights to int8 (dynamic).")
    ] = False,
) -> None:
    """Export the bundle to one ONNX graph (trunk + every head): a bundle that runs
    with onnxruntime, without torch."""
    folder = workflows.export_file(bundle, out, int8=int8)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    typer.echo(f"exported {bundle} to {folder} ({size / 1e6:.1f} MB{', int8' if int8 else ''})")


@app.command("copy")
def copy(
    source: Annotated[str, typer.Argument(help="Bundle folder, or a built-in bundle's name.")],
    out: Annotated[Path, typer.Argument(help="New (or empty) folder to write.")],
) -> None:
    """Copy a bundle whole (tiers and kept training data too), e.g. the read-only
    built-in bundle, into a folder of your own to change."""
    folder = copy_bundle(source, out)
    typer.echo(f"copied {source} to {folder}")


@app.command()
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
    from .bundle import bundle_folder
    from .errors import require
    from .serve import ServeConfig, check_listen, create_app, load_api_keys

    uvicorn = require("uvicorn", "serve")
    check_listen(host, port)  # before loading anything, and before announcing
    if max_connections < 1:
        raise ManyheadsError(f"--max-connections must be a positive integer, got {max_connections}")
    name = bundle or workflows.DEFAULT_BUNDLE
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
    cache = workflows._cache_arg(cache_dir, no_cache)
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


@heads_app.command("list")
def heads_list(
    bundle: BundleOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Name, kind, number of labels and validation metrics of each head."""
    rows = workflows.list_heads(bundle)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = [
        [
            r["name"],
            r["kind"],
            r["labels"],
            r["field"],
            r["n_train"],
            r["metrics"].get("accuracy"),
            r["metrics"].get("macro_f1"),
            r["metrics"].get("micro_f1"),
            r["metrics"].get("ece"),
        ]
        for r in rows
    ]
    typer.echo(
        _table(
            table,
            [
                "head",
                "kind",
                "labels",
                "field",
                "train",
                "val_acc",
                "val_macro_f1",
                "val_micro_f1",
                "val_ece",
            ],
        )
    )


@heads_app.command("rm")
def heads_rm(
    name: Annotated[str, typer.Argument(help="Head to remove.")],
    bundle: BundleOpt,
) -> None:
    """Remove one head from the bundle (saved atomically)."""
    workflows.remove_head(bundle, name)
    typer.echo(f"removed head {name!r} from {bundle}")


def _command() -> TyperGroup:
    """The click command of ``app``, every value shown in help as its name (``--bundle
    BUNDLE``, ``DATA``), not as a Python type."""
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)

    def name_values(cmd: TyperCommand | TyperGroup) -> None:
        for param in cmd.params:
            flag = isinstance(param, TyperOption) and param.is_flag
            if not flag and param.name:
                param.metavar = param.name.upper()
        if isinstance(cmd, TyperGroup):
            for sub in cmd.commands.values():
                if isinstance(sub, TyperCommand | TyperGroup):
                    name_values(sub)

    name_values(command)
    return command


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning library errors into one line and exit code 1."""
    try:
        _command().main(args=argv, prog_name="manyheads", standalone_mode=False)
    except ManyheadsError as exc:
        typer.echo(f"manyheads: error: {exc}", err=True)
        return 1
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("manyheads: interrupted", err=True)
        return 130
    except typer.TyperException as exc:  # usage errors: message and usage, exit 2
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            typer.echo(f"manyheads: error: {exc}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except BrokenPipeError:
        return 0
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
