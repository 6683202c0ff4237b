"""The traffic room: open-loop request rates, SLOs and saturation (``labs/02_serving_real_traffic.ipynb``).

Modules (each listed as it lands):

- ``rates``: one point per (setting, offered rate), saturation measured, the best rate under an SLO, the sweep file (pure);
- ``backlog``: is a rate's queue growing: TTFT's slope against send time, and the pace of arrivals and completions (pure);
- ``sweep``: a request-rate sweep of open-loop traffic on one running server, bounded in time (I/O);
- ``bracket``: the one rate a sweep adds where its planned rates missed the knee (pure);
- ``token_budget``: ``--max-num-batched-tokens`` against long prompts among short decodes, a server per budget (I/O);
- ``saturation_model``: the rate past which the queue grows, from notebook 04's step-time model on paper
  and by simulation, and which term explains a measured one (pure);
- ``reference``: the lab's sweep beside the H200's recorded one (``results/gpu/lab2/``), in one table (pure);
- ``plots``: latency and completions against offered load, TTFT split into queue, prefill and the rest, and
  the measured decode step against the memory-bandwidth roofline (drawing);
- ``vllm_bench``: `vllm bench serve` at one rate on the lab's server, read into the same figures as the course's (I/O);
- ``bench_file``: `vllm bench serve` result files of vLLM 0.26 and 0.32 read as the course's records (pure);
- ``vllm_cli``: vLLM's CLI run from Python on either build (``python -m helpers.traffic.vllm_cli bench serve``);
- ``exercises``: the lab's graded question on a slot's worth, or why a run that never overloaded a setting
  cannot check it (notebook glue).
"""
