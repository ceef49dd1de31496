#!/usr/bin/env python3
"""The code's floors hold: no #include goes up a floor or sideways (docs/DESIGN.md §3).

Reads the table of floors from docs/DESIGN.md §3 (rows `| N | `folder/`, ... | ... |`), then
every C++ and CUDA source of the tree. A file in folder F may include files of F itself and of
the folders on lower floors; an include of a folder on a higher floor, or of another folder on
F's own floor, is an error. Folders named in the design page as standing above every floor
(`tests/`, `bench/`) are not checked; a folder holding sources that is on no floor is an error,
so a new folder must be placed. Inside coordinator/, the layers of docs/DESIGN.md §7 (logic,
proto adapter, transport; rows `| N | `coordinator/name`, ... |`) are checked the same way by
file name: a layer's .h or .cc may not include a file of a higher layer. Prints FILE:LINE:
what for each error and exits 1 if any.

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


def read_table(root, section, cell):
    """{name: floor number} from the rows of docs/DESIGN.md §`section` whose second cell names
    things matching `cell`."""
    text = open(os.path.join(root, "docs/DESIGN.md"), encoding="utf-8").read()
    m = re.search(rf"^## {section}\..*?(?=^## \d+\.|\Z)", text, re.M | re.S)
    if not m:
        sys.exit(f"docs/DESIGN.md has no section {section}")
    table = {}
    for line in m[0].splitlines():
        row = ROW.match(line)
        if row:
            for name in re.findall(cell, row[2]):
                table[name] = int(row[1])
    if not table:
        sys.exit(f"docs/DESIGN.md §{section} has no table of floors")
    return table


def read_floors(root):
    """{folder: floor} of §3, and {coordinator file stem: layer} of §7."""
    return (read_table(root, 3, r"`([\w-]+)/`"),
            read_table(root, 7, r"`coordinator/([\w-]+)`"))


def sources(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.relpath(os.path.join(d, f), root)


def check_layers(root, layers):
    """Includes inside coordinator/ that go up one of §7's layers."""
    errors = []
    for rel in sources(root):
        parts = rel.split(os.sep)
        stem = os.path.splitext(parts[-1])[0]
        if parts[0] != "coordinator" or len(parts) != 2 or stem not in layers:
            continue
        for n, line in enumerate(open(os.path.join(root, rel), encoding="utf-8"), 1):
            inc = INCLUDE.match(line)
            if not inc or not inc[1].startswith("coordinator/"):
                continue
            target = os.path.splitext(inc[1].split("/")[1])[0]
            if layers.get(target, 0) > layers[stem]:
                errors.append(f"{rel}:{n}: includes {inc[1]}, of layer {layers[target]} above "
                              f"{stem}'s {layers[stem]} (docs/DESIGN.md §7)")
    return errors


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
    floors, layers = read_floors(root)
    errors = check(root, floors) + check_layers(root, layers)
    for e in errors:
        print(e)
    print(f"{len(errors)} include(s) against the floors of docs/DESIGN.md §3 and §7 "
          f"({len(floors)} folders on {len(set(floors.values()))} floors; {len(layers)} "
          f"coordinator files in {len(set(layers.values()))} layers)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
