"""The route room: beyond one server, replicas behind vLLM's own router (issue 16; its notebook is in progress).

Modules:

- ``command``: the router's settings checked (policy, replica URLs, a key for a network-facing router)
  and the command line they become, the key never on it (pure);
- ``router``: :class:`~helpers.route.router.VLLMRouter` and ``start_router``, a ``vllm-router`` process owned
  like a vLLM server: its own session, a watchdog, ready or a clear error, a bounded stop (I/O);
- ``_launch``: vllm-router's own launcher run inside the router's process, with the classroom key's check
  added (runs inside the router);
- ``replicas``: N course servers on one machine, each with its share of cores and memory, started and
  stopped together (I/O);
- ``prefix_workload``: groups of requests, each group sharing a system prompt (notebook 05's workload, stacked),
  ordered so round robin spreads every group over every replica (I/O: a server's tokenizer cuts the text);
- ``spread``: where a router sent a load: each replica's requests and prefix-cache hit rate from its
  ``/metrics``, through the course's poller (I/O, and a pure core).
"""
