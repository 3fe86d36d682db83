#!/usr/bin/env python3
"""Checks the links of the Markdown files and the rustdoc comments, as GitHub, crates.io and
docs.rs will follow them.

- A relative link must name a file of the repository, and its `#anchor` a heading of that file.
- A package's README is rendered by crates.io, where a relative link has nothing to resolve
  against (the manifests name no repository): only `#anchors` and absolute URLs there.
- A file that rustdoc includes (the README, doc/*.md) takes its reference labels from
  doc/rustdoc-links.md first on docs.rs: a label defined with a relative path must be defined
  there too, and an inline relative link would break on docs.rs.
- An intra-doc path (`crate::Mutex`) means nothing to GitHub: only doc/rustdoc-links.md, which
  only rustdoc reads, may use one. `cargo doc` with `-D warnings` checks that they resolve.
- A link to this crate's pages on docs.rs must name a page that `cargo doc` makes, and its
  anchor an id on that page (checked when target/doc exists, so run it after `cargo doc`).

Prints each broken link as `file:line: reason` and exits 1 if there is one.
"""

import os
import re
import subprocess
import sys

ROOT = subprocess.run(
    ["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True
).stdout.strip()
DOCS_RS = "https://docs.rs/redmutex/latest/redmutex/"
RUSTDOC_LINKS = "doc/rustdoc-links.md"
# Rendered by crates.io: each package's `readme`.
PACKAGE_READMES = {"README.md", "cli/README.md", "testenv/README.md"}
# Included in rustdoc after doc/rustdoc-links.md (src/lib.rs, src/guide.rs and the items' docs).
RUSTDOC_INCLUDED = {"README.md"} | {
    f"doc/{name}" for name in os.listdir(os.path.join(ROOT, "doc"))
    if name.endswith(".md") and f"doc/{name}" != RUSTDOC_LINKS
}

INLINE = re.compile(r"(?<!\\)\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
DEFINITION = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s+(\S+)")
REFERENCE = re.compile(r"\[([^\[\]]+)\]\[([^\[\]]*)\]")


def tracked_files(suffix):
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return sorted(
        p for p in out.splitlines()
        if p.endswith(suffix) and "node_modules/" not in p and os.path.exists(os.path.join(ROOT, p))
    )


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, re.sub(r"`[^`]*`", lambda m: "`" + "x" * (len(m.group()) - 2) + "`", line)


def github_slug(heading):
    heading = re.sub(r"`", "", heading.strip().lower())
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def headings(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    slugs, seen, fence = set(), {}, None
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fence = None if fence else stripped[:3]
            continue
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def links(path):
    """(line, target, kind, label) for every inline link and reference definition."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    for number, line in prose_lines(text):
        m = DEFINITION.match(line)
        if m:
            yield number, m.group(2), "definition", m.group(1).lower()
            continue
        for m in INLINE.finditer(line):
            yield number, m.group(1), "inline", None


def used_labels(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    used = set()
    for _, line in prose_lines(text):
        for m in REFERENCE.finditer(line):
            used.add((m.group(2) or m.group(1)).lower())
    return used


def is_intra_doc(target):
    return "::" in target or target.startswith("crate") and not target.startswith("crates")


def check_docs_rs(target, doc_dir, problems, where):
    if not os.path.isdir(doc_dir):
        return
    page, _, anchor = target[len(DOCS_RS):].partition("#")
    page = page or "index.html"
    if page.endswith("/"):
        page += "index.html"
    html_path = os.path.join(doc_dir, "redmutex", page)
    if not os.path.isfile(html_path):
        problems.append(f"{where}: {target}: `cargo doc` makes no page {page}")
        return
    if anchor:
        with open(html_path, encoding="utf-8") as f:
            html = f.read()
        if f'id="{anchor}"' not in html:
            problems.append(f"{where}: {target}: no id \"{anchor}\" on {page}")


def main():
    problems = []
    doc_dir = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "doc")
    rustdoc_labels = {label for _, _, kind, label in links(RUSTDOC_LINKS) if kind == "definition"}

    for path in tracked_files(".md"):
        base = os.path.dirname(path)
        for number, target, kind, label in links(path):
            where = f"{path}:{number}"
            if target.startswith(("http://", "https://", "mailto:")):
                if target.startswith(DOCS_RS):
                    check_docs_rs(target, doc_dir, problems, where)
                continue
            if is_intra_doc(target):
                if path != RUSTDOC_LINKS:
                    problems.append(f"{where}: {target}: an intra-doc path, which GitHub cannot follow")
                continue
            if path == RUSTDOC_LINKS:
                problems.append(f"{where}: {target}: rustdoc-links.md holds intra-doc paths only")
                continue
            file_part, _, anchor = target.partition("#")
            if not file_part:
                if anchor not in headings(path):
                    problems.append(f"{where}: #{anchor}: no such heading in {path}")
                continue
            if path in PACKAGE_READMES:
                problems.append(f"{where}: {target}: a relative link in a package README, which crates.io cannot resolve")
            resolved = os.path.normpath(os.path.join(base, file_part))
            if resolved.startswith("..") or not os.path.exists(os.path.join(ROOT, resolved)):
                problems.append(f"{where}: {target}: no such file ({resolved})")
                continue
            if anchor and resolved.endswith(".md") and anchor not in headings(resolved):
                problems.append(f"{where}: {target}: no heading #{anchor} in {resolved}")
            if path in RUSTDOC_INCLUDED:
                if kind == "inline":
                    problems.append(f"{where}: {target}: an inline relative link in a file rustdoc includes (breaks on docs.rs); use a reference label defined in {RUSTDOC_LINKS}")
                elif label not in rustdoc_labels:
                    problems.append(f"{where}: [{label}]: {target}: a relative path that {RUSTDOC_LINKS} does not define again (breaks on docs.rs)")
        if path in RUSTDOC_INCLUDED:
            defined = {label for _, _, kind, label in links(path) if kind == "definition"}
            for label in sorted(used_labels(path) - defined - rustdoc_labels):
                # `[x][y]` where y is not defined anywhere renders as text: a broken link.
                problems.append(f"{path}: [{label}]: a reference label defined nowhere")

    # Rustdoc comments: links that are neither intra-doc paths nor absolute URLs break on docs.rs.
    for path in tracked_files(".rs"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                doc = re.match(r"\s*//[/!]\s?(.*)", line)
                if not doc:
                    continue
                text = re.sub(r"`[^`]*`", "``", doc.group(1))
                targets = [m.group(1) for m in INLINE.finditer(text)]
                m = DEFINITION.match(text)
                if m:
                    targets.append(m.group(2))
                for target in targets:
                    if re.search(r"\.(md|rs|toml|sh|lua)(#|$)|^\.\.?/", target):
                        problems.append(f"{path}:{number}: {target}: a file path in rustdoc, which docs.rs cannot follow")
                    elif target.startswith(DOCS_RS):
                        check_docs_rs(target, doc_dir, problems, f"{path}:{number}")

    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
