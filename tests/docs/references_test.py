#!/usr/bin/env python3
"""The repository explains itself: every document a source file or a document refers to exists.

Scans the repository's text files (sources, build files, scripts, docs) for
  - paths of Markdown documents (`docs/PARALLEL.md`, `checkpoint/FORMAT.md`, a link
    `](../dataloader/FORMAT.md)`), which must exist, from the repository root or from the
    referring file's folder;
  - sections of the design page, `docs/DESIGN.md §N`, which must be headings `## N.` there;
  - references to a design document that is not part of the repository (`DESIGN §N`,
    `Appendix A`), which are errors.
Prints each broken reference as FILE:LINE: what, and exits 1 if there is any.

usage: references_test.py REPOSITORY_ROOT
"""
import os
import re
import sys

SKIP_DIRS = {".git", "node_modules", "third_party"}
TEXT = (".cc", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".proto", ".yaml", ".mjs")
DOC = re.compile(r"(?<![\w/.-])((?:\.\./|[\w-]+/)*[\w-]+\.md)\b")
DESIGN_SECTION = re.compile(r"docs/DESIGN\.md §(\d+)((?:, §\d+)*)")
FOREIGN = re.compile(r"(?<!docs/)\bDESIGN(?:\.md)? (?:§|Appendix)|\bAppendix [AB]\b")


def source_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for f in files:
            if f.endswith(TEXT) or f == "CMakeLists.txt":
                yield os.path.join(d, f)


def design_sections(root):
    path = os.path.join(root, "docs", "DESIGN.md")
    if not os.path.exists(path):
        return set()
    return {m[1] for m in re.finditer(r"^## (\d+)\.", open(path, encoding="utf-8").read(), re.M)}


def main():
    root = os.path.abspath(sys.argv[1])
    sections = design_sections(root)
    errors = []
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        if rel == os.path.join("tests", "docs", "references_test.py"):
            continue
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            for m in DOC.finditer(line):
                doc = m[1]
                if not any(os.path.exists(os.path.join(base, doc))
                           for base in (root, os.path.dirname(path))):
                    errors.append(f"{where}: {doc} does not exist")
            for m in DESIGN_SECTION.finditer(line):
                for s in [m[1]] + re.findall(r"§(\d+)", m[2]):
                    if s not in sections:
                        errors.append(f"{where}: docs/DESIGN.md has no section {s}")
            if FOREIGN.search(line):
                errors.append(f"{where}: refers to a design document outside the repository: "
                              f"{line.strip()[:80]}")
    for e in errors:
        print(e)
    print(f"{len(errors)} broken reference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
