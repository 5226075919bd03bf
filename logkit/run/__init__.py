"""How the analysis is run: loading folders (discover, read, assemble, cache: one pass downward),
the engine that maps a session's ranks in this process, a local pool or on Dask, the cache of
parsed sessions and per-rank partial results, the answers ``analyze_logs`` keeps (``answers``), and the
follow loop of the live view."""
