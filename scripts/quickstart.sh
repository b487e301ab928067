#!/usr/bin/env bash
# The main job: install, ask the built-in `content` bundle about three texts (seconds),
# then train four heads on 5,000 real Debian package descriptions, evaluate them on
# 1,000 held-out ones, save the bundle, predict a few texts, export it to an int8 ONNX
# bundle and evaluate and predict with that. Each step says how long it took.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MANYHEADS_NO_BROWSER=1 bash scripts/setup.sh  # the main job needs no browser
MH=.venv/bin/manyheads
BUNDLE="${BUNDLE:-out/debian}"
step() { echo; echo "== $* ($(date +%H:%M:%S))"; START=$SECONDS; }
took() { echo "-- $((SECONDS - START)) s"; }

step "the built-in 'content' bundle (byte trunk, shipped in the package): no training, no -b"
$MH predict "def f(): return 1" \
  "Der schnelle braune Fuchs springt über den faulen Hund." \
  'db_password = "hunter2-Prod!"'
took

step "train 4 heads (trunk minilm+tfidf): encodes 5,000 texts, then fits each head;" \
  "the longest step (minutes), saying what it does as it goes"
$MH train examples/debian-en-train.jsonl.gz -b "$BUNDLE" --group-field group \
  --task section --task library:binary --task role:multilabel --task interface:multilabel
took

step "heads"
$MH heads list -b "$BUNDLE"
took

step "eval on 1,000 descriptions of other packages"
$MH eval examples/debian-en-test.jsonl.gz -b "$BUNDLE"
took

step "predict"
$MH predict -b "$BUNDLE" --heads section,library,role \
  "Python 3 bindings for the GTK graphical toolkit" \
  "TrueType fonts with wide Unicode coverage" \
  "command-line utility to synchronise files over SSH"
took

step "export to one ONNX graph (int8), then answer without torch"
rm -rf "$BUNDLE-int8"
$MH export -b "$BUNDLE" --out "$BUNDLE-int8" --int8
$MH eval examples/debian-en-test.jsonl.gz -b "$BUNDLE-int8"
$MH predict -b "$BUNDLE-int8" --heads section,library,role \
  "Python 3 bindings for the GTK graphical toolkit"
took
echo
echo "== done in $SECONDS s: the bundle is in $BUNDLE, its int8 export in $BUNDLE-int8"
