"""The repository's address in one place: ``repository: url:`` of ``_config.yml``.

The page footer (``html: extra_footer:``) writes ``{repository}`` where it links to the
repository (its contributors, its licences); this extension puts the configured address there
when the build starts, so that moving the course means changing one line of the configuration
(``companion.REPOSITORY`` says the same; tests/test_student.py checks both, and
``scripts/stamp_repository.py`` rewrites the other copies).
"""
from __future__ import annotations

from sphinx.errors import ConfigError

PLACEHOLDER = "{repository}"


def fill_footer(theme_options: dict) -> dict:
    """``theme_options`` with every ``{repository}`` of ``extra_footer`` replaced by
    ``repository_url`` (without a trailing slash). A placeholder without an address is an error."""
    footer = theme_options.get("extra_footer")
    if not isinstance(footer, str) or PLACEHOLDER not in footer:
        return theme_options
    url = theme_options.get("repository_url")
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ConfigError(f"html.extra_footer links to {PLACEHOLDER}, but _config.yml has no repository: url:")
    return {**theme_options, "extra_footer": footer.replace(PLACEHOLDER, url.rstrip("/"))}


def _fill(app, config) -> None:
    config.html_theme_options = fill_footer(dict(config.html_theme_options or {}))


def setup(app):
    app.connect("config-inited", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
