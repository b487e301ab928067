"""A bundle that keeps learning: a prequential stream (answer a chunk, then learn from it).

Real Debian package descriptions (``../shared/data/debdesc.jsonl.gz``), heads ``lang``
and ``section``. A source-package family (``group``) is in the initial rows, in one
chunk, or nowhere (a family that would overflow a chunk is cut there); a chunk's rows
are shuffled. Before the shift (phase A): English, Danish and Italian descriptions of
families with no package in the new sections (rust, golang, haskell, javascript, ruby,
gnu-r); after it (phase B): every language of a family's translations and, for about
``--new-share`` of the families, a package in a new section.

A bundle (``--trunk``) is trained on ``--initial`` phase-A rows. The stream is
``--rows`` rows, half phase A then half phase B, in chunks of ``--chunk`` rows. Each
chunk is answered (the accuracy curve), then ``--feedback`` of its rows, at random, get
their true labels as corrections, and each learner learns from those only:

- **frozen**: the initial bundle, never changed;
- **updates**: ``Bundle.add_feedback`` of the corrections, then ``Bundle.update_heads()``
  (refit, judged against the old head, promoted when not worse); timed together;
- **retrain**: every ``--retrain-every`` chunks a new bundle from scratch on the initial
  rows and every correction so far (the labels the updates had), timed with its trunk
  pass (``--retrain-pass run``: no cache; ``charged``: cached embeddings plus the time
  this run's first pass over those rows took, for a slow trunk);
- **river**: per head an online pipeline (``--river``) that learns the initial rows, then
  answers each chunk and learns its corrections (``learn_one``).

Then **drift**: the frozen bundle's answers on a stationary stream (``--rows`` phase-A
rows: the stream's first half and as many more) and on the shifted stream, read by
``manyheads.learn.drift.drift_table`` over the last ``--drift-window`` answers every
``--drift-step`` rows; and the **guard**: the initial bundle gets ``--guard-rows``
corrections of unseen phase-A rows, ``--guard-wrong`` of them wrong, then
``update_heads()``: what it reports beside the accuracy, on clean unseen rows, of the
old head and of a head fitted on the same rows; and the same with no wrong corrections.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/stream.py [--quick] [--trunk static] \\
        [--json bench/results/stream.json] [--figure bench/results/stream.png]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from _common import CACHE_DIR, SHARED, cpu_model, machine, write_json

from manyheads import Bundle, EmbeddingCache

HEADS = ("lang", "section")
OLD_LANGS = ("en", "da", "it")
NEW_SECTIONS = ("rust", "golang", "haskell", "javascript", "ruby", "gnu-r")
MAX_GROUP_ROWS = 20  # rows kept of one family: more families, more variety
Row = dict[str, Any]


# -- the stream ---------------------------------------------------------------


def _families(seed: int) -> tuple[list[list[Row]], list[list[Row]], list[list[Row]]]:
    """Shuffled families: (phase A: old languages, no new section; phase B without a
    new section; phase B with one), each family's rows at most MAX_GROUP_ROWS."""
    by_group: dict[str, list[Row]] = {}
    with gzip.open(SHARED, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("section") and row.get("text", "").strip():
                by_group.setdefault(row["group"], []).append(row)
    names = sorted(by_group)
    random.Random(seed).shuffle(names)
    plain, new = [], []
    for g in names:
        rows = by_group[g]
        (new if any(r["section"] in NEW_SECTIONS for r in rows) else plain).append(rows)
    # half the plain families before the shift (old languages only), half after
    before = [[r for r in rows if r["lang"] in OLD_LANGS] for rows in plain[::2]]
    before = [rows[:MAX_GROUP_ROWS] for rows in before if rows]
    after = [rows[:MAX_GROUP_ROWS] for rows in plain[1::2]]
    return before, after, [rows[:MAX_GROUP_ROWS] for rows in new]


def _chunks(families: Sequence[list[Row]], n_chunks: int, size: int) -> list[list[Row]]:
    """``n_chunks`` chunks of exactly ``size`` rows, whole families, taken in order (a
    family that would overflow a chunk is cut there)."""
    out: list[list[Row]] = [[]]
    for rows in families:
        if len(out) > n_chunks:
            break
        room = size - len(out[-1])
        out[-1].extend(rows[:room])
        if len(out[-1]) == size:
            out.append([])
    chunks = out[:n_chunks]
    if len(chunks) < n_chunks or len(chunks[-1]) < size:
        raise SystemExit(f"not enough rows for {n_chunks} chunks of {size}")
    return chunks


def build_stream(args: argparse.Namespace) -> dict[str, Any]:
    """The initial rows, the stationary chunks, the shifted chunks, guard rows."""
    before, after, new = _families(args.seed)
    n = args.rows // args.chunk
    half = n // 2
    # phase A: initial rows, the stationary stream (whose first half starts the shifted
    # stream), then rows for the guard
    guard_chunks = -(-2 * args.guard_rows // args.chunk)
    initial_chunks = -(-args.initial // args.chunk)
    a = _chunks(before, initial_chunks + n + guard_chunks, args.chunk)
    initial = [r for c in a[:initial_chunks] for r in c][: args.initial]
    stationary = a[initial_chunks : initial_chunks + n]
    guard = [r for c in a[initial_chunks + n :] for r in c]
    # phase B: families with a new section make up about --new-share of them
    rng = random.Random(args.seed + 1)
    mixed: list[list[Row]] = []
    it_new, it_plain = iter(new), iter(after)
    for _ in range(len(new) + len(after)):
        pick = next(it_new if rng.random() < args.new_share else it_plain, None)
        if pick is not None:
            mixed.append(pick)
    shifted = stationary[:half] + _chunks(mixed, n - half, args.chunk)
    for chunk in stationary + shifted[half:]:  # a chunk's families, in no order
        rng.shuffle(chunk)
    return {
        "initial": initial,
        "stationary": stationary,
        "shifted": shifted,
        "guard_train": guard[: args.guard_rows],
        "guard_test": guard[args.guard_rows : 2 * args.guard_rows],
        "half": half,
    }


def describe(stream: dict[str, Any]) -> dict[str, Any]:
    half, initial = stream["half"], stream["initial"]
    second = [r for c in stream["shifted"][half:] for r in c]
    known = {h: {r[h] for r in initial} for h in HEADS}
    new = {h: sum(r[h] not in known[h] for r in second) for h in HEADS}
    return {
        "initial_rows": len(initial),
        "stream_rows": sum(map(len, stream["shifted"])),
        "chunks": len(stream["shifted"]),
        "shift_at_row": sum(map(len, stream["shifted"][:half])),
        **{f"second_half_unseen_{h}_share": new[h] / len(second) for h in HEADS},
        **{f"second_half_{h}_classes": len({r[h] for r in second}) for h in HEADS},
    }


# -- learners -----------------------------------------------------------------


FIT: dict[str, Any] = {}  # how heads are fitted (--C)


def train_bundle(trunk: str, rows: Sequence[Row], cache: Any) -> Bundle:
    """A new bundle on ``trunk`` with one head per HEADS (C as --C says, else the
    library's defaults)."""
    bundle = Bundle(trunk=trunk, cache=cache)
    texts = [r["text"] for r in rows]
    groups = [r["group"] for r in rows]
    for head in HEADS:
        bundle.fit_head(head, texts, [r[head] for r in rows], groups=groups, **FIT)
    return bundle


def bundle_labels(bundle: Bundle, texts: list[str]) -> tuple[dict[str, list[Any]], list[Any]]:
    answers = bundle.predict(texts, use_cache=True)
    return {h: [a[h]["label"] for a in answers] for h in HEADS}, answers


def manyheads_learn(bundle: Bundle, rows: Sequence[Row]) -> tuple[float, list[dict[str, Any]]]:
    """The manyheads-update arm: the chunk's corrections, then a guarded update of
    every head; seconds, and what update_heads reported per head."""
    t = time.perf_counter()
    bundle.add_feedback([r["text"] for r in rows], {h: [r[h] for r in rows] for h in HEADS})
    report = bundle.update_heads()
    seconds = time.perf_counter() - t
    return seconds, report.to_dict()["heads"]


def river_pipeline(name: str) -> Any:
    """The online text pipelines tried (``--river``)."""
    from river import feature_extraction as fx
    from river import linear_model, naive_bayes, optim

    def char3(text: str) -> list[str]:
        out = []
        for word in text.lower().split():
            w = f" {word} "
            out.extend(w[i : i + 3] for i in range(len(w) - 2))
        return out

    if name == "words-nb":  # word 1-2-gram counts, multinomial naive Bayes
        return fx.BagOfWords(ngram_range=(1, 2)) | naive_bayes.MultinomialNB(alpha=0.1)
    if name == "char3-nb":  # character 3-grams within words, multinomial naive Bayes
        return fx.BagOfWords(tokenizer=char3) | naive_bayes.MultinomialNB(alpha=0.1)
    if name == "words-softmax":  # word 1-2-gram TF-IDF, softmax (multinomial) regression
        return fx.TFIDF(ngram_range=(1, 2)) | linear_model.SoftmaxRegression(
            optimizer=optim.SGD(0.5)
        )
    raise SystemExit(f"unknown river pipeline {name!r}: words-nb, char3-nb, words-softmax")


class RiverArm:
    def __init__(self, name: str, initial: Sequence[Row]) -> None:
        self.name = name
        self.models = {h: river_pipeline(name) for h in HEADS}
        t = time.perf_counter()
        for r in initial:
            for h in HEADS:
                self.models[h].learn_one(r["text"], r[h])
        self.seconds = time.perf_counter() - t

    def run_chunk(
        self, rows: Sequence[Row], corrected: set[int], rowwise: bool
    ) -> dict[str, list[Any]]:
        """Answers every row of the chunk, then learns from its corrections; ``rowwise``:
        learns from a corrected row right after answering it."""
        out: dict[str, list[Any]] = {h: [] for h in HEADS}
        t = time.perf_counter()
        for i, r in enumerate(rows):
            for h in HEADS:
                out[h].append(self.models[h].predict_one(r["text"]))
                if rowwise and i in corrected:
                    self.models[h].learn_one(r["text"], r[h])
        if not rowwise:
            for i in sorted(corrected):
                for h in HEADS:
                    self.models[h].learn_one(rows[i]["text"], rows[i][h])
        self.seconds += time.perf_counter() - t
        return out


# -- the prequential run ------------------------------------------------------


def time_pass(bundle: Bundle, rows: Sequence[Row]) -> dict[int, float]:
    """Embeds ``rows`` (into the bundle's cache); the seconds per row, by ``id(row)``.
    A trunk that is fitted on texts (``minilm+tfidf``) is fitted on these first."""
    if bundle.trunk_needs_fit:
        bundle.fit_trunk([r["text"] for r in rows])
    t = time.perf_counter()
    bundle.embed([r["text"] for r in rows])
    each = (time.perf_counter() - t) / max(1, len(rows))
    return {id(r): each for r in rows}


def accuracy(pred: Sequence[Any], rows: Sequence[Row], head: str) -> float:
    return float(np.mean([p == r[head] for p, r in zip(pred, rows, strict=True)]))


def prequential(args: argparse.Namespace, stream: dict[str, Any], work: Path) -> dict[str, Any]:
    cache = EmbeddingCache(work / "embeddings.sqlite")
    initial = stream["initial"]
    # the trunk's first pass over each text, timed (what a retrain without the cache pays)
    pass_seconds: dict[int, float] = {}
    if args.retrain_pass == "charged":
        pass_seconds.update(time_pass(Bundle(trunk=args.trunk, cache=cache), initial))
    t = time.perf_counter()
    frozen = train_bundle(args.trunk, initial, cache)
    frozen.save(work / "frozen")
    print(f"initial bundle ({args.trunk}, {len(initial)} rows): {time.perf_counter() - t:.1f} s")
    updated = Bundle.load(work / "frozen", cache=cache)
    updated.save(work / "updated")
    retrained = frozen
    rivers = [RiverArm(name, initial) for name in args.river]
    rng = np.random.default_rng(args.seed)
    seen: list[Row] = list(initial)
    arms = ["frozen", "updates", "retrain", *(f"river {r.name}" for r in rivers)]
    curve: dict[str, dict[str, list[float]]] = {a: {h: [] for h in HEADS} for a in arms}
    times: dict[str, list[float | None]] = {"updates": [], "retrain": []}
    updates: list[list[dict[str, Any]]] = []
    frozen_answers: list[Any] = []
    for c, rows in enumerate(stream["shifted"]):
        texts = [r["text"] for r in rows]
        pass_seconds.update(time_pass(frozen, rows))
        for arm, bundle in (("frozen", frozen), ("updates", updated), ("retrain", retrained)):
            labels, answers = bundle_labels(bundle, texts)
            frozen_answers.extend(answers if arm == "frozen" else [])
            for h in HEADS:
                curve[arm][h].append(accuracy(labels[h], rows, h))
        k = max(1, round(args.feedback * len(rows)))
        corrected = {int(i) for i in rng.choice(len(rows), size=k, replace=False)}
        fb = [rows[i] for i in sorted(corrected)]
        for river in rivers:
            pred = river.run_chunk(rows, corrected, args.river_rowwise)
            for h in HEADS:
                curve[f"river {river.name}"][h].append(accuracy(pred[h], rows, h))
        line = " ".join(f"{a} " + "/".join(f"{curve[a][h][-1]:.3f}" for h in HEADS) for a in arms)
        print(f"chunk {c + 1:2d}/{len(stream['shifted'])} (lang/section) {line}", flush=True)
        seen.extend(fb)
        if c == len(stream["shifted"]) - 1:
            break  # nothing left to answer
        seconds, report = manyheads_learn(updated, fb)
        times["updates"].append(seconds)
        updates.append(report)
        times["retrain"].append(None)
        if (c + 1) % args.retrain_every == 0:
            t = time.perf_counter()
            if args.retrain_pass == "run":  # a bundle without a cache: the trunk pass runs
                scratch = train_bundle(args.trunk, seen, None)
                times["retrain"][-1] = time.perf_counter() - t
            else:  # cached embeddings, and the first pass's measured time over these rows
                scratch = train_bundle(args.trunk, seen, cache)
                charged = sum(pass_seconds[id(r)] for r in seen)
                times["retrain"][-1] = time.perf_counter() - t + charged
            scratch.save(work / f"retrain-{c}")
            retrained = Bundle.load(work / f"retrain-{c}", cache=cache)
    for river in rivers:
        times[f"river {river.name}"] = [river.seconds]
    return {
        "curve": curve,
        "times": times,
        "updates": updates,
        "frozen_answers": frozen_answers,
        "frozen_folder": str(work / "frozen"),
    }


def summary(run: dict[str, Any], half: int) -> dict[str, Any]:
    acc = {
        arm: {
            h: {"first_half": float(np.mean(v[:half])), "second_half": float(np.mean(v[half:]))}
            for h, v in per_head.items()
        }
        for arm, per_head in run["curve"].items()
    }
    upd, ret = run["times"]["updates"], run["times"]["retrain"]
    paired = [(r, u) for r, u in zip(ret, upd, strict=True) if r is not None]
    done = [r for r in ret if r is not None]
    seconds = {
        "update_mean": float(np.mean(upd)) if upd else None,
        "update_max": float(np.max(upd)) if upd else None,
        "retrain_mean": float(np.mean(done)) if done else None,
        "retrain_max": float(np.max(done)) if done else None,
        "retrain_over_update": (
            float(sum(r for r, _ in paired) / sum(u for _, u in paired)) if paired else None
        ),
        **{k: v[0] for k, v in run["times"].items() if k.startswith("river")},
    }
    second = {arm: {h: acc[arm][h]["second_half"] for h in HEADS} for arm in acc}
    bars = {
        h: {
            "vs_frozen_points": 100 * (second["updates"][h] - second["frozen"][h]),
            "vs_retrain_points": 100 * (second["updates"][h] - second["retrain"][h]),
        }
        for h in HEADS
    }
    return {"accuracy": acc, "seconds": seconds, "bars": bars}


# -- drift ----------------------------------------------------------------------


def drift_curves(
    head_info: Any,
    answers: Sequence[Any],
    window: int,
    step: int,
    table: Callable[..., Any],
    vectors: Any = None,
) -> dict[str, dict[str, list[Any]]]:
    """Per head, the drift statistics over the last ``window`` answers (and the trunk's
    vectors of their texts), every ``step``."""
    out: dict[str, dict[str, list[Any]]] = {h: {} for h in HEADS}
    for end in range(window, len(answers) + 1, step):
        seen = None if vectors is None else vectors[end - window : end]
        rows = table(head_info, list(answers[end - window : end]), vectors=seen)
        for h in HEADS:
            r = rows[h]
            keys = ("psi", "psi_threshold", "js", "confidence_psi", "mean_confidence", "alarm")
            keys += ("inputs_t2", "inputs_threshold")
            for key in keys:
                out[h].setdefault(key, []).append(r.get(key))
            out[h].setdefault("row", []).append(end)
            if r.get("alarm") and "first_reason" not in out[h]:
                out[h]["first_reason"] = [r.get("reason")]
    return out


def drift(args: argparse.Namespace, stream: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    from manyheads.learn.drift import drift_table

    frozen = Bundle.load(run["frozen_folder"], cache=None)
    half = stream["half"]
    n_first = sum(map(len, stream["shifted"][:half]))
    shifted = run["frozen_answers"]
    rest = [r["text"] for c in stream["stationary"][half:] for r in c]
    stationary = shifted[:n_first] + frozen.predict(rest)
    # the trunk's vectors of the same texts: each head's inputs against its reference
    shifted_vectors = frozen.embed([r["text"] for c in stream["shifted"] for r in c])
    stationary_vectors = np.concatenate(
        [np.asarray(shifted_vectors[:n_first]), np.asarray(frozen.embed(rest))]
    )
    info = frozen.head_info
    w, s = args.drift_window, args.drift_step
    out: dict[str, Any] = {"window": w, "step": s, "shift_at_row": n_first}
    out["stationary"] = drift_curves(info, stationary, w, s, drift_table, stationary_vectors)
    out["shifted"] = drift_curves(info, shifted, w, s, drift_table, shifted_vectors)
    verdict = {}
    for h in HEADS:
        st, sh = out["stationary"][h], out["shifted"][h]
        after = [row for row, a in zip(sh["row"], sh["alarm"], strict=True) if a and row > n_first]
        verdict[h] = {
            "stationary_alarms": int(sum(bool(a) for a in st["alarm"])),
            "alarms_before_shift": int(
                sum(
                    bool(a) for row, a in zip(sh["row"], sh["alarm"], strict=True) if row <= n_first
                )
            ),
            "first_alarm_rows_after_shift": (after[0] - n_first) if after else None,
        }
    out["verdict"] = verdict
    return out


# -- guard ----------------------------------------------------------------------


def guard(args: argparse.Namespace, stream: dict[str, Any], run: dict[str, Any]) -> list[Any]:
    """Corrections with a share of wrong labels: what update_heads does, and the truth."""
    rows, test = stream["guard_train"], stream["guard_test"]
    out = []
    for wrong in (args.guard_wrong, 0.0):
        folder = Path(run["frozen_folder"]).with_name(f"guard-{wrong}")
        shutil.copytree(run["frozen_folder"], folder)
        bundle = Bundle.load(folder, cache=None)
        rng = np.random.default_rng(args.seed + 2)
        bad = rng.random(len(rows)) < wrong
        given: dict[str, list[Any]] = {}
        for h in HEADS:
            known = bundle.labels(h)
            given[h] = [
                rng.choice([k for k in known if k != r[h]]) if b else r[h]
                for r, b in zip(rows, bad, strict=True)
            ]
            given[h] = [str(v) for v in given[h]]
        texts = [r["text"] for r in rows]
        # the truth: old head and a head fitted on the same rows, on clean unseen rows
        kept = {h: bundle.training_data(h) for h in HEADS}
        candidate = bundle.copy()
        for h in HEADS:
            kt, kl, kg = kept[h] if kept[h] is not None else ([], [], None)
            groups = None if kg is None else list(kg) + [f"fb-{i}" for i in range(len(rows))]
            candidate.fit_head(
                h, list(kt) + texts, list(kl) + given[h], groups=groups, keep_data=False, **FIT
            )
        test_texts = [r["text"] for r in test]
        old_l, _ = bundle_labels(bundle, test_texts)
        new_l, _ = bundle_labels(candidate, test_texts)
        bundle.add_feedback(texts, given)
        report = bundle.update_heads()
        for h in report.heads:
            row = asdict(h)
            row.update(
                wrong_share=wrong,
                corrections=len(rows),
                wrong_corrections=int(bad.sum()),
                clean_old=accuracy(old_l[h.head], test, h.head),
                clean_refit=accuracy(new_l[h.head], test, h.head),
            )
            out.append(row)
        shutil.rmtree(folder)
    return out


# -- output -----------------------------------------------------------------------


def print_tables(result: dict[str, Any]) -> None:
    s = result["summary"]
    print("\nprequential accuracy (mean over chunks), per head:")
    print(
        f"{'learner':<22}" + "".join(f"{h + ' 1st half':>18}{h + ' 2nd half':>18}" for h in HEADS)
    )
    for arm, per_head in s["accuracy"].items():
        cells = "".join(
            f"{per_head[h]['first_half']:>18.4f}{per_head[h]['second_half']:>18.4f}" for h in HEADS
        )
        print(f"{arm:<22}{cells}")
    sec = s["seconds"]
    print("\nlearning time (s):")
    for k, v in sec.items():
        print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
    for h, b in s.get("bars", {}).items():
        print(
            f"{h}: updates vs frozen {b['vs_frozen_points']:+.2f} points (bar >= +5), "
            f"vs retrain {b['vs_retrain_points']:+.2f} points (bar >= -1)"
        )
    if sec.get("retrain_over_update"):
        print(f"retrain time / update time: {sec['retrain_over_update']:.2f}x (bar >= 10x)")
    for h, v in result.get("drift", {}).get("verdict", {}).items():
        print(f"drift {h}: {v}")
    for row in result.get("guard", []):
        print(
            f"guard {row['head']} ({row['wrong_corrections']}/{row['corrections']} wrong): "
            f"before {_f(row['before'])} after {_f(row['after'])} promoted {row['promoted']}; "
            f"clean accuracy old {row['clean_old']:.4f}, refit {row['clean_refit']:.4f}"
        )


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def figures(result: dict[str, Any], path: str, drift_path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve, half = result["curve"], result["stream"]["chunks"] // 2
    fig, axes = plt.subplots(1, len(HEADS), figsize=(6 * len(HEADS), 4), squeeze=False)
    for ax, h in zip(axes[0], HEADS, strict=True):
        for arm, per_head in curve.items():
            if per_head[h]:
                ax.plot(range(1, len(per_head[h]) + 1), per_head[h], marker=".", label=arm)
        ax.axvline(half + 0.5, color="grey", linestyle="--")
        ax.set(title=f"{h}: prequential accuracy", xlabel="chunk", ylabel="accuracy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    d = result.get("drift")
    if not d:
        return
    fig, axes = plt.subplots(2, len(HEADS), figsize=(6 * len(HEADS), 8), squeeze=False)
    for ax, h in zip(axes[1], HEADS, strict=True):
        for name in ("stationary", "shifted"):
            c = d[name][h]
            if any(v is not None for v in c.get("inputs_t2", ())):
                ax.plot(c["row"], c["inputs_t2"], label=f"{name} stream: inputs T²")
        ax.plot(d["shifted"][h]["row"], d["shifted"][h].get("inputs_threshold"), "k:",
                label="alarm")  # fmt: skip
        ax.axvline(d["shift_at_row"], color="grey", linestyle="--")
        ax.set(title=f"{h}: inputs (window {d['window']})", xlabel="row", ylabel="T²")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    for ax, h in zip(axes[0], HEADS, strict=True):
        for name in ("stationary", "shifted"):
            c = d[name][h]
            for key, what in (("psi", "labels"), ("confidence_psi", "confidence")):
                ax.plot(c["row"], c[key], label=f"{name} stream: PSI of {what}")
            hits = [i for i, a in enumerate(c["alarm"]) if a]
            top = [max(c["psi"][i], c["confidence_psi"][i]) for i in hits]
            ax.scatter([c["row"][i] for i in hits], top, marker="x", s=16, color="red")
        ax.plot(d["shifted"][h]["row"], d["shifted"][h]["psi_threshold"], "k:", label="alarm")
        ax.axvline(d["shift_at_row"], color="grey", linestyle="--")
        ax.set(title=f"{h}: drift (window {d['window']})", xlabel="row", ylabel="PSI")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(drift_path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000, help="stream rows (half after the shift)")
    ap.add_argument("--initial", type=int, default=2_000, help="rows the bundle starts from")
    ap.add_argument("--chunk", type=int, default=1_000, help="rows between updates")
    ap.add_argument("--feedback", type=float, default=0.2, help="share of rows corrected")
    ap.add_argument("--new-share", type=float, default=0.4)
    ap.add_argument("--trunk", default="static")
    ap.add_argument(
        "--retrain-pass",
        choices=("run", "charged"),
        default="run",
        help="a retrain's trunk pass: run it (no cache), or charge the time the run's first "
        "pass over those rows took (for slow trunks that fit nothing on the texts: minilm)",
    )
    ap.add_argument("--retrain-every", type=int, default=1, help="chunks between retrains")
    ap.add_argument("--river", default="char3-nb", help="comma-separated river pipelines")
    ap.add_argument(
        "--river-rowwise",
        action="store_true",
        help="river learns from a corrected row right after answering it (default: after "
        "the chunk, as the others)",
    )
    ap.add_argument("--skip", default="", help="parts to skip: drift, guard (comma-separated)")
    ap.add_argument("--drift-window", type=int, default=1_000)
    ap.add_argument("--drift-step", type=int, default=250)
    ap.add_argument("--guard-rows", type=int, default=2_000)
    ap.add_argument("--guard-wrong", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--C",
        default="auto",
        help="C of the heads trained (initial bundle, retrains): auto (as `manyheads train` "
        "does) or a number; updates refit at the C the head's search chose",
    )
    ap.add_argument("--quick", action="store_true", help="a 4,000-row stream: a smoke run")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--figure", help="the accuracy curves (PNG); the drift curves beside it")
    ap.add_argument("--replot", help="draw the figures of this --json file, run nothing")
    args = ap.parse_args()
    FIT["C"] = args.C if args.C == "auto" else float(args.C)
    if args.replot and args.figure:
        with open(args.replot, encoding="utf-8") as fh:
            figures(json.load(fh), args.figure, os.path.splitext(args.figure)[0] + "_drift.png")
        return
    if args.quick:
        args.rows, args.initial, args.chunk, args.guard_rows = 4_000, 1_000, 500, 500
        args.drift_window, args.drift_step = 500, 250
    args.river = [r for r in args.river.split(",") if r]
    print(f"machine: {machine()}; CPU: {cpu_model()}; trunk {args.trunk}")
    t0 = time.perf_counter()
    stream = build_stream(args)
    info = describe(stream)
    print(f"data: {SHARED.name}: {info}")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="stream-", dir=CACHE_DIR))
    try:
        run = prequential(args, stream, work)
        result: dict[str, Any] = {
            "machine": machine(),
            "cpu": cpu_model(),
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "figure")},
            "stream": info,
            "curve": run["curve"],
            "times": run["times"],
            "updates": run["updates"],
            "summary": summary(run, stream["half"]),
        }
        result["drift"] = {} if "drift" in args.skip else drift(args, stream, run)
        result["guard"] = [] if "guard" in args.skip else guard(args, stream, run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = time.perf_counter() - t0
    print_tables(result)
    print(f"whole run: {result['seconds']:.0f} s")
    write_json(args.json, result)
    if args.figure:
        figures(result, args.figure, os.path.splitext(args.figure)[0] + "_drift.png")


if __name__ == "__main__":
    main()
