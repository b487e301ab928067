"""What the commands share: option types, reading ``--heads``, printing tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .. import jobs
from ..bundle import BUILTIN_BUNDLES, has_bundle


def bundle_note(value: str | None) -> str | None:
    """Say which bundle answers when a built-in name is also a folder here."""
    name = jobs.DEFAULT_BUNDLE if value is None else value
    if name in BUILTIN_BUNDLES and has_bundle(Path(name)):
        typer.echo(
            f"manyheads: note: {name!r} is the built-in bundle; the bundle folder ./{name} "
            f"here is used when written as a path: -b ./{name}",
            err=True,
        )
    return value


# every option's and argument's help, by flag (or COMMAND:flag where commands differ)
HELP: dict[str, str | None] = {
    "train:data": "CSV, TSV, JSONL or Parquet file.",
    "--task": (
        "A head to train: NAME[=FIELD][:KIND], FIELD defaulting to NAME and KIND to "
        "multiclass (or binary, multilabel, hierarchical), e.g. topic, lang=language, "
        "tags:multilabel, tags:hierarchical; repeat for more heads."
    ),
    "--group-field": "Rows sharing a group stay on one side of the train/validation split.",
    "--trunk": (
        "Trunk of a new bundle: minilm+tfidf (default), minilm, hashing, tfidf, ngram, static "
        "(static:PATH), fast (static+ngram), a model "
        "folder path, or several joined by '+' (with weights: minilm@1+tfidf@0.5); or byte (a"
        " byte trunk trained here on the file's tasks)."
    ),
    "--tier": (
        "--trunk byte: the tier (one of the trunk's dims) the bundle answers at (default: the"
        " largest); the other tiers go to BUNDLE/tiers/."
    ),
    "--trunk-epochs": "--trunk byte: training epochs (default 4).",
    "--byte-config": (
        "--trunk byte: the trunk's shape, a JSON object of ByteConfig fields (e.g. "
        '\'{"channels": 64, "dims": [32, 64]}\').'
    ),
    "--val-fraction": "Share of rows held out to validate each head.",
    "--C": (
        "Inverse regularisation strength, or 'auto' (default) to pick it on the validation split."
    ),
    "--class-weight": "'balanced' for imbalanced labels.",
    "--part-weights": (
        "On a composite trunk: auto (default) lets each linear head weigh the trunk's parts "
        "on its validation split; fixed keeps the trunk's weights."
    ),
    "--head": (
        "linear (fused, default), mlp (one hidden layer), or auto (the better of both on the "
        "validation split)."
    ),
    "--thresholds": (
        "What binary/multilabel thresholds maximise on the validation split: accuracy "
        "(default), f1, or f0.5 (precision weighs twice: fewer false alarms)."
    ),
    "--seed": "Seed of the split and of training (same seed, same heads).",
    "finetune:data": "CSV, TSV, JSONL or Parquet file.",
    "--epochs": "Fine-tuning epochs.",
    "--max-length": "Tokens per text while training (truncated).",
    "--batch-size": None,
    "--lr": "Trunk learning rate.",
    "--holdout": "Share of the rows (grouped) left out of fine-tuning to calibrate the heads on.",
    "finetune:--group-field": None,
    "absorb:data": "Unlabelled texts: CSV, TSV, JSONL or Parquet file (--text-field).",
    "--teacher": (
        "A classifier to absorb as head NAME: NAME=SOURCE, SOURCE a Hugging Face "
        "sequence-classification folder, BUNDLE#HEAD (a head of another bundle) or a JSONL "
        'file of its answers to DATA\'s texts ({"text", "scores": {label: p}} or {"text", '
        '"label"}); repeat for more.'
    ),
    "absorb:--finetune": (
        "First fine-tune the bundle's transformer on every teacher's answers at once (LP-FT)."
    ),
    "absorb:--eval": (
        "A labelled file (columns named like the teachers): accuracy and macro-F1 of each "
        "head and of its teacher side by side."
    ),
    "--temperature": "Softens the teachers' answers the heads learn from.",
    "absorb:--heldout": (
        "Share of DATA (grouped) held out to measure agreement with the teachers and speed."
    ),
    "absorb:--epochs": "--finetune: fine-tuning epochs.",
    "--speed-texts": "Held-out texts timed through the teachers and the bundle (0: no timing).",
    "absorb:--group-field": "Rows sharing a group stay on one side of the splits.",
    "eval:data": "Labelled CSV, TSV, JSONL or Parquet file.",
    "--json": "Print one JSON object.",
    "predict:texts": "Texts to classify.",
    "--input": "CSV/TSV/JSONL/Parquet (--text-field) or plain text, one text per line.",
    "predict:--json": "JSON lines even on a terminal (always when the output is piped).",
    "--scores": (
        "Class scores in the JSON lines: all (default), top (the best five) or none; implies "
        "--json."
    ),
    "--out": "New (or empty) folder to write.",
    "--int8": (
        "Quantise the encoder's weights to int8 (dynamic); the float graph is kept too and "
        "answers again the texts some head is unsure of (calibrated on the kept training "
        "texts), so the folder is about 4x the int8 graph alone (MiniLM: ~119 MB, not ~28)."
    ),
    "--no-recheck": (
        "With --int8: keep no float graph; int8 answers every text (about a quarter of the size)."
    ),
    "copy:source": "Bundle folder, or a built-in bundle's name.",
    "copy:out": "New (or empty) folder to write.",
    "--host": "Address to listen on.",
    "--port": "Port to listen on.",
    "--api-key-file": (
        "File of API keys, one per line. Write endpoints always need a key; with this file, "
        "reads too (not /healthz, /readyz, the page at /)."
    ),
    "--max-batch": "Most texts merged into one trunk pass.",
    "--max-wait-ms": "Longest wait for more requests to merge (only under concurrent load).",
    "--watch": "Reload the bundle when its folder changes on disk.",
    "--max-texts": "Most texts in one predict request.",
    "--max-body-mb": "Largest request body, in MB.",
    "--max-pass-chars": (
        "Most characters in one trunk pass: a bigger request is answered over several passes,"
        " taking turns with the others; a longer text gets passes of its own."
    ),
    "--max-pass-tokens": (
        "Most tokens in one trunk pass, for a trunk that reads token windows (a transformer,"
        " an exported one): a text of more is read a few windows per pass, other requests"
        " answered between them."
    ),
    "--max-label-chars": "Most characters in one label.",
    "--max-heads": "Most heads in the bundle.",
    "--body-timeout": "Seconds to wait for the next piece of a request body (408).",
    "--max-connections": "Most connections and requests at once; beyond it the server answers 503.",
    "heads list:--json": "Print JSON.",
    "heads rm:name": "Head to remove.",
    "any:--tier": "Byte bundles: the tier (embedding size) to answer at (default: the bundle's).",
    "--text-field": "Field holding the text.",
    "--heads": "Comma-separated subset of heads (default: all).",
    "--cache-dir": (
        "Embedding cache folder (default: $MANYHEADS_CACHE_DIR or the user cache folder)."
    ),
    "--no-cache": "Do not use the embedding cache.",
    "--max-chars": "Most characters in one text (see --long-texts).",
    "--long-texts": (
        "Texts over --max-chars: 'refuse' (an error naming the text) or 'window' (read in "
        "pieces of --max-chars, probabilities averaged)."
    ),
    "--report": (
        "A folder to write report.html (figures of each head's answers: confusions, F1 "
        "per label, reliability before and after temperature scaling, scores) and "
        "report.json into (the report extra: matplotlib)."
    ),
    "--protocol": (
        "holdout (the bundle's heads on DATA), mteb (MTEB's classification protocol: "
        "fresh logistic regressions on k rows a label of --train, scored on DATA, 10 "
        "experiments) or kfold (fresh heads like the bundle's, k-fold on DATA); mean ± std."
    ),
    "--train": "--protocol mteb: the labelled file the fresh classifiers learn from.",
    "--k": "--protocol mteb: training rows per label in each experiment (default 8).",
    "--experiments": "--protocol mteb: experiments (default 10).",
    "--folds": "--protocol kfold: folds (default 5).",
    "eval:--group-field": "--protocol kfold: rows sharing a group stay in one fold.",
    "eval:--seed": "--protocol mteb: 42 (MTEB's); kfold: 0.",
    "diagnose:data": "Labelled CSV, TSV, JSONL or Parquet file (--teacher: or plain text).",
    "diagnose:--task": (
        "A task to rank trunks for: NAME[=FIELD][:KIND], as train names heads (multiclass, "
        "binary, multilabel, hierarchical); repeat for more tasks."
    ),
    "diagnose:--trunk": (
        "A trunk to judge (any --trunk of train: minilm, hashing, tfidf, static, "
        "minilm+tfidf, a model folder, ...); repeat for more trunks."
    ),
    "diagnose:--teacher": (
        "A teacher to compare instead of ranking trunks: NAME=SOURCE (a Hugging Face "
        "classification folder, BUNDLE#HEAD or a JSONL file of answers); give two or more."
    ),
    "diagnose:--group-field": (
        "Rows sharing a group are never each other's neighbours and stay on one side of the "
        "probe's split."
    ),
    "--sample": "Rows read at random from DATA (default 1500; --teacher: 500).",
    "diagnose:--k": "Neighbours of the kNN accuracy and the discordance (default 10).",
    "--threshold": (
        "--teacher: the linear CKA every two teachers of a suggested group reach (default 0.8)."
    ),
    "diagnose:--seed": "Seed of the sample, the probe's split and the discordance's draws.",
    "diagnose:--report": (
        "A folder to write report.html (the scores of each trunk for each task as bars, or "
        "the teachers' CKA and Gromov-Wasserstein as heat maps) and report.json into (the "
        "report extra: matplotlib)."
    ),
    "label:--long-texts": (
        "Texts over --max-chars: 'refuse' (a bad row, in the errors file) or 'window' "
        "(read in pieces of --max-chars, probabilities averaged)."
    ),
    "--max-labels": "Most labels (classes) of one head.",
    "--label-sep": "Separator of multilabel fields given as strings.",
    "--label-path-sep": (
        "What separates the parts of a hierarchical head's labels (role::program; a/b/c with '/')."
    ),
    "label:input": "A JSONL, JSONL.gz, CSV, TSV or Parquet file, or a folder of them.",
    "--output": (
        "The file to write (its format from its name: .jsonl, .jsonl.gz, .csv, .tsv, "
        ".parquet; or --format); the job's parts wait beside it in OUTPUT.parts/. "
        "--engine ray: a folder, with a folder of files for each input file."
    ),
    "--id-field": "A field naming each row, copied into the errors file.",
    "label:--batch-size": "Texts per trunk pass.",
    "--format": (
        "Format of OUTPUT: jsonl, csv, tsv or parquet (default: from its name; a folder "
        "of parts with --engine ray: jsonl)."
    ),
    "--input-format": (
        "Format of INPUT's files: jsonl, csv, tsv or parquet (default: from each name)."
    ),
    "label:--scores": ("Class scores kept in JSONL: all, top (the best five; default) or none."),
    "--engine": "local (this machine) or ray (Ray Data: this machine or a cluster).",
    "--address": "--engine ray: the Ray cluster to connect to (default: a local one).",
    "--workers": (
        "--engine local: processes answering parts side by side, each loading the bundle "
        "once (for trunks that do not use every core; default 1). --engine ray: the "
        "actors (default one per CPU of the cluster)."
    ),
    "--restart": "Start over: drop the parts and output of an earlier run.",
    "--fail-on-bad-rows": "Exit with code 1 when a row could not be labelled.",
}


def opt(key: str, *more: str) -> Any:
    """The typer option of flag ``key`` (``COMMAND:--flag`` for a command's own help),
    also answering to the flags ``more``; its help from :data:`HELP`."""
    return typer.Option(key.rsplit(":", 1)[-1], *more, help=HELP[key])


def arg(key: str) -> Any:
    """The typer argument ``COMMAND:name``, its help from :data:`HELP`."""
    return typer.Argument(help=HELP[key])


# a string, not a Path: "./content" (a folder) and "content" (the built-in) differ
BundleOpt = Annotated[
    str,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder (a built-in bundle by name: {', '.join(BUILTIN_BUNDLES)}).",
        callback=bundle_note,
    ),
]
AnyBundleOpt = Annotated[
    str | None,
    typer.Option(
        "--bundle",
        "-b",
        help=f"Bundle folder, or a built-in bundle: {', '.join(BUILTIN_BUNDLES)} "
        f"(default: {jobs.DEFAULT_BUNDLE}); a folder named like one is written "
        "as a path (./content).",
        callback=bundle_note,
    ),
]
TierOpt = Annotated[int | None, opt("any:--tier")]
TextFieldOpt = Annotated[str, opt("--text-field")]
HeadsOpt = Annotated[str | None, opt("--heads")]
CacheDirOpt = Annotated[Path | None, opt("--cache-dir")]
NoCacheOpt = Annotated[bool, opt("--no-cache")]
MaxCharsOpt = Annotated[int, opt("--max-chars")]
LongTextsOpt = Annotated[str, opt("--long-texts")]
MaxLabelsOpt = Annotated[int, opt("--max-labels")]
LabelSepOpt = Annotated[str, opt("--label-sep")]


def split_names(heads: str | None) -> list[str] | None:
    if heads is None:
        return None
    names = [h.strip() for h in heads.split(",") if h.strip()]
    if not names:
        raise typer.BadParameter("--heads needs at least one head name")
    return names


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def trunk_line(summary: Any) -> str:
    """The byte trunk's training: time, loss per epoch, learned task weights."""
    losses = ", ".join(f"{v:.4f}" for v in summary.losses)
    weights = ", ".join(f"{n} {w:.3f}" for n, w in summary.task_weights.items())
    return (
        f"trained byte trunk in {summary.seconds:.1f} s ({summary.epochs} epochs, "
        f"{summary.steps} steps; loss per epoch: {losses}; task weights: {weights})"
    )


def tiers_table(tiers: dict[int, list[Any]]) -> str:
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
    return table(rows, header)


def summary_table(summaries: list[Any]) -> str:
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
    return table(rows, header)
