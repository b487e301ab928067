"""The package's shape: answering imports no training code, no module is too long,
no import cycle (lazy imports too), the parts keep their layers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from manyheads import Bundle

SRC = Path(__file__).resolve().parents[1] / "src" / "manyheads"
HEAVY = ["torch", "sklearn", "manyheads.train", "manyheads.export", "manyheads.evaluate"]
ANSWER = """
import json, sys
import manyheads
bundle = manyheads.Bundle.load(sys.argv[1], cache=None)
answers = bundle.predict(["def f(): return 1", "", "Der Hund schläft."])
print(json.dumps({
    "answers": answers,
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "sklearn", "manyheads")),
}))
"""


def _answer_in_a_fresh_process(folder: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", ANSWER, folder], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_answering_with_the_content_bundle_imports_no_training_or_export():
    pytest.importorskip("onnxruntime")
    got = _answer_in_a_fresh_process("content")
    assert got["answers"][0]["code_language"]["label"] == "python"
    assert _heavy(got["modules"]) == []


@pytest.mark.heavy
def test_answering_with_an_int8_export_imports_no_training_or_export(
    tmp_path, tiny_model_dir, debian_rows
):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from manyheads.export import export_bundle

    rows = debian_rows[:80]
    source = Bundle(trunk=str(tiny_model_dir), cache=None)
    source.fit_head("section", [r["text"] for r in rows], [r["section"] for r in rows])
    export_bundle(source, tmp_path / "int8", int8=True)
    got = _answer_in_a_fresh_process(str(tmp_path / "int8"))
    assert got["answers"][1]["section"]["label"] is None  # the empty text
    assert got["answers"][0]["section"]["label"] in set(source.labels("section"))
    assert _heavy(got["modules"]) == []


def test_no_source_file_is_longer_than_600_lines():
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}


def test_no_import_cycle_between_modules_lazy_imports_included():
    """Every import in the package, at the top of a module, inside a function or only
    for type checkers, and no module reaches itself through them."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("manyheads", exclude_type_checking_imports=False)
    modules = sorted(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & set(modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == module:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for module in modules:
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_import_contracts_hold():
    """The layers, and inference apart from training, as pyproject.toml states them."""
    pytest.importorskip("importlinter")
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run(
        [str(lint), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=SRC.parents[1],
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "3 kept, 0 broken" in out.stdout


def test_the_inference_contract_covers_every_bundle_module_but_the_facade():
    """Loading and predicting live in every module of ``bundle/`` but ``core`` and
    ``fitting`` (whose Bundle methods hand training over when asked): each is a source
    of the inference contract, and the contract has no exceptions."""
    import tomllib

    config = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    inference = contracts["inference"]
    assert "ignore_imports" not in inference
    modules = {f"manyheads.bundle.{p.stem}" for p in (SRC / "bundle").glob("*.py")}
    modules -= {"manyheads.bundle.__init__", "manyheads.bundle.core", "manyheads.bundle.fitting"}
    assert modules <= set(inference["source_modules"]), modules - set(inference["source_modules"])
