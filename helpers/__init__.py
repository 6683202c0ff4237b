"""The code behind the notebooks: one room a chapter, shared pieces at the top.

Rooms (subpackages), each opened by a docstring that lists its modules:

- ``helpers.load``: the one request client, ``/metrics`` poller and run summary every chapter uses;
- ``helpers.serve``: starting, watching and stopping a vLLM server (notebooks 01-02);
- ``helpers.paged``: the paged KV-cache allocator and its animation (notebook 03);
- ``helpers.batching``: the continuous-batching scheduler, step times, the lab's prediction (notebook 04);
- ``helpers.tuning``: the levers of notebook 05;
- ``helpers.lab``: the concurrency lab's results, plots and explanations;
- ``helpers.traffic``: open-loop request rates, SLOs, saturation and the token budget (the second lab);
- ``helpers.route``: replicas behind vLLM's router, cache-aware routing, a simulated class, parallelism (notebook 06).

Shared: ``errors``, ``paths``, ``files`` (atomic writes), ``hardware`` (this machine),
``validate`` (clear errors for bad arguments), ``local_http`` (a blocking GET whose every failure is an
OSError; loopback kept off proxies), ``feedback`` (every exercise's verdict), ``units`` (durations and shares
printed in the unit that shows them), ``drawing`` (the course's colours, figures shown as pictures), ``colab``,
``answer_audit`` (the tests' check that no exercise's answer is printed above it).

A room imports the shared modules and the rooms listed before it, never one after it; each
module has one role: a pure core, I/O, drawing, or notebook glue (``tests/test_layout.py``).
"""

from helpers import answer_audit, drawing, local_http

local_http.bypass_proxy_for_loopback()  # every course server is on 127.0.0.1: no http_proxy in between

answer_audit.install()  # records what cells show, only while the course audits itself (answer_audit's docstring)
drawing.show_figures_in_notebooks()  # a figure the helpers return shows as a picture, pyplot or not
