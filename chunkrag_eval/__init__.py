"""The evaluation command: index each question's context pool, retrieve,
filter, and measure what the filter kept (``chunkrag eval``)."""
