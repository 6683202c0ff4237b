"""One real vLLM server shared by the tests of a module: ``server = server_fixture(max_num_seqs=4)``."""

import pytest


def server_fixture(**settings):
    """A module-scoped pytest fixture that starts one server with ``settings`` and stops it after the module."""

    @pytest.fixture(scope="module")
    def server():
        from helpers.serve.server import start_server

        with start_server(quiet=True, **settings) as running:
            yield running

    return server
