"""The PagedAttention room: KV-cache memory in blocks (``notebooks/03_paged_attention.ipynb``).

Pure core (no I/O, no drawing):

- ``kv_math``: bytes of KV cache per token, token slots in a pool, ``blocks_for`` (also notebooks 01, 05).
- ``usage``: what an allocator reports (``BlockStatus``, ``PoolCell``, ``KVUsage``).
- ``cache``: ``PagedKVCache``, vLLM's block manager in miniature (also used by notebook 04's simulator).
- ``contiguous``: ``ContiguousKVCache``, the naive scheme: one max-length run per request.
- ``trace``: seeded request traces with real token ids (``random_trace``, ``make_kv_trace``).
- ``sim``: ``simulate_allocator`` / ``compare_allocators`` replay a trace step by step into ``KVFrame``s.
- ``sim_summary``: ``summarize_kv_run`` reduces a run to a ``KVRunSummary`` (the paper's numbers).
- ``capacity``: how many requests of a length mix (``LAB_MIX``) fit in a server's pool.
- ``live_demo``: the live demo's token-id requests (``token_workload``), sent with ``helpers.load.run``.

Drawing: ``draw`` (one frame), ``figures`` (static figures), ``player`` (the ipywidgets
animation, ``animate_allocator``), ``capacity_plots`` (capacity bars, live KV blocks in use).

Notebook glue: ``explain`` (the notebook's findings in sentences and tables built from its numbers:
``explain_waste``, ``explain_capacity``, ``explain_prefix_hits``); ``exercises`` (pure ``grade_*`` and printing ``check_*``, via ``helpers.feedback``);
``allocator_exercise`` (the learner's allocate / append / free, replayed step by step against ``PagedKVCache``
on the traces of ``allocator_traces``).
"""
