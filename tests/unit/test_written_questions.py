"""Questions the chat model writes for licensed sentences: what is kept,
what becomes a pair, and that a stopped run goes on where it stopped."""

import gzip
import json

from chunkrag_train.written import Target, parse_reply, rejected, targets, write_questions, written_pairs

SENTENCE = "As You Like It is a pastoral comedy by William Shakespeare believed to have been written in 1599."


def test_the_reply_goes_on_from_the_prompts_question():
    assert parse_reply(' In what year was "As You Like It" written?\nAnswer: 1599.') == (
        'In what year was "As You Like It" written?',
        "1599",
    )
    assert parse_reply("Question: Who wrote it?\nAnswer: Shakespeare")[0] == "Who wrote it?"
    assert parse_reply("I cannot help with that.") is None


def test_only_a_real_question_with_a_short_copied_answer_is_kept():
    assert rejected("In what year was the comedy written?", "1599", SENTENCE) is None
    assert rejected("In what year was the comedy written", "1599", SENTENCE) == "not a question"
    assert rejected("Who wrote it?", "Marlowe", SENTENCE) == "answer not in the sentence"
    assert rejected("Which play by William Shakespeare is a comedy?", "William Shakespeare", SENTENCE) == (
        "question gives the answer away"
    )
    long = "a pastoral comedy by William Shakespeare believed to have been written"
    assert rejected("What is As You Like It?", long, SENTENCE) == "no short answer"
    assert rejected("What year is named in the sentence?", "1599", SENTENCE) == "question points at the text"


def _target(n: int) -> Target:
    return Target(f"written-nq:{n}:0", "written-nq", SENTENCE, ("It is set in the Forest of Arden.",), "train")


def test_a_kept_question_pairs_its_sentence_against_the_others_that_miss_the_answer():
    record = {
        "key": "written-nq:7:0",
        "source": "written-nq",
        "sentence": SENTENCE,
        "others": (
            "It is set in the Forest of Arden.",
            "It was first published in the 1623 folio, 24 years after 1599.",
        ),
        "split": "train",
        "question": "In what year was the comedy written?",
        "answer": "1599",
        "rejected": None,
    }
    pairs = written_pairs([record, record | {"key": "written-nq:8:0", "rejected": "no short answer"}])
    assert [(p.text[:10], p.label) for p in pairs] == [(SENTENCE[:10], 1), ("It is set ", 0)]
    assert {p.group for p in pairs} == {"written-nq:7:0"}


def test_a_stopped_run_goes_on_where_it_stopped(tmp_path):
    path, asked = tmp_path / "written.jsonl", []

    def ask(prompt):
        asked.append(prompt)
        return " In what year was the comedy written?\nAnswer: 1599"

    todo = [_target(n) for n in range(3)]
    first = write_questions(todo, ask, path, stop_after_s=0.0)  # stops before asking anything
    assert first["asked_now"] == 0
    write_questions(todo[:2], ask, path)
    assert write_questions(todo, ask, path) == {"written": 3, "of": 3, "kept": 3, "asked_now": 1}
    assert len(asked) == 3 and len(path.read_text().splitlines()) == 3


def test_targets_are_seeded_and_from_the_training_split_only(tmp_path):
    (tmp_path / "nq").mkdir()
    (tmp_path / "squad").mkdir()
    passage = "Title: " + " ".join(f"Sentence number {i} is long enough to be asked about here." for i in range(4))
    with gzip.open(tmp_path / "nq" / "nq-open-oracle.jsonl.gz", "wt") as out:
        for n in range(40):
            out.write(json.dumps({"ctxs": [{"text": f"{n} {passage}"}]}) + "\n")
    squad = {"data": [{"title": "Force", "paragraphs": [{"context": passage}]}]}
    (tmp_path / "squad" / "squad2_cs224n_dev-v2.0.json").write_text(json.dumps(squad))
    first, again = targets(tmp_path, 13), targets(tmp_path, 13)
    assert first == again and first != targets(tmp_path, 14)
    from chunkrag_train.pairs import split_of

    assert all(t.split == "train" for t in first)
    held = {n for n in range(40) if split_of(f"nq:{n}", 13) == "validation"}
    assert held and not any(t.key.split(":")[1] in {str(n) for n in held} for t in first if t.source == "written-nq")
    assert all(len(t.others) == 3 for t in first)
