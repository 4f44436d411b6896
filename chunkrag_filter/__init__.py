"""The chunk filter, as a library: frozen chunks in, frozen chunks out.

``processors`` are the pure stages (redundancy, relevance scoring, thresholds,
ordering) and the prompts they send through an injected chat model;
``pipeline.run_filter`` runs them in order. It sits beside ``ingest_pipeline``
on top of ``chunkrag_core``: the workers and the search extension import it,
never the other way round.
"""
