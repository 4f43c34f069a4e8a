#!/usr/bin/env python3
"""Checks that every doc and comment reference resolves inside the repository.

Usage: check_refs.py [REPO_ROOT]   (default: the repository this script is in)

Prints one line per problem, as FILE:LINE: what is wrong, and exits with status 1 if there
is any (0 otherwise; 2 for bad usage). It looks at every text file of the repository
(the git index when REPO_ROOT is a git checkout, else a walk that skips build trees) for:

  - the notes folder beside a checkout (`..` then `/shared`) and the design and style notes
    kept there (`DESIGN` or `STYLE` with `.md`): they live outside the repository;
  - `algorithms.md` that is not `docs/algorithms.md` (inside docs/ the sibling file
    `algorithms.md` is meant and allowed);
  - in *.md files, a relative Markdown link whose target does not exist in the
    repository, or whose #anchor names no heading of the target Markdown file;
  - anywhere, a path-like `dir/file.md` or `dir/file.md#anchor` that names no file of the
    repository or no heading of it (comments cite docs as `docs/algorithms.md#dynsgd`).

Standard library only.
"""

import os
import re
import subprocess
import sys
import unicodedata

# Files the check does not read.
SKIP_FILES = {
    # The CI machine's own script: the data folder it names is where that machine keeps the
    # reference datasets, not a document reference.
    ".ci/run",
    # This check itself names the patterns it looks for.
    "tests/docs/check_refs.py",
    "tests/docs/check_refs_test.py",
}
SKIP_DIRS = {".git", "build", "data", "node_modules"}
TEXT_SUFFIXES = {
    ".md", ".txt", ".cc", ".h", ".cu", ".cuh", ".cmake", ".py", ".sh", ".ini", ".json",
    ".yml", ".yaml", ".toml", ".in", ".csv", ".supp", ".cfg", ".conf",
}
TEXT_NAMES = {"CMakeLists.txt", "setup.sh", ".clang-format", ".gitignore", "run"}

OUTSIDE = re.compile(r"\.\./shared|(?<![A-Za-z0-9_])(?:DESIGN|STYLE)\.md")
BARE_ALGORITHMS = re.compile(r"(?<![A-Za-z0-9_./-])algorithms\.md|(?<!docs/)(?<=/)algorithms\.md")
# [text](target) and [text](<target>), not images' remote URLs; reference definitions.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
# A path-like Markdown file name in any text: at least one directory part.
PATH_MD = re.compile(r"(?<![A-Za-z0-9_./-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\.md)(#[A-Za-z0-9_-]+)?")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def repo_files(root):
    """Repository-relative paths of the files to read."""
    if os.path.isdir(os.path.join(root, ".git")) or os.path.isfile(os.path.join(root, ".git")):
        try:
            out = subprocess.run(
                ["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True
            ).stdout.decode("utf-8", "surrogateescape")
            return sorted(p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p)))
        except (OSError, subprocess.CalledProcessError):
            pass
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames
            if d not in SKIP_DIRS and not d.startswith("build")
            and not os.path.isfile(os.path.join(dirpath, d, "CMakeCache.txt"))
        ]
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == os.path.join("results", "runs"):
            dirnames[:] = []
            continue
        for name in filenames:
            files.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(files)


def is_text(path):
    name = os.path.basename(path)
    _, suffix = os.path.splitext(name)
    return suffix in TEXT_SUFFIXES or name in TEXT_NAMES


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in ("L", "N") or cat == "Mn":
            out.append("-" if ch == " " else ch)
    return "".join(out)


_anchor_cache = {}


def anchors_of(path):
    """The heading anchors of a Markdown file (GitHub's, with -1, -2 for repeats)."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    anchors = set()
    seen = {}
    in_fence = False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if re.match(r"^\s{0,3}(```|~~~)", line):
                    in_fence = not in_fence
                    continue
                if in_fence:
                    continue
                m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                slug = github_slug(m.group(1))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                anchors.add(slug if n == 0 else f"{slug}-{n}")
                for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                    anchors.add(a)
    except OSError:
        pass
    _anchor_cache[path] = anchors
    return anchors


def strip_code_spans(line):
    return re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def check_target(root, rel_file, target, base_dir):
    """A problem with a link target, or None. base_dir is repository-relative."""
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    path = path.split("?", 1)[0]
    if not path:  # an anchor in the same file
        full = os.path.join(root, rel_file)
    else:
        if path.startswith("/"):
            rel = os.path.normpath(path.lstrip("/"))
        else:
            rel = os.path.normpath(os.path.join(base_dir, path))
        if rel == ".." or rel.startswith(".." + os.sep):
            return f"'{target}' points outside the repository"
        full = os.path.join(root, rel)
        if not os.path.exists(full):
            return f"'{target}': no such file or folder in the repository ({rel})"
    if anchor and full.endswith(".md") and os.path.isfile(full):
        if anchor not in anchors_of(full):
            return f"'{target}': no heading with the anchor #{anchor} in {os.path.relpath(full, root)}"
    return None


def check_file(root, rel_file):
    problems = []
    full = os.path.join(root, rel_file)
    try:
        with open(full, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (UnicodeDecodeError, OSError):
        return problems
    is_md = rel_file.endswith(".md")
    in_docs = os.path.dirname(rel_file) == "docs"
    base_dir = os.path.dirname(rel_file)
    in_fence = False
    for number, line in enumerate(lines, start=1):
        where = f"{rel_file}:{number}"
        for m in OUTSIDE.finditer(line):
            problems.append(f"{where}: '{m.group(0)}' is outside the repository; cite docs/ "
                            "(docs/algorithms.md, docs/architecture.md) or say it in place")
        if not in_docs:
            for m in BARE_ALGORITHMS.finditer(line):
                problems.append(f"{where}: 'algorithms.md' that is not docs/algorithms.md")
        fence = is_md and re.match(r"^\s{0,3}(```|~~~)", line)
        if fence:
            in_fence = not in_fence
            continue
        if is_md and not in_fence:
            text = strip_code_spans(line)
            targets = [m.group(1) for m in INLINE_LINK.finditer(text)]
            m = REF_DEFINITION.match(text)
            if m:
                targets.append(m.group(1))
            for target in targets:
                why = check_target(root, rel_file, target, base_dir)
                if why:
                    problems.append(f"{where}: link {why}")
        if is_md and in_fence:
            continue
        for m in PATH_MD.finditer(line):
            target = m.group(1) + (m.group(2) or "")
            # Only a path into the repository: its first folder is one of the root's (or,
            # in Markdown, of the file's folder). Other paths (a test's scratch folder, a
            # run folder's layout) are not references.
            first = m.group(1).split("/", 1)[0]
            if not os.path.isdir(os.path.join(root, first)) and not (
                    is_md and first not in (".", "..") and
                    os.path.isdir(os.path.join(root, base_dir, first))) and first != "..":
                continue
            if is_md and (f"]({target}" in line or f"](<{target}" in line):
                continue  # a link target, checked above
            # Repository-relative first; in Markdown also relative to the file.
            why = check_target(root, rel_file, target, "")
            if why and is_md and check_target(root, rel_file, target, base_dir) is None:
                why = None
            if why:
                problems.append(f"{where}: reference {why}")
    return problems


def main(argv):
    if len(argv) > 2:
        print("usage: check_refs.py [REPO_ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        print(f"check_refs.py: {root}: not a folder (expected the repository's root)", file=sys.stderr)
        return 2
    problems = []
    files = repo_files(root)
    for rel_file in files:
        if rel_file in SKIP_FILES or not is_text(rel_file):
            continue
        for p in check_file(root, rel_file):
            if p not in problems[-8:]:  # a line naming one thing twice (a link's text and target)
                problems.append(p)
    for p in problems:
        print(p)
    if problems:
        print(f"check_refs.py: {len(problems)} reference(s) that do not resolve inside the "
              "repository", file=sys.stderr)
        return 1
    print(f"check_refs.py: {len(files)} files, every reference resolves inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
