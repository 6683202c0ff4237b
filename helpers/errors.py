"""The course's errors: each message says what happened and what to do about it."""

from __future__ import annotations


class CourseError(Exception):
    """Base of every error the helpers raise on purpose."""


class InvalidArgumentError(CourseError, ValueError):
    """A helper was called with a value it cannot use (a count of 0, NaN seconds, ...); raised
    before any work starts, with what was given and what to pass instead (see helpers.validate)."""


class ResultsFileError(CourseError, ValueError):
    """A saved results file is empty, cut short or not what it claims to be; the message names
    the file and what to do (run the cell that makes it again, or delete it)."""


class ConfigError(CourseError, ValueError):
    """A server setting is invalid; raised before anything is launched."""


class NoGPUError(ConfigError):
    """A GPU was asked for on a machine without one."""


class NotEnoughMemoryError(ConfigError):
    """The KV cache asked for does not fit in this machine's free memory."""


class StartedAheadUnusedError(CourseError):
    """Under the course's tests, a server started afresh while servers started ahead stood by unused: a notebook's
    ``start_ahead`` entry and the settings of the cell that was to use it differ (helpers.serve.standby)."""


class PortInUseError(CourseError):
    """Another process already listens on the port the server was to use."""


class RouterNotInstalledError(CourseError):
    """vLLM's router (PyPI ``vllm-router``) is not installed; the message says how to install it."""


class ModelNotAvailableError(CourseError):
    """The model cannot be found, fetched or prepared."""


class CacheNotWritableError(CourseError):
    """The folder for prepared models cannot be written."""


class ServerStartError(CourseError):
    """The vLLM server did not become ready.

    ``cause`` is a short label found by reading the server's log (``"port in use"``,
    ``"model not found"``, ...), ``log_tail`` the last lines of that log.
    """

    def __init__(self, message: str, *, cause: str, log_tail: str, log_path: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.log_tail = log_tail
        self.log_path = log_path

    def __str__(self) -> str:
        tail = "\n".join("    " + line for line in self.log_tail.splitlines())
        return f"{self.args[0]}\n  log: {self.log_path}\n  last lines:\n{tail}"


class StartupTimeoutError(ServerStartError):
    """The server was still not ready when the start-up time ran out."""


# A start that may fail on a shared machine: what a caller that can go on without the server catches.
START_ERRORS = (ServerStartError, PortInUseError, NotEnoughMemoryError)
