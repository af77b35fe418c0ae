"""Bibliography labels in the author-year form the text uses: "[Vaswani et al., 2017]".

The book cites with sphinxcontrib-bibtex's ``author_year`` referencing style, so the text reads
"[Vaswani et al., 2017]". The list on the References page takes its labels from the pybtex
formatting style, whose default ("alpha") writes "[VSP+17]": a reader could not match the two.
This extension registers the formatting style ``author_year_labels`` (``bibtex_default_style`` in
``_config.yml``): pybtex's ``unsrt`` entries, sorted by author, year and title, labelled the way
the text cites them (one author: "Bloem, 2019"; two: "Zhang and Sennrich, 2019"; more:
"Vaswani et al., 2017"). Two entries with the same label would be ambiguous in the text as well,
so the build warns (and, with ``-W``, fails) instead of inventing "2019a".

The list is sorted as a reader looks a label up: by the label's names as printed (TeX braces and
accents resolved, case ignored), then year, all the authors' names and title. pybtex's own ``author_year_title`` sorted
``{OpenAI}`` by its raw text, and "{" comes after every letter: "OpenAI, 2019" came after Zhang.
"""
from __future__ import annotations

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from sphinx.util import logging

logger = logging.getLogger(__name__)

NAME = "author_year_labels"


def _last_name(person) -> str:
    """The cited part of a name ("Vaswani", "van der Maaten"), TeX accents resolved."""
    parts = person.rich_prelast_names + person.rich_last_names
    return Text(" ").join(parts).render_as("text")


def author_year_label(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons if str(p) != "others"]
    year = entry.fields.get("year", "n.d.")
    if not names:  # no person: cite by title, as sphinxcontrib-bibtex does
        who = Text.from_latex(entry.fields.get("title", entry.key)).render_as("text")
    elif len(names) == 1 and len(persons) == 1:
        who = names[0]
    elif len(names) == 2 and len(persons) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {year}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        for label, count in Counter(labels).items():
            if count > 1:
                keys = [e.key for e, lab in zip(entries, labels) if lab == label]
                logger.warning(f"references {keys} share the label {label!r}: the text could not tell them apart")
        yield from labels


def _plain(latex: str) -> str:
    return Text.from_latex(latex).render_as("text")


def sorting_key(entry) -> tuple:
    """(the label's names, year, every name, title), as printed and in lower case: the list reads
    in the order of its labels ("Vaswani et al., 2017" before "Vaswani et al., 2018")."""
    label = author_year_label(entry)
    label_names = label.rsplit(", ", 1)[0]
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = []
    for person in persons:
        last = _last_name(person)
        first = " ".join(_plain(str(n)) for n in person.first_names + person.middle_names)
        names.append(f"{last}  {first}".strip())
    who = "   ".join(names) if names else _plain(entry.fields.get("title", entry.key))
    year = entry.fields.get("year", "")
    return (label_names.casefold(), year, who.casefold(), _plain(entry.fields.get("title", "")).casefold())


class AuthorYearSortingStyle(BaseSortingStyle):
    def sorting_key(self, entry):
        return sorting_key(entry)


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabelStyle
    default_sorting_style = AuthorYearSortingStyle


def setup(app):
    register_plugin("pybtex.style.formatting", NAME, AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
