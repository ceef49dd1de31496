#!/usr/bin/env python3
"""The code's floors hold: no #include goes up a floor or sideways (docs/DESIGN.md §3).

Reads the table of floors from docs/DESIGN.md §3 (rows `| N | `folder/`, ... | ... |`), then
every C++ and CUDA source of the tree. A file in folder F may include files of F itself and of
the folders on lower floors; an include of a folder on a higher floor, or of another folder on
F's own floor, is an error. Folders named in the design page as standing above every floor
(`tests/`, `bench/`) are not checked; a folder holding sources that is on no floor is an error,
so a new folder must be placed. Prints FILE:LINE: what for each error and exits 1 if any.

usage: floors_test.py REPOSITORY_ROOT
"""
import os
import re
import sys

SOURCES = (".h", ".cc", ".cu", ".cuh")
ABOVE = {"tests", "bench"}  # docs/DESIGN.md §3: they stand above every floor
SKIP_DIRS = {".git", ".deps", "node_modules", "scripts", "docs"}
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_floors(root):
    """{folder: floor number} from the table of docs/DESIGN.md §3."""
    text = open(os.path.join(root, "docs/DESIGN.md"), encoding="utf-8").read()
    m = re.search(r"^## 3\..*?(?=^## \d+\.)", text, re.M | re.S)
    if not m:
        sys.exit("docs/DESIGN.md has no section 3")
    floors = {}
    for line in m[0].splitlines():
        row = ROW.match(line)
        if row:
            for folder in re.findall(r"`([\w-]+)/`", row[2]):
                floors[folder] = int(row[1])
    if not floors:
        sys.exit("docs/DESIGN.md §3 has no table of floors")
    return floors


def sources(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.relpath(os.path.join(d, f), root)


def check(root, floors):
    errors = []
    for rel in sources(root):
        folder = rel.split(os.sep)[0]
        if folder in ABOVE or os.sep not in rel:
            continue
        if folder not in floors:
            errors.append(f"{rel}:1: folder {folder}/ is on no floor of docs/DESIGN.md §3")
            continue
        mine = floors[folder]
        for n, line in enumerate(open(os.path.join(root, rel), encoding="utf-8"), 1):
            inc = INCLUDE.match(line)
            if not inc or "/" not in inc[1]:
                continue
            target = inc[1].split("/")[0]
            if target == folder or target not in floors and target not in ABOVE:
                continue  # its own folder, or a generated or third-party header
            theirs = floors.get(target)
            if theirs is None or theirs > mine:
                errors.append(f"{rel}:{n}: includes {inc[1]}, a floor above {folder}/ "
                              f"(floor {mine})")
            elif theirs == mine:
                errors.append(f"{rel}:{n}: includes {inc[1]}, beside {folder}/ on floor {mine}")
    return errors


def main():
    root = os.path.abspath(sys.argv[1])
    floors = read_floors(root)
    errors = check(root, floors)
    for e in errors:
        print(e)
    print(f"{len(errors)} include(s) against the floors of docs/DESIGN.md §3 "
          f"({len(floors)} folders on {len(set(floors.values()))} floors)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
