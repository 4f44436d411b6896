"""Training questions the local chat model writes for licensed sentences.

The relevance judges train on 5k-6k questions (SQuAD 2.0 dev and NQ-open:
chunkrag_train/pairs.py); no larger licensed set can be fetched here. This
grows the set from the same licensed text: for a sentence of an NQ gold
passage or of a SQuAD paragraph (the training split's only: the validation
questions' passages and the held-out article stay unseen), the chat model
is asked for a question the sentence answers and the answer, copied. A
reply is kept when it parses, its answer is in the sentence word for word,
the question does not give the answer away and is a question; the
sentence is then the positive and the passage's other sentences that do not
hold the answer are its hard negatives (what a judge must learn: the answer,
not the topic).

Everything is seeded and resumable: the sentences are drawn by the seed,
each reply is appended to a JSON-lines file under its sentence's key as it
comes, and a run stopped anywhere goes on from there. Temperature 0: the
same model writes the same question.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from chunkrag_train.pairs import NQ_FILE, SQUAD_FILE, Pair, holds_answer, split_of
from ingest_pipeline.sentences import sentence_spans

# Sentences drawn per passage: a passage's sentences share its topic, so a
# few per passage give more kinds of question than all of one.
PER_PASSAGE = 2
# A sentence shorter than this rarely answers anything on its own; one longer
# than this is mostly a list.
MIN_CHARS, MAX_CHARS = 40, 400
# An answer of more words than this is a paraphrase of the sentence, not an answer.
MAX_ANSWER_WORDS = 8
# One example first: asked without it, the model gave the whole sentence as
# the answer for more than half of the sentences.
PROMPT = (
    "Write one question that the sentence answers, in your own words, and its short answer: a name, "
    "number, date or a few words copied exactly from the sentence.\n\n"
    "Sentence: The Eiffel Tower was completed in 1889 as the entrance arch to the World's Fair.\n"
    "Question: In what year was the Paris landmark built for the World's Fair finished?\n"
    "Answer: 1889\n\n"
    "Sentence: {sentence}\n"
    "Question:"
)
# "What fuel is mentioned in the sentence?" asks about the text, not the world.
_POINTS_AT_TEXT = re.compile(r"\b(the|this) (sentence|passage|text|paragraph)\b", re.IGNORECASE)
_LINE = re.compile(r"^\s*(question|answer)\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Target:
    key: str  # source:passage:sentence index, the record's key in the file
    source: str  # "written-nq" or "written-squad"
    sentence: str
    others: tuple[str, ...]  # the passage's other sentences
    split: str  # the split of the passage's own questions (chunkrag_train.pairs.split_of)


def parse_reply(text: str) -> tuple[str, str] | None:
    """(question, answer) from the model's reply, which goes on from the
    prompt's closing "Question:", or None."""
    found: dict[str, str] = {}
    for match in _LINE.finditer("Question: " + text.lstrip()):
        found.setdefault(match.group(1).lower(), match.group(2).strip().strip('"'))
    if "question" in found and "answer" in found:
        question = re.sub(r"^(question\s*:\s*)+", "", found["question"], flags=re.IGNORECASE)
        return question, found["answer"].rstrip(".")
    return None


def rejected(question: str, answer: str, sentence: str) -> str | None:
    """Why a written question is not kept (None: kept)."""
    if not question.endswith("?"):
        return "not a question"
    if not answer or len(answer.split()) > MAX_ANSWER_WORDS:
        return "no short answer"
    if not holds_answer(sentence, [answer]):
        return "answer not in the sentence"
    if holds_answer(question, [answer]):
        return "question gives the answer away"
    if question.lower().rstrip("?") in sentence.lower():
        return "question copies the sentence"
    if _POINTS_AT_TEXT.search(question):
        return "question points at the text"
    return None


def _sentences(text: str) -> list[str]:
    return [text[s:e].strip() for s, e in sentence_spans(text, 0, len(text))]


def _targets_of(source: str, passage_key: str, text: str, split: str, rng: random.Random) -> list[Target]:
    sentences = _sentences(text)
    usable = [i for i, s in enumerate(sentences) if MIN_CHARS <= len(s) <= MAX_CHARS]
    chosen = sorted(rng.sample(usable, min(PER_PASSAGE, len(usable))))
    return [
        Target(
            f"{source}:{passage_key}:{i}",
            source,
            sentences[i],
            tuple(s for j, s in enumerate(sentences) if j != i),
            split,
        )
        for i in chosen
    ]


def targets(eval_dir: Path, seed: int) -> list[Target]:
    """The sentences to write for, in a seeded order: NQ gold passages and
    SQuAD paragraphs whose questions are in the training split."""
    rng = random.Random(seed)
    out: list[Target] = []
    seen: set[str] = set()
    with gzip.open(eval_dir / NQ_FILE, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            passage = json.loads(line)["ctxs"][0]["text"]
            split = split_of(f"nq:{number}", seed)
            if split == "train" and passage not in seen:
                seen.add(passage)
                out += _targets_of("written-nq", str(number), passage, split, rng)
    for article in json.loads((eval_dir / SQUAD_FILE).read_text(encoding="utf-8"))["data"]:
        split = split_of("squad:" + article["title"], seed)
        if split != "train":
            continue
        for p, paragraph in enumerate(article["paragraphs"]):
            out += _targets_of("written-squad", f"{article['title']}:{p}", paragraph["context"], split, rng)
    rng.shuffle(out)
    return out


def read_written(path: Path) -> dict[str, dict[str, Any]]:
    """Every reply written so far, by key (a later line of a key wins)."""
    if not path.exists():
        return {}
    done: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            done[record["key"]] = record
    return done


def write_questions(
    todo: Sequence[Target],
    ask: Callable[[str], str],
    path: Path,
    stop_after_s: float | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Ask for every target not yet in ``path`` (``ask``: prompt to reply),
    appending each record as it comes; stop once ``stop_after_s`` has passed."""
    done = read_written(path)
    started, asked = time.monotonic(), 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for target in todo:
            if target.key in done:
                continue
            if stop_after_s is not None and time.monotonic() - started >= stop_after_s:
                break
            reply = ask(PROMPT.format(sentence=target.sentence))
            parsed = parse_reply(reply)
            why = "unreadable reply" if parsed is None else rejected(parsed[0], parsed[1], target.sentence)
            record = {**asdict(target), "reply": reply, "question": parsed[0] if parsed else None}
            record |= {"answer": parsed[1] if parsed else None, "rejected": why}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            done[target.key] = record
            asked += 1
            if asked % 25 == 0:
                say(f"{len(done)} / {len(todo)} written ({asked / (time.monotonic() - started):.2f} a second)")
    kept = sum(1 for r in done.values() if r["rejected"] is None)
    return {"written": len(done), "of": len(todo), "kept": kept, "asked_now": asked}


def written_pairs(records: Iterable[dict[str, Any]]) -> list[Pair]:
    """The kept questions as pairs: the sentence relevant, the passage's
    other sentences that do not hold the answer not."""
    out: list[Pair] = []
    for r in records:
        if r.get("rejected") is not None:
            continue
        group = r["key"]
        out.append(Pair(r["question"], r["sentence"], 1, r["source"], group, r["split"]))
        for other in r["others"]:
            if not holds_answer(other, [r["answer"]]):
                out.append(Pair(r["question"], other, 0, r["source"], group, r["split"]))
    return out
