#!/usr/bin/env python3
"""Tests of check_refs.py on small repositories made in a temporary folder: each kind of
reference it must refuse is named with its file and line, and a clean tree passes.

Usage: check_refs_test.py   (exit status 0 when every case holds, 1 otherwise)
Standard library only.
"""

import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_refs.py")

# A tree with nothing wrong: docs that link each other by file and by heading, a comment
# citing a doc's section, a sibling algorithms.md inside docs/.
CLEAN = {
    "docs/algorithms.md": "# Strategies\n\n## dynsgd\n\nSee [the layers](architecture.md#layers).\n",
    "docs/architecture.md": "# Architecture\n\n## Layers\n\nUpdates: [algorithms.md](algorithms.md#dynsgd).\n"
                            "```\n[not a link](nowhere.md)\n```\n",
    "algorithms/dynsgd.cc": "// The damping (docs/algorithms.md#dynsgd).\n",
    "tests/scratch_test.cc": "// writes out/comparison.md, a run's output, not a reference\n",
    "notes.md": "Read [the docs](docs/architecture.md) and [a site](https://example.org/x.md).\n",
}

# The outside names the check looks for, spelt in pieces so that this file names none.
NOTES = ".." + "/shared"
DESIGN = "DESIGN" + ".md"
STYLE = "STYLE" + ".md"

# Each case: (file, content, line, words the problem line must hold).
BAD = [
    ("a/b.cc", "// fine\n// see " + NOTES + "/reference/x\n", 2, NOTES),
    ("a/c.h", "// The wire protocol (" + DESIGN + " §5).\n", 1, DESIGN),
    ("a/d.h", "\n\n// house style (" + STYLE + " 5)\n", 3, STYLE),
    ("a/e.cc", "// algorithms.md §3.4\n", 1, "algorithms.md"),
    ("a/f.ini", "# reference/algorithms.md §3.3\n", 1, "algorithms.md"),
    ("g.md", "x\n[gone](docs/missing.md)\n", 2, "docs/missing.md"),
    ("h.md", "[bad anchor](docs/algorithms.md#no-such-section)\n", 1, "no-such-section"),
    ("i.md", "[up](../outside.md)\n", 1, "outside the repository"),
    ("a/j.cc", "// (docs/algorithms.md#nothing-here)\n", 1, "nothing-here"),
    ("a/k.cc", "// see docs/gone.md\n", 1, "docs/gone.md"),
]


def make_tree(root, files):
    for rel, content in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    return p.returncode, p.stdout


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        make_tree(clean, CLEAN)
        rc, out = run(clean)
        if rc != 0:
            failures.append(f"clean tree: exit {rc}, expected 0; output:\n{out}")
        for i, (rel, content, line, words) in enumerate(BAD):
            root = os.path.join(tmp, f"bad{i}")
            make_tree(root, dict(CLEAN, **{rel: content}))
            rc, out = run(root)
            lines = [l for l in out.splitlines() if l.startswith(f"{rel}:{line}:")]
            if rc != 1:
                failures.append(f"{rel}: exit {rc}, expected 1; output:\n{out}")
            elif len(out.splitlines()) != 1 or not lines or words not in lines[0]:
                failures.append(f"{rel}: expected exactly one line '{rel}:{line}: ...{words}...', "
                                f"got:\n{out}")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"check_refs_test.py: the clean tree and {len(BAD)} bad references behave")
    return 0


if __name__ == "__main__":
    sys.exit(main())
