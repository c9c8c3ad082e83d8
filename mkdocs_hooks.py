"""MkDocs hooks for emu's docs site (mkdocs.yml's `hooks:`): one heading-anchor rule.

Owns how a heading becomes an anchor on the site. GitHub renders the same
pages (and README.md, which links into them), so the site uses GitHub's rule
instead of Python-Markdown's default: lower case, every character that is not a
letter, digit, space, `-` or `_` dropped, each space a `-` (no collapsing, so
"PFC + ECN" gives `pfc--ecn` on both). One link then works in both places, and
`mkdocs build --strict` (validation.anchors) holds every `#anchor` to it.
tests/unit/test_docs.py uses `github_slug` to check README.md's links too.
Not part of the `emu` package: only the docs build and that test load it.
"""

from __future__ import annotations


def github_slug(text: str, separator: str = "-") -> str:
    """A heading's anchor as GitHub makes it (without the -1, -2 of repeated headings)."""
    kept = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", separator)


def on_config(config, **kwargs):
    """Make the toc extension (every page's heading ids) use `github_slug`."""
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config
