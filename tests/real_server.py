"""One real vLLM server shared by the tests of a module: ``server = server_fixture(max_num_seqs=4)``.

``QUICK_START`` is what a test server gets when what the test checks does not depend on it:
- a small KV pool: vLLM's CPU engine sets its pool up at about 4 s a GiB (scripts/bench_kv_pool_start.py,
  results/cpu/kv_pool_start.json: "init engine" 1.3 s at 0.25 GiB, 8.0 s at the course's default of 2 GiB, ready
  in 24 s against 35 s on a 2-core Xeon; a rerun of 2026-12-04 measured 30.6 against 32.4 s). 0.25 GiB still holds 5,760 tokens in float32, twice that in bfloat16:
  room for a request of max_model_len 2,048 and the tests' few concurrent requests;
- on a GPU, an eager start (no torch.compile, no CUDA graphs; nothing on a CPU): on the H200 the tests' compiled
  starts took 74-104 s each (2026-12-03), an eager start 48 s; these tests send a few short requests, not a
  load whose speed they judge.
Tests of the pool itself, and the notebooks, keep the course's defaults.
"""

import pytest

QUICK_START = {"kv_cache_space_gib": 0.25, "eager": True}


def server_fixture(**settings):
    """A module-scoped pytest fixture that starts one server with ``settings`` (on top of ``QUICK_START``)
    and stops it after the module."""

    @pytest.fixture(scope="module")
    def server():
        from helpers.serve.server import start_server

        with start_server(quiet=True, **{**QUICK_START, **settings}) as running:
            yield running

    return server
