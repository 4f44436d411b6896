"""What a cluster offers, asked once per question and remembered only when
the answer is the cluster's, not the asker's.

A backend asks a few questions (its version, whether the `english`
analyzer, the `rrf` and `linear` retrievers, the `hybrid` query work). In
the gateway's forward mode each question goes with whichever caller's
credentials came first, so an answer may say more about that caller than
about the cluster: a 401 or a 403 for lack of privileges says nothing of
the feature. Such an answer is *unsettled*: it is not remembered, the
request that asked gets the conservative value (feature absent, version
unknown), and the next request asks again. Only settled answers are shared
by every caller: the call worked (the feature is there), or the cluster
refused it for a reason that holds for every caller (it cannot parse the
feature: 400; no such endpoint: 404/405/501; the licence does not cover it:
a 403 that names the licence).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from chunkrag_core.engines.base import ClusterCapabilities, EngineErrorOf, translated
from chunkrag_core.engines.errors import EngineRefused

# Statuses by which a cluster says the feature asked about does not exist
# for anyone: the request could not be parsed (an unknown retriever, query
# or analyzer), the endpoint does not exist, or is not implemented.
ABSENT_STATUSES = frozenset({400, 404, 405, 501})

# The key Elasticsearch's licence refusals (a 403) carry in their error
# body: the licence holds for every caller, so such a 403 settles the
# question, unlike a 403 for the caller's missing privileges.
LICENCE_KEY = "license.expired.feature"

# Asked when nothing else is known, and what an unsettled answer stands for.
UNKNOWN_VERSION = "unknown"


@dataclass(frozen=True, slots=True)
class Unsettled:
    """An answer that says more about the asker than the cluster; never remembered."""

    status: int
    reason: str

    @property
    def unauthenticated(self) -> bool:
        # A 401: every other question asked with these credentials fails too.
        return self.status == 401


def licence_refusal(body: Mapping[str, Any] | None) -> bool:
    """Whether an error body is Elasticsearch refusing a feature for its licence."""
    error = (body or {}).get("error")
    if not isinstance(error, Mapping):
        return False
    causes = error.get("root_cause")
    parts = [error, *(cause for cause in causes if isinstance(cause, Mapping))] if isinstance(causes, list) else [error]
    return any(LICENCE_KEY in part for part in parts)


def settles(error: EngineRefused) -> bool:
    """Whether the cluster's refusal holds for every caller (the feature is
    absent), rather than for this one (not authenticated, not authorised) or
    for now (too many requests, a server error)."""
    if error.status in ABSENT_STATUSES:
        return True
    return error.status == 403 and licence_refusal(error.body)


def ask(call: Callable[[], Any], absent: Any, engine_error: EngineErrorOf, where: str) -> Any:
    """``call()``'s answer; ``absent`` when the cluster refused it for every
    caller; `Unsettled` when it refused it for this caller or for now.
    Unreachable and timed-out clusters raise, as any request does."""
    try:
        with translated(engine_error, where):
            return call()
    except EngineRefused as exc:
        if settles(exc):
            return absent
        return Unsettled(exc.status, exc.reason)


def succeeds(call: Callable[[], Any]) -> Callable[[], bool]:
    """A question answered True when ``call`` returns (whatever it returns)."""

    def question() -> bool:
        call()
        return True

    return question


# name -> (the question, as a call that raises the client's exceptions;
#          its answer when the feature is absent)
Questions = Mapping[str, tuple[Callable[[], Any], Any]]


class Probed:
    """The settled answers of one cluster, shared by a backend and its
    header views (every caller of the gateway): each question is asked until
    an answer settles it, then never again."""

    def __init__(self) -> None:
        self.settled: Mapping[str, Any] = MappingProxyType({})
        # Once every question is settled: the capabilities, the same object for everyone.
        self.whole: ClusterCapabilities | None = None
        # One probe at a time: concurrent first requests wait for the first
        # one's answers instead of asking the same questions again.
        self.lock = threading.Lock()

    def get(
        self,
        questions: Questions,
        make: Callable[[Mapping[str, Any]], ClusterCapabilities],
        engine_error: EngineErrorOf,
        where: str,
    ) -> ClusterCapabilities:
        """The capabilities ``make`` builds from every answer: settled ones
        remembered, the rest asked now with the backend's credentials, those
        still unsettled standing as absent for this request only."""
        if self.whole is not None:
            return self.whole
        with self.lock:
            if self.whole is not None:
                return self.whole
            answers = dict(self.settled)
            for name, (call, absent) in questions.items():
                if name in answers:
                    continue
                answer = ask(call, absent, engine_error, where)
                answers[name] = answer
                if isinstance(answer, Unsettled) and answer.unauthenticated:
                    break  # the rest would be refused the same way
            self.settled = MappingProxyType(
                {name: answer for name, answer in answers.items() if not isinstance(answer, Unsettled)}
            )
            capabilities = make(
                {name: conservative(answers.get(name), absent) for name, (_, absent) in questions.items()}
            )
            if set(self.settled) == set(questions):
                self.whole = capabilities
            return capabilities


def conservative(answer: Any, absent: Any) -> Any:
    """An answer, or (unsettled or never asked) what stands for absence."""
    return absent if answer is None or isinstance(answer, Unsettled) else answer
