"""Identifier-aware terms for the full-text (SQLite FTS5) half of hybrid search.

Why terms are made here and not by an FTS5 tokenizer: Python's sqlite3 cannot register a custom
FTS5 tokenizer, and the built-in ones keep `raise_for_status` whole (or, without `tokenchars`,
lose the whole and keep the parts) and never split `raiseForStatus`. So each chunk is turned
into a line of terms here, and FTS5 reads that line with `unicode61 tokenchars '_'` (a term is
kept exactly as written: lower-case letters, digits and `_`).

Invariants:
- An identifier is a run of letters, digits and `_` not starting with a digit; `.` separates
  identifiers (`json.decoder` is `json` and `decoder`).
- Each identifier gives its whole (lower-cased), its snake form when that differs (the parts
  joined by `_`: `raiseForStatus` -> `raise_for_status`, so the two spellings find each other),
  and its parts split on `_` and on case changes (`HTTPConnection` -> `http`, `connection`).
- Queries go through the same function, so a query term matches exactly the chunk terms it
  would have made. Terms are quoted in the MATCH expression: no query text is FTS5 syntax.
"""

from __future__ import annotations

import re

# Bumped when `terms` changes: the store rebuilds the full-text table of older databases.
TERMS_VERSION = 1
# FTS5 reads the terms line with this tokenizer: `_` is part of a term, everything else (spaces)
# separates terms; unicode61 also folds case and diacritics.
FTS_TOKENIZER = "unicode61 tokenchars '_'"

_IDENTIFIER = re.compile(r"[^\W\d]\w*")


def _case_parts(word: str) -> list[str]:
    """`word` (no `_`) cut where case changes: before an upper-case letter that follows a
    lower-case one or a digit (parse|URL, v2|Parser), and before the last upper-case letter of a
    run that a lower-case one follows (HTTP|Connection). Digits stay in their word (utf8)."""
    cuts = [0]
    for i in range(1, len(word)):
        before, here = word[i - 1], word[i]
        after = word[i + 1] if i + 1 < len(word) else ""
        if here.isupper() and (
            before.islower() or before.isdigit() or (before.isupper() and after.islower())
        ):
            cuts.append(i)
    return [word[a:b] for a, b in zip(cuts, [*cuts[1:], len(word)], strict=True)]


def identifier_terms(identifier: str) -> list[str]:
    """The terms of one identifier: its whole, its snake form, its parts (lower case, no repeats)."""
    parts = [p.lower() for piece in identifier.split("_") if piece for p in _case_parts(piece)]
    whole = identifier.lower()
    snake = "_".join(parts)
    return list(dict.fromkeys([whole, snake, *parts] if snake else [whole]))


def terms(text: str) -> list[str]:
    """The terms of `text`, in order (repeats kept: FTS5's bm25 counts them)."""
    return [term for match in _IDENTIFIER.findall(text) for term in identifier_terms(match)]


def chunk_terms(path: str, text: str) -> str:
    """The line FTS5 indexes for a chunk: the terms of its path and of its lines (the same text
    the model reads, `chunker.chunk_embedding_text`)."""
    return " ".join(terms(path) + terms(text))


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression: any of the query's distinct terms (bm25 ranks chunks holding
    more and rarer ones first), or None when the query has no term."""
    unique = list(dict.fromkeys(terms(query)))
    return " OR ".join(f'"{t}"' for t in unique) if unique else None
