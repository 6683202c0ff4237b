"""The load room: how every chapter sends requests to a server and reads what it did.

One client, one poller, one summary, shared by notebooks 02-05 and the lab:

- ``workload``: the lab's prompt mix (``LAB_PROMPT_LENS``), real-text prompts of exact
  token lengths, and random token-id prompts (pure, plus the server's tokenizer over HTTP);
- ``client``: one request in, one ``RequestRecord`` out, never an exception (I/O);
- ``http``: the connection pool it sends through (aiohttp, as ``vllm bench serve``; I/O);
- ``run``: a workload sent with a concurrency cap and arrival times, kept as a ``LoadTestRun`` (I/O);
- ``arrivals``: open-loop arrival times at a request rate, Poisson or bursty (pure);
- ``slo``: service-level objectives and goodput, as ``vllm bench serve --goodput`` (pure);
- ``ttft_split``: TTFT split into queueing and prefill from vLLM's histograms (pure);
- ``summary``: records to a typed ``RunSummary`` (pure);
- ``prometheus``: ``/metrics`` text to numbers (pure); ``poller``: sampling it during a load (I/O);
- ``plots``: the polled gauges over time (drawing);
- ``warmup``: an untimed burst of a load's shape before a GPU server's first timed load (I/O);
- ``pace``: how fast this machine serves the lab's mix, to size the notebooks' loads (I/O).
"""
