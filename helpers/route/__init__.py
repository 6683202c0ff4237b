"""The route room: beyond one server, replicas behind vLLM's own router (``notebooks/06_beyond_one_server.ipynb``).

Modules:

- ``command``: the router's settings checked (policy, replica URLs, a key for a network-facing router)
  and the command line they become, the key never on it (pure);
- ``router``: :class:`~helpers.route.router.VLLMRouter` and ``start_router``, a ``vllm-router`` process owned
  like a vLLM server: its own session, a watchdog, ready or a clear error, a bounded stop (I/O);
- ``_launch``: vllm-router's own launcher run inside the router's process, with the classroom key's check
  added (runs inside the router);
- ``render_check``: whether every replica renders prompts for the cache-aware router, asked before it starts
  (I/O);
- ``replicas``: N course servers on one machine, each with its share of cores and memory, started and
  stopped together (I/O);
- ``prefix_workload``: groups of requests, each group sharing a system prompt (notebook 05's workload, stacked),
  ordered so round robin spreads every group over every replica (I/O: a server's tokenizer cuts the text);
- ``spread``: where a router sent a load: each replica's requests and prefix-cache hit rate from its
  ``/metrics``, through the course's poller (I/O, and a pure core);
- ``policies``: what round robin and cache-aware routing do with groups sharing a prompt, on paper (pure), and
  measured through a router in front of running replicas (I/O);
- ``class_sim``: a class of N students, each sending a few of the lab's requests at their own pace (open loop,
  seeded), drawn (pure) and sent to a server or a router (I/O);
- ``class_report``: the p95 each student saw against a target, and the results file (pure, and files);
- ``parallel``: tensor and data parallelism as arithmetic: weights, KV heads and bytes per GPU, all-reduces a step
  (pure);
- ``plots``: where each policy sent the load, and each student's p95 against the target (drawing);
- ``exercises``: the notebook's predictions set beside the run, and its graded exercises (notebook glue).
"""
