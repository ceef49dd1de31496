#!/usr/bin/env python3
"""The repository explains itself: every document, file and section it refers to exists.

Scans the repository's text files (sources, build files, scripts, docs, tests and protos) for
  - paths of Markdown documents (`docs/PARALLEL.md`, `checkpoint/FORMAT.md`, a link
    `](../dataloader/FORMAT.md)`), which must exist, from the repository root or from the
    referring file's folder;
  - paths of the repository's own files (`worker/trainer.h`, `tests/docs/references_test.py`:
    a path whose first folder is a top-level folder of the repository), which must exist the
    same way (generated protobuf headers are not checked);
  - sections of the design page, `docs/DESIGN.md §N`, which must be headings `## N.` there;
  - named sections of a document, `docs/PERF.md, "Page faults"` or `FORMAT.md "Leases"`, which
    must be a heading of that document (a document named without a folder is looked for from
    the referring file's folder);
  - notes, `Note [Step draws]`, which must be defined (`Note [Step draws]:`) somewhere, and,
    cited as `Note [Step draws] in model/model.h`, in that file;
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
CODE_PATH = re.compile(
    r"(?<![\w/.<-])((?:\.\./)*(?:[\w-]+/)+[\w-]+(?:\.[\w-]+)*\.(?:h|cc|cu|cuh|py|sh|proto|mjs|yaml))\b")
GENERATED = (".pb.h", ".pb.cc")
SECTION = re.compile(r"((?:[\w-]+/)*[\w-]+\.md),? \"([^\"]+)\"")
NOTE = re.compile(r"Note \[([^\]]+)\](?: in `?((?:[\w-]+/)*[\w-]+\.(?:h|cc|cu|cuh|py|sh)))?")
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


def resolve(root, path, cited):
    """The file `cited` names, from the repository root or from the citing file's folder."""
    for base in (root, os.path.dirname(path)):
        candidate = os.path.normpath(os.path.join(base, cited))
        if os.path.exists(candidate):
            return candidate
    return None


def headings(doc):
    out = set()
    for line in open(doc, encoding="utf-8"):
        m = re.match(r"#+\s+(?:\d+\.\s+)?(.*?)\s*$", line)
        if m:
            out.add(m[1].lower())
    return out


def read_lines(path):
    try:
        return open(path, encoding="utf-8").read().splitlines()
    except UnicodeDecodeError:
        return None


def defined_notes(files):
    """{note name: set of files defining it}: `Note [Name]:`, or a comment line of the note alone
    (its text follows on the next lines)."""
    notes = {}
    for path, lines in files:
        for line in lines:
            for m in re.finditer(r"Note \[([^\]]+)\]:|^\s*(?://|#+)\s*Note \[([^\]]+)\]\s*$", line):
                notes.setdefault(m[1] or m[2], set()).add(path)
    return notes


def check_line(root, path, line, where, top, notes):
    errors = []
    for m in DOC.finditer(line):
        if not resolve(root, path, m[1]):
            errors.append(f"{where}: {m[1]} does not exist")
    for m in CODE_PATH.finditer(line):
        cited = m[1]
        first = cited.split("/")[0]
        if (first in top or first == "..") and not cited.endswith(GENERATED):
            if not resolve(root, path, cited):
                errors.append(f"{where}: {cited} does not exist")
    for m in SECTION.finditer(line):
        doc = resolve(root, path, m[1])
        if doc and not any(h == m[2].lower() or h.startswith(m[2].lower() + " (")
                           for h in headings(doc)):
            errors.append(f'{where}: {m[1]} has no section "{m[2]}"')
    for m in NOTE.finditer(line):
        where_defined = notes.get(m[1], set())
        if not where_defined:
            errors.append(f"{where}: Note [{m[1]}] is defined nowhere")
        elif m[2]:
            target = resolve(root, path, m[2])
            if target and target not in where_defined:
                errors.append(f"{where}: Note [{m[1]}] is not in {m[2]}")
    return errors


def main():
    root = os.path.abspath(sys.argv[1])
    sections = design_sections(root)
    top = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    files = [(p, read_lines(p)) for p in source_files(root)]
    files = [(p, lines) for p, lines in files if lines is not None]
    notes = defined_notes(files)
    errors = []
    for path, lines in files:
        rel = os.path.relpath(path, root)
        if rel == os.path.join("tests", "docs", "references_test.py"):
            continue
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            errors += check_line(root, path, line, where, top, notes)
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
