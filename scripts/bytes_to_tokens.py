#!/usr/bin/env python3
"""Writes the bytes of text files as a flat little-endian uint32 token file (token = byte).

A stand-in tokenizer for demos and tests until the Phi-4 tokenizer's store is wired in: any
model with vocab_size >= 257 trains on it; documents are separated by EOD_ID (default 256).

usage: bytes_to_tokens.py OUT.bin FILE... [--eod-id N] [--max-bytes N]
"""
import argparse
import struct
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--eod-id", type=int, default=256)
    ap.add_argument("--max-bytes", type=int, default=0)
    a = ap.parse_args()
    ids, total = [], 0
    for path in a.files:
        with open(path, "rb") as f:
            data = f.read()
        if a.max_bytes:
            data = data[: max(0, a.max_bytes - total)]
        ids.extend(data)
        ids.append(a.eod_id)
        total += len(data)
        if a.max_bytes and total >= a.max_bytes:
            break
    with open(a.out, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}I", *ids))
    print(f"{a.out}: {len(ids)} tokens from {len(a.files)} files", file=sys.stderr)


if __name__ == "__main__":
    main()
