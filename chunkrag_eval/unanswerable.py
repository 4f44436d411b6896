"""The open corpus's unanswerable half: questions the shared index cannot
answer, made from shared/eval only, each asked of a view of the one index.

A question is asked of the whole index (``answerable``) or of a part of it,
given as filter clauses of the hybrid query (the same for BM25 and kNN), so
one index serves every kind:

- ``absent``: a PopQA question with its own pool filtered out, kept only when
  its subject (``s_wiki_title`` without its parenthesis) is named, as whole
  words in any case, in no other document of the corpus (every chunk is a
  span of one); the questions left out for that are counted. PopQA's answer
  strings ("politician", "composer") occur all over the corpus, so "no gold
  alias in any chunk" would keep few questions, and the wrong ones.
- ``unanswerable``: SQuAD 2.0 dev's unanswerable questions, asked of the
  whole index, which holds their paragraph (about their subject, and by
  SQuAD's annotation not answering them); only from the article the
  project's relevance model held out of its training
  (:data:`SQUAD_ARTICLES`), since it trained on the others' questions.
- ``off_topic``: a question of one set asked of a view holding only the other
  set's pools (PopQA's people and places against PubHealth's health claims,
  and back).
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from chunkrag_core.engines.schema import DOC_ID
from chunkrag_eval.datasets import EvalDataError, EvalItem

KINDS = ("answerable", "absent", "unanswerable", "off_topic")
UNANSWERABLE_KINDS = KINDS[1:]
# The SQuAD 2.0 dev articles the relevance model held out of its training
# (chunkrag_train/pairs.py's split, seed 13; tests/unit/test_unanswerable.py
# checks it): the others' questions trained it.
SQUAD_ARTICLES = ("Force",)
# Whose pools an off-topic question is asked of.
OFF_TOPIC_VIEW = {"popqa": "pubhealth", "pubhealth": "popqa"}


@dataclass(frozen=True, slots=True)
class Asked:
    """One question and the view of the shared index it is asked of."""

    dataset: str  # "popqa", "pubhealth", "squad"
    kind: str
    item: EvalItem
    filters: tuple[Mapping[str, Any], ...] = ()
    own_doc: str | None = None  # its own pool (or paragraph) in the corpus

    @property
    def answerable(self) -> bool:
        return self.kind == "answerable"


def pool_doc_id(dataset: str, item: EvalItem) -> str:
    """The document a question's pool is indexed as (chunkrag eval's name)."""
    return f"{dataset}-{item.item_id}"


def answerable(dataset: str, items: Sequence[EvalItem]) -> list[Asked]:
    return [Asked(dataset, "answerable", item, (), pool_doc_id(dataset, item)) for item in items]


class NameIndex:
    """Every document's text (and title) in one lower-cased string, to find
    which documents name a subject as whole words."""

    def __init__(self, documents: Sequence[Any]):
        parts, self.starts, self.ids, at = [], [], [], 0
        for doc in documents:
            text = f"{doc.title}\n{doc.text}".lower()
            self.starts.append(at)
            self.ids.append(doc.doc_id)
            parts.append(text)
            at += len(text) + 1
        self.text = "\x00".join(parts)

    def naming(self, name: str) -> set[str]:
        """The ids of the documents that name ``name`` (whole words, any case)."""
        pattern = re.compile(r"(?<!\w)" + re.escape(name.lower()) + r"(?!\w)")
        return {self.ids[bisect.bisect_right(self.starts, m.start()) - 1] for m in pattern.finditer(self.text)}


def absent(dataset: str, items: Sequence[EvalItem], names: NameIndex) -> tuple[list[Asked], dict[str, int]]:
    """PopQA questions asked without their own pool, when nothing else in the
    corpus names their subject; the counts of what was kept and why not."""
    out, counts = [], {"considered": len(items), "no_subject": 0, "named_elsewhere": 0}
    for item in items:
        if not item.subject:
            counts["no_subject"] += 1
            continue
        own = pool_doc_id(dataset, item)
        if names.naming(item.subject) - {own}:
            counts["named_elsewhere"] += 1
            continue
        view = ({"bool": {"must_not": [{"term": {DOC_ID: own}}]}},)
        out.append(Asked(dataset, "absent", item, view, own))
    counts["kept"] = len(out)
    return out, counts


def squad_unanswerable(path: Path, first: int, count: int) -> tuple[list[Asked], dict[str, int]]:
    """SQuAD 2.0 dev's unanswerable questions of :data:`SQUAD_ARTICLES`, in
    file order, ``count`` of them from the ``first``; its paragraph is its
    own document (named as the open corpus names SQuAD's paragraphs)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (OSError, ValueError, KeyError) as exc:
        raise EvalDataError(f"cannot read SQuAD 2.0 dev at {path}: {exc}") from None
    every = []
    for a, article in enumerate(data):
        if article["title"] not in SQUAD_ARTICLES:
            continue
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                if qa.get("is_impossible"):
                    item = EvalItem(f"squad-{qa['id']}", qa["question"], paragraph["context"])
                    every.append(Asked("squad", "unanswerable", item, (), f"squad-{a}-{p}"))
    chosen = every[first : first + count]
    return chosen, {"articles": len(SQUAD_ARTICLES), "unanswerable_in_them": len(every), "kept": len(chosen)}


def off_topic(dataset: str, items: Sequence[EvalItem]) -> list[Asked]:
    """Questions of ``dataset`` asked of the other set's pools only."""
    other = OFF_TOPIC_VIEW.get(dataset)
    if other is None:
        raise EvalDataError(f"no off-topic view for {dataset}; there is one for {', '.join(OFF_TOPIC_VIEW)}")
    view = ({"prefix": {DOC_ID: f"{other}-"}},)
    return [Asked(dataset, "off_topic", item, view, None) for item in items]


def parse_kinds(text: str | None) -> dict[str, tuple[int, int | None]]:
    """``--unanswerable``: ``"absent,unanswerable=0:60,off_topic=20"`` as
    {kind: (first, count or None for all)}; ``none`` or empty: no kind. A
    count alone is the first that many; ``A:B`` questions A to B-1."""
    if not text or text.strip() == "none":
        return {}
    out: dict[str, tuple[int, int | None]] = {}
    for part in text.split(","):
        kind, _, value = part.strip().partition("=")
        if kind not in UNANSWERABLE_KINDS:
            raise ValueError(f"unknown unanswerable kind {kind!r}; choose among {', '.join(UNANSWERABLE_KINDS)}")
        try:
            if not value:
                out[kind] = (0, None)
            elif ":" in value:
                first, last = (int(v) for v in value.split(":", 1))
                if last < first:
                    raise ValueError
                out[kind] = (first, last - first)
            else:
                out[kind] = (0, int(value))
        except ValueError:
            raise ValueError(f"an unanswerable kind is KIND, KIND=N or KIND=A:B, not {part.strip()!r}") from None
    return out
