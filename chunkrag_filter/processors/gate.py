"""Is anything retrieved relevant at all? One decision per query.

The per-chunk scores say which candidate is best (cosine gap, rank and the
min-max normalised BM25 are relative to the query's other candidates), not
whether any is relevant: a question the index cannot answer still gets a
best candidate, and a filter cutting on relative signals keeps it. The gate
reads signals that mean the same whatever the query:

  best_cosine          the highest raw query-chunk cosine among the candidates
  best_term_overlap    the highest share of the query's content words found in
                       one candidate (features.content_terms)
  best_entity_overlap  the highest share of the query's names and numbers found
                       in one candidate (features.entity_terms); 0 when it
                       names none
  names_entities       1 when the query names something (capitalised words past
                       the first, numbers), else 0: a lower-case question has
                       no entity overlap to read
  best_relevance_logit the project's relevance model's best log-odds over the
                       best few candidates by retrieval (only where it ran)
  best_judge_cosine    a judge embedder's best query-text cosine over the same
                       few (chunkrag_train/judge_embedder.py; only where it ran)

and a logistic model over them, fitted on answerable and unanswerable
training questions (chunkrag_eval/gate_study.py), gives P(some candidate
answers). Below the cut the outcome is "nothing relevant": no chunk is kept,
the answer is "not found", and no model is called.

Everything here is pure: features from the candidates' texts and scores,
the decision from a model and a cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from chunkrag_core.settings import GATES
from chunkrag_filter.processors.features import content_terms, entity_terms

GATE_RETRIEVAL_FEATURES = ("best_cosine", "best_term_overlap", "best_entity_overlap", "names_entities")
GATE_RELEVANCE_FEATURES = ("best_relevance_logit",)
GATE_JUDGE_FEATURES = ("best_judge_cosine",)
GATE_FEATURES = GATE_RETRIEVAL_FEATURES + GATE_RELEVANCE_FEATURES + GATE_JUDGE_FEATURES
# GATES: "retrieval": the retrieval signals and the query's words and names;
# "crossencoder": those and the relevance model on the best few candidates;
# "off" (declared in chunkrag_core.settings, where the gateway's default
# gate is checked).
__all__ = ["GATES", "GATE_FEATURES", "GateOutcome", "gate_features"]
# Candidates (in retrieval order) the relevance model reads for the gate: a
# relevant chunk nearly always ranks in the first few, and each costs a
# model pass (~10 ms on two cores).
GATE_TOP = 3


def gate_features(
    query: str,
    texts: Sequence[str],
    stage_scores: Sequence[Mapping[str, float]],
    relevance_logits: Sequence[float] = (),
    judge_cosines: Sequence[float] = (),
) -> dict[str, float]:
    """The gate's features for one query's candidates (texts in retrieval
    order, their stage scores with the raw ``cosine``); ``relevance_logits``
    and ``judge_cosines`` for the first few candidates, when the relevance
    model or a judge embedder read them (no judge: no ``best_judge_cosine``)."""
    terms, entities = content_terms(query), entity_terms(query)
    words = [content_terms(text) for text in texts]
    judged = {"best_judge_cosine": max(judge_cosines)} if judge_cosines else {}
    return {
        "best_cosine": max((float(s.get("cosine", 0.0)) for s in stage_scores), default=0.0),
        "best_term_overlap": max((_share(terms, w) for w in words), default=0.0),
        "best_entity_overlap": max((_share(entities, w) for w in words), default=0.0),
        "names_entities": 1.0 if entities else 0.0,
        "best_relevance_logit": max(relevance_logits, default=0.0),
        **judged,
    }


def _share(wanted: set[str], found: set[str]) -> float:
    return len(wanted & found) / len(wanted) if wanted else 0.0


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """The gate's reading of one query's candidates: P(some candidate answers),
    the cut it was held to, and the features it read."""

    gate: str  # "retrieval" or "crossencoder"
    probability: float
    cut: float
    features: Mapping[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.probability >= self.cut

    def reason(self) -> str:
        """Why nothing was kept, in words a caller can act on."""
        f = self.features
        said = [f"P(relevant) {self.probability:.3f} < cut {self.cut:g}", f"best cosine {f.get('best_cosine', 0):.2f}"]
        if f.get("names_entities"):
            said.append(f"{f.get('best_entity_overlap', 0):.0%} of the query's names in the best candidate")
        said.append(f"{f.get('best_term_overlap', 0):.0%} of its words")
        if self.gate == "crossencoder":
            said.append(f"relevance model's best log-odds {f.get('best_relevance_logit', 0):.2f}")
        return "no candidate looks relevant: " + ", ".join(said)

    def to_json(self) -> dict:
        return {
            "gate": self.gate,
            "probability": round(self.probability, 6),
            "cut": self.cut,
            "passed": self.passed,
            "features": {k: round(float(v), 6) for k, v in self.features.items()},
        }
