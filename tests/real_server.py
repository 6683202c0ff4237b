"""One real vLLM server shared by the tests of a module: ``server = server_fixture(max_num_seqs=4)``.

``SMALL_POOL`` is the KV pool of a test server whose pool plays no part in what it checks: vLLM's CPU engine
sets its pool up at about 4 s a GiB (scripts/bench_kv_pool_start.py, results/cpu/kv_pool_start.json: "init
engine" 1.3 s at 0.25 GiB, 8.0 s at the course's default of 2 GiB, ready in 24 s against 35 s on a 2-core
Xeon). 0.25 GiB still holds 5,760 tokens in float32, twice that in bfloat16: room for a request of
max_model_len 2,048 and the tests' few concurrent requests. Tests of the pool itself, and the notebooks, keep
the course's default.
"""

import pytest

SMALL_POOL = {"kv_cache_space_gib": 0.25}


def server_fixture(**settings):
    """A module-scoped pytest fixture that starts one server with ``settings`` (a small KV pool unless
    ``settings`` give one) and stops it after the module."""

    @pytest.fixture(scope="module")
    def server():
        from helpers.serve.server import start_server

        with start_server(quiet=True, **{**SMALL_POOL, **settings}) as running:
            yield running

    return server
