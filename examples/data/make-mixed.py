#!/usr/bin/env python3
"""Builds sample-mixed.jsonl: the sessions of sample-chat, sample-code and
sample-code-edit interleaved in proportion, by position in each file (a
session at position i of a file of n sessions is placed at i / n), as one
general-purpose endpoint would see them. Ties keep the files' order. Agent
sessions stay out (their long prompts would dominate the mix); replay
sample-agent on its own.

usage: python3 examples/data/make-mixed.py [OUT.jsonl]   (default: stdout)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["sample-chat.jsonl", "sample-code.jsonl", "sample-code-edit.jsonl"]


def main():
    placed = []
    for order, name in enumerate(FILES):
        with open(os.path.join(HERE, name)) as f:
            lines = [line for line in f if line.strip()]
        for i, line in enumerate(lines):
            placed.append((i / len(lines), order, i, line))
    placed.sort()
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
    for *_, line in placed:
        out.write(line if line.endswith("\n") else line + "\n")


if __name__ == "__main__":
    main()
