"""Build the built-in ``content`` bundle (``src/manyheads/models/content``).

    .venv/bin/python scripts/build_content_bundle.py [--shared ../shared/data]

Reads the shared corpora (code, gettext, Debian descriptions) and real files of
the Debian system it runs on (/etc, /usr/share/doc, /usr/share/man, /var/log,
...), see ``scripts/content_data.py`` for what becomes which label. Splits the
rows by group into train (70%) / validation (15%) / test (15%); trains the byte
trunk on the train part with all four tasks at once; fits the bundle's heads
on the train part with the validation part for calibration and thresholds;
reports accuracy on the test part; saves the bundle atomically. The same seed
on the same data gives the same rows and split (training on CPU is seeded too).

Beside the shared corpora and system files, it reads the manual pages' paragraphs
(``--man-per-language``), the fortunes (``--fortunes-per-language``) and generated
shapes (``--shapes-per-kind``: ordinary short texts with no secret, secrets in
their usual shapes, short snippets), see ``scripts/content_shapes.py``.
``--task-weights`` weighs a task's loss in the trunk's training (``risk`` 4 by
default: a secret is rare among the rows and a miss or a false alarm costs most);
``--start FOLDER`` goes on training the trunk of a bundle this script built (for
``--epochs`` more) instead of training one from new weights.

``--rows PATH`` also writes the labelled rows with their split (gzipped JSON
lines) for ``bench/content_eval.py``. ``--trunk-from FOLDER`` takes the trunk
of a bundle this script built (training is deterministic: the same trunk the
same options would train) and only fits the heads anew. ``--reexport FOLDER
--out NEW`` writes a built bundle again with its graph exported by this
version (same weights and heads), instead of building.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import content_data as cd  # noqa: E402
import content_shapes as cs  # noqa: E402

from manyheads import Bundle  # noqa: E402
from manyheads.train.byte import train_byte_trunk  # noqa: E402
from manyheads.trunks.byte import BAG_INITS, ByteConfig  # noqa: E402

SYSTEM_ROOTS = [
    "/etc",
    "/usr/share/doc",
    "/usr/share/man",
    "/usr/share/common-licenses",
    "/usr/share/misc",
    "/usr/share/zoneinfo",
    "/usr/share/iso-codes",
    "/var/log",
]
TASKS = {
    "code_language": "multiclass",
    "language": "multiclass",
    "kind": "multiclass",
    "risk": "multilabel",
}


def evaluate(bundle: Bundle, rows: list[dict]) -> dict:
    """Per-head test scores (:func:`content_data.score`)."""
    answers = bundle.predict([r["text"] for r in rows])
    return cd.score(rows, cd.answers_to_labels(answers))


def head_rows(rows: list[dict], name: str, most: int | None, zxx_per_kind: int) -> list[dict]:
    """The rows head ``name`` learns from, in their order: those with its label, at most
    ``most`` (``None``: all); for ``language``, ``most`` natural-language rows and at
    most ``zxx_per_kind`` rows labelled zxx of each kind (code, config, data, log: code
    rows outnumber the others tenfold and would drown them)."""
    labelled = [r for r in rows if r[name] is not None]
    if name != "language":
        return labelled[:most]
    natural = [r for r in labelled if r[name] != cd.ZXX][:most]
    taken: Counter[str] = Counter()
    bare = []
    for r in labelled:
        if r[name] == cd.ZXX and taken[r["kind"]] < zxx_per_kind:
            taken[r["kind"]] += 1
            bare.append(r)
    keep = {id(r) for r in natural + bare}
    return [r for r in labelled if id(r) in keep]


def head_names(option: str, value: str) -> list[str]:
    """The heads named in a comma-separated option's ``value``, each one of ``TASKS``."""
    names = [n for n in value.split(",") if n]
    unknown = sorted(set(names) - set(TASKS))
    if unknown:
        raise SystemExit(f"{option}: unknown heads {', '.join(unknown)}")
    return names


def drop_locks(folder: Path) -> None:
    """Remove the save locks (``.lock``) the bundle folders keep: not for the package."""
    for lock in folder.rglob(".lock"):
        lock.unlink()


def reexport(source: Path, out: Path) -> int:
    """Save the bundle at ``source`` (and its tiers) to ``out`` with a newly exported
    graph: the same weights and heads, so the same fingerprints and answers."""
    from manyheads._io import atomic_write_bytes

    if out.resolve() == source.resolve():
        raise SystemExit("--reexport: give another --out folder than the bundle's own")
    main = Bundle.load(source, cache=None)
    tiers = main.tier_bundles()
    main.trunk.drop_graph()
    main.save(out)
    main.save_tiers(tiers)
    if (source / "SOURCES.json").is_file():
        atomic_write_bytes(out / "SOURCES.json", (source / "SOURCES.json").read_bytes())
    drop_locks(out)
    print(f"saved {out} with graph {main.trunk.graph}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "src" / "manyheads" / "models" / "content")
    p.add_argument("--rows", type=Path, default=None, help="also write the labelled rows here")
    p.add_argument(
        "--rows-only", action="store_true", help="write --rows and stop (no bundle is built)"
    )
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument(
        "--path-dropout", type=float, default=0.5, help="share of texts trained on the bag alone"
    )
    p.add_argument(
        "--bag-init", choices=BAG_INITS, default="small", help="how the bag table starts"
    )
    p.add_argument(
        "--prose-per-language", type=int, default=3000, help="texts per language at most"
    )
    p.add_argument(
        "--crop",
        type=float,
        default=0.3,
        help="share of texts read as a random piece of themselves at each epoch",
    )
    p.add_argument(
        "--crop-tasks",
        default="code_language,language",
        help="tasks whose labels a piece keeps (comma-separated; the others skip it)",
    )
    p.add_argument(
        "--snippets-per-type",
        type=int,
        default=2500,
        help="snippet rows of each type (SQL, Markdown, YAML, licensed scripts) at most",
    )
    p.add_argument(
        "--man-per-language",
        default='{"en": 4000, "*": 600}',
        help="manual-page paragraphs per language at most (JSON; '*': any other)",
    )
    p.add_argument("--fortunes-per-language", type=int, default=1500)
    p.add_argument(
        "--shapes-per-kind",
        type=int,
        default=400,
        help="generated rows of each shape (secret shapes: half as many)",
    )
    p.add_argument(
        "--task-weights",
        default='{"risk": 4}',
        help="a factor on each named task's loss in the trunk's training (JSON)",
    )
    p.add_argument(
        "--start",
        type=Path,
        default=None,
        help="a bundle folder built by this script: train its trunk further",
    )
    p.add_argument("--head-rows", type=int, default=40_000)
    p.add_argument(
        "--zxx-per-kind",
        type=int,
        default=5000,
        help="rows labelled zxx the language head learns from, at most, of each kind (code, "
        "config, data, log), beside --head-rows natural-language rows",
    )
    p.add_argument(
        "--all-rows-heads",
        default="code_language,risk",
        help="heads fitted on every train row with their label, not --head-rows of them "
        "(comma-separated; code_language: only ~1 row in 5 is code; risk: the short "
        "shapes are ~5%% of the rows)",
    )
    p.add_argument(
        "--balanced-heads",
        default="language",
        help="heads fitted with balanced class weights (comma-separated; language: its "
        "zxx rows outnumber each language's many times over, and unweighted they pull "
        "short prose to zxx)",
    )
    p.add_argument(
        "--precision-heads",
        default="risk",
        help="heads whose thresholds maximise F0.5 on the validation part, not F1 "
        "(comma-separated; risk: a false alarm on ordinary text costs more than a miss)",
    )
    p.add_argument(
        "--trunk-from",
        type=Path,
        default=None,
        help="a bundle folder built by this script: use its trunk, fit only the heads",
    )
    p.add_argument("--tier", type=int, default=None, help="tier the heads use (default: largest)")
    p.add_argument(
        "--config",
        default='{"ngrams": 0, "heads": 0, "grams": 4, "bag": 16384, "bag_dim": 128, "int8": true, '
        '"bag_norm": "l2log"}',
        help="ByteConfig fields as JSON",
    )
    p.add_argument("--limit", type=int, default=None, help="use only this many rows (trial runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--reexport",
        type=Path,
        default=None,
        help="write the bundle in this folder again to --out (same weights and heads, its "
        "graph exported anew by this version) instead of building one",
    )
    args = p.parse_args(argv)
    if args.reexport:
        return reexport(args.reexport, args.out)
    all_rows = set(head_names("--all-rows-heads", args.all_rows_heads))
    crop_tasks = head_names("--crop-tasks", args.crop_tasks)
    balanced = set(head_names("--balanced-heads", args.balanced_heads))
    precise = set(head_names("--precision-heads", args.precision_heads))
    if args.trunk_from and args.trunk_from.resolve() == args.out.resolve():
        raise SystemExit("--trunk-from: give another --out folder than the bundle's own")
    if args.rows_only and not args.rows:
        raise SystemExit("--rows-only: give --rows PATH")
    if args.start and not (args.start / "SOURCES.json").is_file():
        raise SystemExit(f"--start: {args.start} has no SOURCES.json (not built here)")
    if args.trunk_from and not (args.trunk_from / "SOURCES.json").is_file():
        raise SystemExit(f"--trunk-from: {args.trunk_from} has no SOURCES.json (not built here)")

    t0 = time.perf_counter()
    roots = [Path(r) for r in SYSTEM_ROOTS if Path(r).is_dir()]
    rows = cd.collect(
        args.shared,
        roots,
        seed=args.seed,
        prose_per_language=args.prose_per_language,
        snippet_roots=[Path(r) for r in cd.SNIPPET_ROOTS if Path(r).is_dir()],
        snippets_per_type=args.snippets_per_type,
        more=cs.more_rows(
            args.shared,
            args.seed,
            Path("/usr/share/man"),
            json.loads(args.man_per_language),
            args.fortunes_per_language,
            args.shapes_per_kind,
        ),
    )
    if args.limit:
        rows = rows[: args.limit]
    for r in rows:
        r["split"] = cd.split_of(r["group"], args.seed)
    info = cd.summary(rows)
    print(f"{len(rows)} rows ({info['generated']} generated) in {time.perf_counter() - t0:.0f} s")
    if args.rows:
        args.rows.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(args.rows, "wt", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if args.rows_only:
        return
    part = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}

    config = ByteConfig.from_settings(json.loads(args.config))
    train = part["train"]
    training = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "path_dropout": args.path_dropout,
        "bag_init": args.bag_init,
        "crop": args.crop,
        "crop_tasks": crop_tasks,
        "task_weights": json.loads(args.task_weights),
        "start": None,
    }
    if args.trunk_from:
        built = Bundle.load(args.trunk_from, cache=None)
        trunk = built.trunk.with_tier(built.trunk.config.dims[-1])
        config = trunk.config
        doc = json.loads((args.trunk_from / "SOURCES.json").read_text(encoding="utf-8"))
        older = {"crop": 0.0, "crop_tasks": [], "task_weights": {}, "start": None}  # earlier builds
        training = {k: doc.get(k, older.get(k)) for k in [*training, "trunk_seconds", "losses"]}
        print(f"trunk of {args.trunk_from} (trained {training['trunk_seconds']:.0f} s)")
    else:
        tasks = {n: ([r[n] for r in train], kind) for n, kind in TASKS.items()}
        start = None
        if args.start:
            built = Bundle.load(args.start, cache=None)
            start = built.trunk.with_tier(built.trunk.config.dims[-1])
            config = start.config
            before = json.loads((args.start / "SOURCES.json").read_text(encoding="utf-8"))
            training["start"] = {
                "folder": str(args.start),
                "epochs": before.get("epochs"),
                "trunk_seconds": before.get("trunk_seconds"),
                "start": before.get("start"),
            }
        # language is learnt from prose only; risk from every row
        trunk, summary = train_byte_trunk(
            [r["text"] for r in train], tasks, config=config, epochs=args.epochs,
            seed=args.seed, batch_size=args.batch_size, lr=args.lr,
            path_dropout=args.path_dropout, bag_init=args.bag_init, crop=args.crop,
            crop_tasks=crop_tasks, task_weights=training["task_weights"], start=start,
            progress=True,
        )  # fmt: skip
        training.update(trunk_seconds=summary.seconds, losses=summary.losses)
        print(
            f"trunk: {summary.seconds:.0f} s, loss per epoch "
            + ", ".join(f"{x:.3f}" for x in summary.losses)
        )
    main_tier = args.tier or config.dims[-1]
    bundles, scores = {}, {}
    for tier in config.dims:  # heads at every tier: `--tier` picks one at prediction time
        bundle = Bundle(trunk=trunk.with_tier(tier), cache=None)
        for name, kind in TASKS.items():
            # heads learn from at most --head-rows rows (C is searched on each: minutes)
            tr = head_rows(
                train, name, None if name in all_rows else args.head_rows, args.zxx_per_kind
            )
            va = [r for r in part["val"] if r[name] is not None][: args.head_rows // 4]
            s = bundle.fit_head(
                name,
                [r["text"] for r in tr],
                [r[name] for r in tr],
                kind=kind,
                val_texts=[r["text"] for r in va],
                val_labels=[r[name] for r in va],
                C="auto",
                thresholds="f0.5" if name in precise else "f1",
                class_weight="balanced" if name in balanced else None,
                keep_data=False,
            )
            print(f"tier {tier} head {name}: validation {s.metrics}", flush=True)
        bundles[tier] = bundle
        scores[tier] = evaluate(bundle, part["test"])
        print(f"tier {tier} test: {json.dumps(scores[tier])}", flush=True)
    if not args.limit:
        from manyheads._io import atomic_write_text

        main = bundles.pop(main_tier)
        main.save(args.out)
        main.save_tiers(bundles)
        sources = {
            "summary": info,
            "test": scores,
            **training,
            "prose_per_language": args.prose_per_language,
            "head_rows": args.head_rows,
            "zxx_per_kind": args.zxx_per_kind,
            "snippets_per_type": args.snippets_per_type,
            "man_per_language": json.loads(args.man_per_language),
            "fortunes_per_language": args.fortunes_per_language,
            "shapes_per_kind": args.shapes_per_kind,
            "all_rows_heads": sorted(all_rows),
            "balanced_heads": sorted(balanced),
            "precision_heads": sorted(precise),
            "config": config.to_json(),
            "tier": main_tier,
        }
        atomic_write_text(args.out / "SOURCES.json", json.dumps(sources, indent=1) + "\n")
        drop_locks(args.out)
        size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
        print(f"saved {args.out} ({size / 1e6:.2f} MB)")
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
