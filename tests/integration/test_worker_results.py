"""Celery results after their Redis went away, with a Redis of this test's
own (stopped mid-test) and a real Celery app: a result the dispatch is done
with is detached, so its finalizer has nothing left to do; one left to its
finalizer raises there ("Exception ignored in AsyncResult.__del__"), which
is what the detaching avoids."""

from __future__ import annotations

import dataclasses
import gc
import os
import sys

import pytest
from celery.exceptions import TimeoutError as CeleryTimeout

from chunkrag_core.settings import state_home
from local_services import redis_server
from workers.app import JUDGE_TASK, make_app
from workers.dispatch import detach

pytestmark = pytest.mark.integration

REDIS_PORT = int(os.environ.get("CHUNKRAG_RESULTS_REDIS_PORT") or 6397)


@pytest.fixture
def own_redis():
    server = redis_server.RedisSettings(home=state_home(os.environ), port=REDIS_PORT)
    redis_server.process(server).up()
    yield server
    redis_server.process(server).down()


def _listening_result(app):
    """A task no worker takes, and its result subscribed to on the backend's
    pub/sub (as the dispatch's waits do)."""
    result = app.signature(JUDGE_TASK, args=("q", [], {}, "m")).apply_async()
    with pytest.raises(CeleryTimeout):
        result.get(timeout=0.2)
    return result


def test_a_detached_result_raises_nothing_from_its_finalizer_once_redis_is_gone(settings, own_redis, monkeypatch):
    app = make_app(dataclasses.replace(settings, redis_url=own_redis.local_url))
    detached, left = _listening_result(app), _listening_result(app)
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: raised.append(unraisable))
    redis_server.process(own_redis).down()

    detach([detached])
    assert detached.backend is None
    del detached
    gc.collect()
    assert raised == []

    # Left to its finalizer (run once the backend that holds it pending is
    # dropped with its app), the same result raises where nothing can catch it.
    del left, app
    gc.collect()
    assert [type(item.exc_value).__name__ for item in raised] == ["RuntimeError"]
    assert "Retry limit exceeded" in str(raised[0].exc_value)
