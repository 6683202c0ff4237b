"""The serve room: starting a vLLM server and talking to it (notebooks 01 and 02; every later
notebook and the lab start their servers through it).

- :mod:`~helpers.serve.server` (I/O): :class:`VLLMServer` and :func:`start_server`, what a notebook holds.
- :mod:`~helpers.serve.together` (I/O): several servers started at once (a CPU) or one after the other (a GPU).
- :mod:`~helpers.serve.ahead` (I/O): servers started before the cell that uses them, standing by until it does.
- :mod:`~helpers.serve.standby` (I/O): the servers standing by, each handed over to the cell that asks for its settings.
- :mod:`~helpers.serve.live` (I/O): the servers this process launched and has not stopped, stopped at exit.
- :mod:`~helpers.serve.preflight` (I/O): checks before launch: device, dtype, free memory, a free port.
- :mod:`~helpers.serve.process` (I/O): spawning the server, its watchdog, its port, its log and temporary files.
- :mod:`~helpers.serve.group` (I/O): the server's processes as one unit: found by session, ended together.
- :mod:`~helpers.serve._orphan_guard` (I/O): the watchdog process that ends a server whose kernel died,
  or which lost one of its own processes.
- :mod:`~helpers.serve.key_guard` (runs inside vLLM): the classroom key on every route but four read-only ones.
- :mod:`~helpers.serve.access` (I/O): the OpenAI clients and keyed GET every server object offers.
- :mod:`~helpers.serve.classroom` (I/O): :func:`connect` to a shared server an instructor started.
- :mod:`~helpers.serve.gpu` (I/O): the dtype and attention backend a GPU needs, and whether torch and vLLM can use it.
- :mod:`~helpers.serve.config` (pure): :class:`ServerConfig`, checked, and the command line it becomes.
- :mod:`~helpers.serve.exposure` (pure): who can reach a server: the host it binds (IPv4 only), and the
  key of at least :data:`~helpers.serve.exposure.MIN_KEY_LENGTH` characters a host beyond loopback needs.
- :mod:`~helpers.serve.flags` (pure): which ``extra_args`` would take a flag the helper owns, or a secret.
- :mod:`~helpers.serve.engine_env` (I/O): the environment variables this machine adds to a server.
- :mod:`~helpers.serve.log` (pure): reading the server's log: milestones, KV-cache size, why it failed.
- :mod:`~helpers.serve.budget` (pure): the engine's step token budget (``max_num_batched_tokens``), from its log.
- :mod:`~helpers.serve.cuda_graphs` (pure): the largest step the engine runs as a CUDA graph, from its log.
- :mod:`~helpers.serve.model` and :mod:`~helpers.serve.dummy_model` (I/O): which model to serve,
  and preparing the embedded SmolLM2 or a random-weight 8B architecture on disk.
"""
