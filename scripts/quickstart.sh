#!/usr/bin/env bash
# The main job: install, then train four heads on 5,000 real Debian package descriptions,
# evaluate them on 1,000 held-out ones, save the bundle, predict a few texts, then export it
# to an int8 ONNX bundle and evaluate and predict with that; last, ask the built-in
# `content` bundle about three texts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MANYHEADS_NO_BROWSER=1 bash scripts/setup.sh  # the main job needs no browser
MH=.venv/bin/manyheads
BUNDLE="${BUNDLE:-out/debian}"
echo "== train (trunk: minilm+tfidf; first run encodes 5,000 texts, a few minutes on 2 cores)"
$MH train examples/debian-en-train.jsonl.gz -b "$BUNDLE" --group-field group \
  --task section --task library:binary --task role:multilabel --task interface:multilabel
echo "== heads"
$MH heads list -b "$BUNDLE"
echo "== eval on held-out packages"
$MH eval examples/debian-en-test.jsonl.gz -b "$BUNDLE"
echo "== predict"
$MH predict -b "$BUNDLE" --heads section,library,role \
  "Python 3 bindings for the GTK graphical toolkit" \
  "TrueType fonts with wide Unicode coverage" \
  "command-line utility to synchronise files over SSH"
echo "== export to one ONNX graph (int8), then answer without torch"
rm -rf "$BUNDLE-int8"
$MH export -b "$BUNDLE" --out "$BUNDLE-int8" --int8
$MH eval examples/debian-en-test.jsonl.gz -b "$BUNDLE-int8"
$MH predict -b "$BUNDLE-int8" --heads section,library,role \
  "Python 3 bindings for the GTK graphical toolkit"
echo "== the built-in 'content' bundle (byte trunk, shipped in the package): no -b needed"
$MH predict "def f(): return 1" \
  "Der schnelle braune Fuchs springt über den faulen Hund." \
  'db_password = "hunter2-Prod!"'
