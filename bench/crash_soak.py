"""Crash soak: random `kill -9` of real `manyheads` CLI writers, invariants after each kill.

In a temp folder, on real English Debian package descriptions:

1. setup: a training file (JSON lines: text, section, library) of --rows rows,
   a bundle B trained on it by `manyheads train DATA -b B --task section
   --task library:binary --trunk hashing --no-cache`, and a bundle E on the
   `minilm` trunk (--export-rows rows, head `section`) to export;
2. the writers, each a real CLI process (`python -m manyheads.cli`, in its own
   session): (a) `train DATA -b B --task section` (replaces a head that has
   kept data: the historic data-loss case), (b) `train DATA -b B --task
   hN=section` (a new head), (c) `heads rm hN -b B` (a head added earlier; when
   B holds none because the (b) runs were killed first, one is added
   beforehand with the library, not counted as a try), (d) `export -b E --out
   OUT`. All trains use --trunk hashing --no-cache and --C (default 1: C=auto
   spends ~2/3 of the run in the C search, so fewer kills would land in the
   save; --C auto gives the plain command);
3. each action's normal duration is measured once (an uninterrupted run);
4. each try starts its action with subprocess.Popen, sleeps a seeded random
   delay, uniform in [0, 1.1 x the action's normal duration] or, for a share
   --late (default half) of the tries, in the last 1.5 s of a normal run
   (where the save is: aimed kills), sends SIGKILL
   to its process group and waits; it records whether the process had
   already finished (its exit status then must be 0) and, if not, whether it
   had already printed that its write was done ("saved", "removed head",
   "exported"; unbuffered output), so "killed after write" counts the kills
   that came after the write, before the process exited. The actions come
   round-robin (a, b, c), the --export-tries (d) tries spread evenly among
   them;
5. after each kill: `Bundle.load(B, cache=None)` works; its head set is the
   one before the try or the one the action makes; `training_data(name)` of
   every head is not None (the kept data is there and matches its hash); one
   prediction works; nothing in the temp folder outside B changed (path ->
   size, mtime, sha256; B is included for export tries; OUT and the
   `.out.tmp-*` staged folders beside it are excluded); OUT is absent or
   loads and predicts (`Bundle.load(OUT, cache=None)`). The temp files found
   in B, B/data (names starting with "." except .lock) or beside OUT are
   counted ("temps after kill": the kill landed inside a save);
6. then one more normal write: `Bundle.load(B, cache=None).save(B)` in this
   process for train/rm tries (B checked again after it), or a normal
   export to a fresh OUT (same name) for export tries; after it no temp file
   may be left in B, B/data, or beside OUT (`.out.tmp-*`).

A try whose checks find anything is an invariant failure (the first one of
each action is printed with the state found: the error, the files in B);
B is then restored from the copy taken before the try, so the next tries
start from a good bundle, and the temp folder is kept. Exit status 0 either
way (a benchmark). Client and writers share the machine's CPUs (2 here).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ACTIONS = ("replace section", "add hN", "heads rm", "export")
PROBE = "library for parsing XML documents - development files"
ADDED = re.compile(r"^h\d+$")
DONE = ("\nsaved ", "\nremoved head ", "\nexported ")  # what each action prints when done


@dataclass
class Stats:
    normal_s: float = 0.0
    tries: int = 0
    killed: int = 0
    finished: int = 0
    saved_then_killed: int = 0
    temps_after_kill: int = 0
    failures: int = 0
    temps_left: int = 0
    delays: list[float] = field(default_factory=list)
    first_failure: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, root: Path, c: str) -> None:
        self.root = root
        self.work = root / "work"  # everything the snapshot covers
        self.logs = root / "logs"
        self.data = self.work / "train.jsonl"
        self.small = self.work / "small.jsonl"
        self.b = self.work / "B"
        self.e = self.work / "E"
        self.exports = self.work / "exports"
        self.out = self.exports / "out"
        self.c = c
        self.env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        self.env["MANYHEADS_CACHE_DIR"] = str(self.work / "cache")
        self.next_head = 0
        self.log_no = 0

    # -- commands ---------------------------------------------------------------------
    def command(self, action: str, head: str = "") -> list[str]:
        cli = [sys.executable, "-m", "manyheads.cli"]
        train = [*cli, "train", str(self.data), "-b", str(self.b), "--trunk", "hashing"]
        train += ["--no-cache", "--C", self.c]
        if action == "replace section":
            return [*train, "--task", "section"]
        if action == "add hN":
            return [*train, "--task", f"{head}=section"]
        if action == "heads rm":
            return [*cli, "heads", "rm", head, "-b", str(self.b)]
        return [*cli, "export", "-b", str(self.e), "--out", str(self.out)]

    def start(self, cmd: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        self.log_no += 1
        log = self.logs / f"{self.log_no:03d}.log"
        with open(log, "wb") as fh:
            fh.write((" ".join(cmd) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        return proc, log

    def run_normal(self, cmd: list[str]) -> tuple[float, int, Path]:
        t = time.perf_counter()
        proc, log = self.start(cmd)
        rc = proc.wait()
        return time.perf_counter() - t, rc, log

    # -- checks -----------------------------------------------------------------------
    def snapshot(self, skip_b: bool) -> dict[str, tuple[Any, ...]]:
        """Every path under work/ -> ("dir",) or (size, mtime_ns, sha256), without B
        (for train/rm tries), OUT and the staged folders beside it."""
        seen: dict[str, tuple[Any, ...]] = {}
        for top, dirs, files in os.walk(self.work):
            here = Path(top)
            keep = []
            for d in dirs:
                p = here / d
                if (skip_b and p == self.b) or p == self.out:
                    continue
                if here == self.exports and d.startswith(".out.tmp-"):
                    continue
                keep.append(d)
                seen[str(p.relative_to(self.work))] = ("dir",)
            dirs[:] = keep
            for f in files:
                p = here / f
                if here == self.exports and f.startswith(".out."):
                    continue
                st = p.stat()
                sha = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                seen[str(p.relative_to(self.work))] = (st.st_size, st.st_mtime_ns, sha)
        return seen

    @staticmethod
    def diff(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
        out = [f"outside B: new {p}" for p in sorted(set(after) - set(before))]
        out += [f"outside B: gone {p}" for p in sorted(set(before) - set(after))]
        out += [
            f"outside B: changed {p} {before[p]} -> {after[p]}"
            for p in sorted(set(before) & set(after))
            if before[p] != after[p]
        ]
        return out

    def temps(self) -> list[str]:
        """Names starting with "." (but .lock) in B and B/data."""
        found = []
        for folder in (self.b, self.b / "data"):
            if folder.is_dir():
                found += [
                    str((folder / n).relative_to(self.b.parent))
                    for n in sorted(os.listdir(folder))
                    if n.startswith(".") and n != ".lock"
                ]
        return found

    def out_temps(self) -> list[str]:
        return sorted(n for n in os.listdir(self.exports) if n.startswith(".out."))

    def check_bundle(
        self, folder: Path, expected: list[frozenset[str]] | None
    ) -> tuple[list[str], frozenset[str] | None]:
        """Problems found loading ``folder`` (and its head set, if it loads)."""
        from manyheads import Bundle

        try:
            bundle = Bundle.load(folder, cache=None)
        except Exception as exc:
            return [f"Bundle.load({folder.name}): {type(exc).__name__}: {exc}"], None
        problems = []
        heads = frozenset(bundle.heads)
        if expected is not None and heads not in expected:
            want = " or ".join(str(sorted(s)) for s in expected)
            problems.append(f"{folder.name} heads {sorted(heads)}, expected {want}")
        for name in sorted(heads):
            try:
                if bundle.training_data(name) is None:
                    problems.append(f"{folder.name}: training_data({name!r}) is None")
            except Exception as exc:
                problems.append(f"{folder.name}: training_data({name!r}): {exc}")
        try:
            answer = bundle.predict([PROBE])[0]
            if set(answer) != heads:
                problems.append(f"{folder.name}: predict answered heads {sorted(answer)}")
        except Exception as exc:
            problems.append(f"{folder.name}: predict: {type(exc).__name__}: {exc}")
        return problems, heads

    def listing(self, folder: Path) -> str:
        if not folder.exists():
            return f"{folder.relative_to(self.work)}: absent"
        rows = []
        for p in sorted(folder.rglob("*")):
            size = "dir" if p.is_dir() else str(p.stat().st_size)
            rows.append(f"{p.relative_to(folder)} ({size})")
        return f"{folder.relative_to(self.work)}: " + ", ".join(rows)

    def removable_head(self) -> str:
        """The oldest added head on disk; adds one with the library when there is none."""
        from manyheads import Bundle

        bundle = Bundle.load(self.b, cache=None)
        added = sorted((n for n in bundle.heads if ADDED.match(n)), key=lambda n: int(n[1:]))
        if added:
            return added[0]
        name = self.new_head()
        rows = [json.loads(line) for line in self.data.read_text().splitlines()]
        texts, labels = [r["text"] for r in rows], [r["library"] for r in rows]
        bundle.fit_head(name, texts, labels, kind="binary", C=1.0)
        bundle.save(self.b)
        return name

    def new_head(self) -> str:
        name = f"h{self.next_head}"
        self.next_head += 1
        return name


def tail(log: Path, n: int = 4) -> str:
    lines = log.read_text(errors="replace").splitlines()[1:]
    return " | ".join(line.strip() for line in lines[-n:] if line.strip()) or "(no output)"


def schedule(tries: int, export_tries: int) -> list[str]:
    """Train/rm actions round-robin, export tries spread evenly among them."""
    seq: list[str] = []
    k = 0
    for i in range(tries):
        if (i + 1) * export_tries // tries > i * export_tries // tries:
            seq.append("export")
        else:
            seq.append(ACTIONS[k % 3])
            k += 1
    return seq


def one_try(soak: Soak, action: str, delay: float, stats: Stats, setups: list[str]) -> None:
    from manyheads import Bundle

    problems: list[str] = []
    head = ""
    if action == "add hN":
        head = soak.new_head()
    elif action == "heads rm":
        on_disk = set(Bundle.load(soak.b, cache=None).heads)
        head = soak.removable_head()
        if head not in on_disk:
            setups.append(head)
    before_heads = frozenset(Bundle.load(soak.b, cache=None).heads)
    expected = [before_heads]
    if action == "add hN":
        expected.append(before_heads | {head})
    elif action == "heads rm":
        expected.append(before_heads - {head})
    backup = soak.root / "backup-B"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(soak.b, backup)
    exporting = action == "export"
    snap = soak.snapshot(skip_b=not exporting)

    proc, log = soak.start(soak.command(action, head))
    time.sleep(delay)
    rc = proc.poll()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stats.tries += 1
    stats.delays.append(delay)
    if rc is None:
        stats.killed += 1
        stats.saved_then_killed += any(m in log.read_text(errors="replace") for m in DONE)
    else:
        stats.finished += 1
        if rc != 0:
            problems.append(f"finished with exit status {rc}: {tail(log)}")

    # -- invariants after the kill
    found, heads = soak.check_bundle(soak.b, expected)
    problems += found
    problems += soak.diff(snap, soak.snapshot(skip_b=not exporting))
    left_by_kill = soak.temps()
    if exporting:
        left_by_kill += soak.out_temps()
        if soak.out.exists():
            out_problems, _ = soak.check_bundle(soak.out, None)
            problems += [f"OUT exists but: {p}" for p in out_problems]
    stats.temps_after_kill += bool(left_by_kill)
    state = [soak.listing(soak.b)]
    if exporting:
        state.append(f"exports: {', '.join(sorted(os.listdir(soak.exports))) or '(empty)'}")

    # -- one more normal write, then no temp may be left
    left: list[str] = []
    if heads is None:  # B does not load: keep it for inspection, go on from the copy
        broken = soak.root / f"broken-B-{stats.tries}-{action.replace(' ', '-')}"
        shutil.move(str(soak.b), broken)
        shutil.copytree(backup, soak.b)
        state.append(f"B kept as {broken}, restored from the copy taken before the try")
    elif exporting:
        shutil.rmtree(soak.out, ignore_errors=True)
        _, rc2, log2 = soak.run_normal(soak.command("export"))
        if rc2 != 0:
            problems.append(f"next normal export: exit status {rc2}: {tail(log2)}")
        left = soak.out_temps() + soak.temps()
        out_problems, _ = soak.check_bundle(soak.out, None)
        problems += [f"after the next export, OUT: {p}" for p in out_problems]
        shutil.rmtree(soak.out, ignore_errors=True)
    else:
        try:
            Bundle.load(soak.b, cache=None).save(soak.b)
        except Exception as exc:
            problems.append(f"next write (load + save): {type(exc).__name__}: {exc}")
        left = soak.temps()
        again, _ = soak.check_bundle(soak.b, [heads])
        problems += [f"after the next write: {p}" for p in again]
    if left:
        stats.temps_left += 1
        problems.append(f"temps left after the next write: {', '.join(left)}")
    if problems:
        stats.failures += 1
        if not stats.first_failure:
            when = "finished" if rc is not None else "killed"
            stats.first_failure = [
                f"try {stats.tries} ({when} after {delay:.2f} s, log {log}):",
                *problems,
                *state,
            ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tries", type=int, default=60, help="tries in all (export included)")
    ap.add_argument("--export-tries", type=int, default=10, help="of them, export tries")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill delays")
    ap.add_argument("--rows", type=int, default=400, help="English Debian rows of DATA")
    ap.add_argument("--export-rows", type=int, default=100, help="rows of E (minilm)")
    ap.add_argument("--C", default="1", help="--C of every train (default 1; 'auto' is slower)")
    ap.add_argument(
        "--late",
        type=float,
        default=0.5,
        help="share of the tries killed in the last 1.5 s of the run (the save)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if not 0 <= args.export_tries <= args.tries:
        ap.error("--export-tries must be between 0 and --tries")

    from _common import debian_rows, machine, write_json

    t_start = time.perf_counter()
    print(f"machine: {machine()}")
    root = Path(tempfile.mkdtemp(prefix="manyheads-crash-"))
    soak = Soak(root, args.C)
    soak.work.mkdir()
    soak.logs.mkdir()
    soak.exports.mkdir(parents=True)
    rows, source = debian_rows(args.rows)
    with open(soak.data, "w", encoding="utf-8") as fh:
        for r in rows:
            row = {"text": r["text"], "section": r["section"], "library": r["library"]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(soak.small, "w", encoding="utf-8") as fh:
        for r in rows[: args.export_rows]:
            fh.write(json.dumps({"text": r["text"], "section": r["section"]}) + "\n")
    print(f"data: {source}, {len(rows)} rows ({args.export_rows} for E), temp folder {root}")

    cli = [sys.executable, "-m", "manyheads.cli", "train"]
    b_tasks = ["--task", "section", "--task", "library:binary"]
    setup_cmds = {
        "B": [*cli, str(soak.data), "-b", str(soak.b), *b_tasks, "--trunk", "hashing"],
        "E": [*cli, str(soak.small), "-b", str(soak.e), "--task", "section", "--trunk", "minilm"],
    }
    setup_cmds["B"] += ["--no-cache", "--C", args.C]
    setup_cmds["E"] += ["--no-cache"]
    for name, cmd in setup_cmds.items():
        seconds, rc, log = soak.run_normal(cmd)
        if rc != 0:
            raise SystemExit(f"setup failed ({rc}): {log.read_text()}")
        print(f"setup: {name} trained in {seconds:.1f} s")

    stats = {a: Stats() for a in ACTIONS}
    # normal durations: one uninterrupted run each (adds h0, removes it, exports)
    head = soak.new_head()
    for action in ACTIONS:
        seconds, rc, log = soak.run_normal(soak.command(action, head))
        if rc != 0:
            raise SystemExit(f"normal {action} failed ({rc}): {log.read_text()}")
        stats[action].normal_s = seconds
    shutil.rmtree(soak.out)
    print(
        "normal durations: "
        + ", ".join(f"{a} {s.normal_s:.1f} s" for a, s in stats.items())
        + f" (train --C {args.C})"
    )

    rng = random.Random(args.seed)
    setups: list[str] = []
    plan = schedule(args.tries, args.export_tries)
    for i, action in enumerate(plan, 1):
        normal = stats[action].normal_s
        late = rng.random() < args.late
        delay = rng.uniform(max(0.0, normal - 1.5), normal + 0.2) if late else 0.0
        delay = delay or rng.uniform(0, 1.1 * normal)
        one_try(soak, action, delay, stats[action], setups)
        if i % 10 == 0 or i == len(plan):
            fails = sum(s.failures for s in stats.values())
            print(f"  {i}/{len(plan)} tries, {fails} invariant failures", flush=True)

    elapsed = time.perf_counter() - t_start
    print(
        f"\n{'action':16s} {'normal s':>8s} {'tries':>5s} {'killed':>6s} {'finished':>8s} "
        f"{'killed after write':>19s} {'mean delay s':>12s} {'temps after kill':>16s} "
        f"{'invariant failures':>18s} {'temps left after next write':>27s}"
    )
    for action, s in stats.items():
        mean = sum(s.delays) / len(s.delays) if s.delays else 0.0
        print(
            f"{action:16s} {s.normal_s:8.1f} {s.tries:5d} {s.killed:6d} {s.finished:8d} "
            f"{s.saved_then_killed:19d} {mean:12.2f} {s.temps_after_kill:16d} "
            f"{s.failures:18d} {s.temps_left:27d}"
        )
    if setups:
        print(
            f"heads added with the library before a 'heads rm' try (B had none left): "
            f"{len(setups)} ({', '.join(setups)})"
        )
    total = sum(s.tries for s in stats.values())
    failures = sum(s.failures for s in stats.values())
    for action, s in stats.items():
        if s.first_failure:
            print(f"\nFIRST FAILURE of {action!r} ({s.failures} in all):")
            for line in s.first_failure:
                print("  " + line)
    print(f"\ntotal time: {elapsed:.0f} s")
    if failures:
        bad = ", ".join(f"{a}: {s.failures}" for a, s in stats.items() if s.failures)
        print(f"crash soak: {total} tries, {failures} INVARIANT FAILURES ({bad})")
    else:
        print(f"crash soak: {total} tries, 0 invariant failures")

    write_json(
        args.json,
        {
            "machine": machine(),
            "seed": args.seed,
            "C": args.C,
            "seconds": elapsed,
            "actions": {
                a: {k: v for k, v in vars(s).items() if k != "delays"} for a, s in stats.items()
            },
            "library_setups": setups,
        },
    )
    if failures or args.keep:
        print(f"temp folder kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
