"""MkDocs hooks for bytegrad's site (mkdocs.yml `hooks:`); nothing here is part of the package.

- The benchmark reports and plots in bench/results/ and CHANGELOG.md become pages and files of
  the site where they are, so the site and the repository show one copy of each.
- A line `<!-- readme: HEADING -->` in a page is replaced by the README section whose `## `
  heading starts with HEADING (without the heading), so text the README and the site share is
  written once.
- Links are written as they work in the repository (README.md links `docs/plugins.md`,
  docs/plugins.md links `../examples/plugin`): each link is resolved from the file that holds it,
  and pointed at the page that shows that file on the site, or at the file in the source
  repository (`repo_url`) when the site has no page for it.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORTS = "bench/results"
#: the kinds of file in REPORTS that the site shows under the same path
REPORT_SUFFIXES = (".md", ".png")
RENAMED = {"CHANGELOG.md": "changelog.md"}

# a fenced code block or an inline code span (kept as they are), or a link or image
_LINK = re.compile(r"(^[ \t]*```.*?^[ \t]*```[^\n]*$|`[^`\n]*`)|(!?\[[^\]]*\]\()([^)\s]+)(\))", re.MULTILINE | re.DOTALL)
_README_SECTION = re.compile(r"^<!-- readme: (.+?) -->$", re.MULTILINE)


def _site_path(repo_path: str) -> str | None:
    """The site path of a repository file, or None when the site does not show it."""
    if repo_path in RENAMED:
        return RENAMED[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    if repo_path.startswith(REPORTS + "/") and repo_path.endswith(REPORT_SUFFIXES):
        return repo_path
    return None


def _nav_paths(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    items = nav.values() if isinstance(nav, dict) else (nav or [])
    return set().union(*(_nav_paths(item) for item in items))


def _reports(nav: Any) -> list[str]:
    """The plots, and the reports the nav names (a report a local run wrote, such as quick.md or a
    named run, is left out: a page missing from the nav would fail the strict build)."""
    folder = os.path.join(ROOT, REPORTS)
    named = _nav_paths(nav)
    return sorted(f"{REPORTS}/{name}" for name in os.listdir(folder)
                  if name.endswith(".png") or f"{REPORTS}/{name}" in named)


def on_files(files: Files, config: Any) -> Files:
    for repo_path in [*_reports(config["nav"]), *RENAMED]:
        files.append(File.generated(config, _site_path(repo_path), abs_src_path=os.path.join(ROOT, repo_path)))
    return files


def _rewrite_links(markdown: str, holder: str, page: str, repo_url: str) -> str:
    """Point the relative links of text held in repository file `holder`, shown on site page `page`."""

    def fix(match: re.Match[str]) -> str:
        if match.group(1):  # code
            return match.group(0)
        target = match.group(3)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):  # a URL, an anchor in the page, an absolute path
            return match.group(0)
        path, _, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(holder), path))
        site = _site_path(repo_path)
        if site is not None:
            new = posixpath.relpath(site, posixpath.dirname(page) or ".")
        else:
            kind = "tree" if os.path.isdir(os.path.join(ROOT, repo_path)) else "blob"
            new = f"{repo_url.rstrip('/')}/{kind}/main/{repo_path}"
        return f"{match.group(2)}{new}{'#' + anchor if anchor else ''}{match.group(4)}"

    return _LINK.sub(fix, markdown)


def _readme_section(heading: str) -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    found = re.search(rf"^## {re.escape(heading)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if found is None:
        raise ValueError(f"docs: README.md has no section '## {heading}...' (a page includes it)")
    return found.group(1).strip() + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src = page.file.src_uri
    holder = page.file.abs_src_path and os.path.relpath(page.file.abs_src_path, ROOT).replace(os.sep, "/")
    repo_url = config["repo_url"]
    markdown = _rewrite_links(markdown, holder or f"docs/{src}", src, repo_url)
    return _README_SECTION.sub(lambda m: _rewrite_links(_readme_section(m.group(1)), "README.md", src, repo_url),
                               markdown)
