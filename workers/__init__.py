"""Celery workers that run the post-search processors next to the data.

Not built yet: they arrive with the chunk-filter milestone. Redis, their
broker, is already started by `chunkrag services up`.
"""
