"""Celery workers that judge chunks for the ChunkRAG filter, next to the data.

- ``app``: the Celery app on Redis (broker and results) and its delivery settings;
- ``tasks``: the one scoring task, a thin wrapper around ``judging.judge_batch``;
- ``dispatch``: ``celery_judge_many``, the ``JudgeMany`` that sends the batches
  ``chunkrag_filter.judging`` plans and collects them;
- ``score_cache``: scores cached in Redis, shared by every worker;
- ``codec``: judgements and options as JSON for the broker;
- ``errors``: the workers' project errors, and the one reading of the queue
  clients' exceptions that raises them.

Start a worker with ``chunkrag workers`` or
``.venv/bin/celery -A workers.app worker --loglevel=INFO --concurrency=2 --pool=prefork``.
"""
