"""A port this process may not bind (EACCES: below 1024 without root) is refused as such, not as "already in use",
for a server and a router alike. The refusal is made by the socket layer, faked here (the tests may run as root)."""

import errno
import socket

import pytest

from helpers.errors import ConfigError, PortInUseError
from helpers.route.router import choose_router_port
from helpers.serve.config import ServerConfig
from helpers.serve.preflight import choose_port


@pytest.fixture
def bind_refused(monkeypatch):
    def refuse(self, address):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(socket.socket, "bind", refuse)


@pytest.mark.parametrize("choose", [lambda: choose_port(ServerConfig(port=80)),
                                    lambda: choose_router_port("127.0.0.1", 80)], ids=["server", "router"])
def test_a_port_below_1024_without_root_is_not_called_in_use(bind_refused, choose):
    with pytest.raises(ConfigError) as refused:
        choose()
    assert not isinstance(refused.value, PortInUseError)
    message = str(refused.value)
    assert "below 1024" in message and "root" in message and "8000" in message and "reverse proxy" in message
    assert "in use" not in message


def test_a_higher_port_refused_by_a_policy_says_permission_denied(bind_refused):
    with pytest.raises(ConfigError, match="permission denied") as refused:
        choose_port(ServerConfig(port=8123))
    assert "in use" not in str(refused.value)
