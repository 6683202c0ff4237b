r"""The settings of one vLLM server, checked before launch, and the command line they become.

The same :class:`ServerConfig` drives a CPU and a GPU server; the command differs only where
the hardware does (see :func:`build_launch`):

- CPU: ``-O0`` (skips torch.compile: about 34 s to ready instead of about 2 minutes, with
  no measurable throughput difference on CPU), an explicit KV-cache size (vLLM's CPU build
  fails at start-up without one), the model running inside the engine process (``uni``), and a
  dtype the CPU computes natively (:func:`cpu_dtype`).
- GPU: ``--gpu-memory-utilization`` sizes the KV pool; compilation and CUDA graphs stay on
  unless ``eager=True`` (``--enforce-eager``): on an H200 (vLLM 0.26, SmolLM2) a start took 48 s
  instead of 94-130 s and served about a third of the tokens/s, so the course starts eager
  where a notebook does not measure speed. The dtype and attention backend a GPU needs come
  from :mod:`helpers.serve.gpu`.

What the machine adds to the environment (tcmalloc, the cores to bind) comes from
:mod:`helpers.serve.engine_env` (or :func:`build_launch`'s ``machine_env``); everything else
here is computed from its arguments alone.
Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> cfg = ServerConfig(model="/models/smollm2", port=8000, max_num_seqs=8, dtype="float32")
    >>> launch = build_launch(cfg, device="cpu", model=cfg.model, served_name="smollm2")
    >>> print(launch.shell_command())
    python -m vllm.entrypoints.openai.api_server \
        --model /models/smollm2 \
        --served-model-name smollm2 \
        --host 127.0.0.1 \
        --port 8000 \
        --max-model-len 2048 \
        -O0 \
        --distributed-executor-backend uni \
        --kv-cache-memory-bytes 2147483648 \
        --max-num-seqs 8 \
        --dtype float32
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helpers import validate
from helpers.errors import ConfigError, InvalidArgumentError
from helpers.hardware import CPUInfo, Device
from helpers.serve.engine_env import device_env
from helpers.serve.exposure import LOOPBACK, check_host_and_key
from helpers.serve.flags import check_extra_args
from helpers.serve.key_guard import KEY_ENV

DEFAULT_CPU_KV_CACHE_GIB = 2.0  # 93,184 tokens of SmolLM2: room for 45 requests of 2,048 tokens
KEY_VARIABLE = KEY_ENV  # where the course's key guard reads the key (helpers.serve.key_guard)
VLLM_KEY_VARIABLE = "VLLM_API_KEY"  # vLLM's own; never set for a server (see build_launch)
# --dtype values vLLM accepts, with the name the course uses for each
DTYPES = {"auto": "auto", "bfloat16": "bfloat16", "float16": "float16", "half": "float16",
          "float32": "float32", "float": "float32"}
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")  # environment variables shown as <hidden>
HIDDEN = "<hidden>"
CORE_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")  # what VLLM_CPU_OMP_THREADS_BIND takes for one engine
KEY_GUARD = "helpers.serve.key_guard.RequireKeyEverywhere"  # the key on every route, not only /v1
GPU_SHARE = 0.85  # of a GPU's memory, split between servers that share it (notebook 06's replicas, lab 1 on a GPU)


# How long a start may take before it is stopped and reported. A GPU start compiles (torch.compile, CUDA graphs): 94-130 s
# on the H200's 16 cores, on a Colab T4's 2 vCPUs never timed, so twice the CPU's bound.
STARTUP_TIMEOUT_S = {"cpu": 300.0, "cuda": 600.0}


@dataclass(frozen=True)
class ServerConfig:
    """Everything the course varies about a server. ``None`` means "vLLM's own default"."""

    model: str | None = None  # None: $VLLM_COURSE_MODEL, else the embedded SmolLM2
    port: int | None = None  # None: the first free port from 8000 up
    host: str = LOOPBACK  # anything else is a shared classroom server and needs api_key (helpers.serve.exposure)
    max_model_len: int = 2048  # tokens, prompt + output
    max_num_seqs: int | None = None  # requests in one batch; vLLM's default: 128 on CPU
    device: str = "auto"  # "auto", "cpu" or "cuda"
    gpu_memory_utilization: float | None = None  # fraction of GPU memory for weights + KV
    kv_cache_space_gib: float | None = None  # explicit KV pool size; on CPU default 2 GiB
    enable_prefix_caching: bool | None = None  # vLLM 0.26+ default: on
    dtype: str | None = None  # e.g. "half" on a T4, which has no bf16
    eager: bool = False  # GPU: no torch.compile, no CUDA graphs (--enforce-eager): starts ~2x faster, serves slower
    quantization: str | None = None  # e.g. "fp8" on a recent GPU
    api_key: str | None = field(default=None, repr=False)  # never shown in reprs or logs
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float | None = None  # None: by device, STARTUP_TIMEOUT_S
    log_dir: Path | None = None  # None: build/server-logs in the course folder
    # CPU: the cores the model worker binds (VLLM_CPU_OMP_THREADS_BIND), e.g. "1" or "0-3"; None: every
    # core. Replicas sharing one machine each get their own (helpers.route.replicas).
    cpu_cores: str | None = None

    def startup_timeout(self, device: str) -> float:
        """Seconds a start may take on ``device`` ("cpu" or "cuda"): the one given, else :data:`STARTUP_TIMEOUT_S`.

        >>> ServerConfig().startup_timeout("cuda"), ServerConfig(startup_timeout_s=90).startup_timeout("cuda")
        (600.0, 90)
        """
        return STARTUP_TIMEOUT_S[device] if self.startup_timeout_s is None else self.startup_timeout_s

    def __post_init__(self) -> None:
        try:
            self._check()
        except InvalidArgumentError as error:  # helpers.validate's message; a bad server setting is a ConfigError
            raise ConfigError(str(error)) from None

    def _check(self) -> None:
        validate.positive_int(self.max_model_len, "max_model_len")
        validate.optional_positive_int(self.max_num_seqs, "max_num_seqs", none_means="vLLM's default")
        port = self.port
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise ConfigError(f"port must be an integer between 1 and 65535, got {validate.given(port)}.")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}.")
        if self.gpu_memory_utilization is not None:
            validate.fraction(self.gpu_memory_utilization, "gpu_memory_utilization", of="memory",
                              hint="E.g. 0.9 leaves 10% of the GPU to other programs; None: vLLM's default.")
        if self.kv_cache_space_gib is not None:
            validate.positive_number(self.kv_cache_space_gib, "kv_cache_space_gib", unit="GiB")
        validate.boolean(self.enable_prefix_caching, "enable_prefix_caching", none_means="vLLM's default (on)")
        validate.boolean(self.eager, "eager")
        if self.dtype is not None:
            validate.one_of(self.dtype, "dtype", DTYPES, hint="Or None to let the course choose.")
        if self.quantization is not None and not isinstance(self.quantization, str):
            raise ConfigError(f"quantization is the name of a method such as 'fp8', or None for none; got "
                              f"{validate.given(self.quantization, typed=True)}.")
        # A NaN or infinite timeout would let a server that never answers hold the notebook forever.
        if self.startup_timeout_s is not None:
            validate.positive_number(self.startup_timeout_s, "startup_timeout_s", unit="seconds",
                                     hint="Pass e.g. 300; a GPU's first start may need 600; None: by device.")
        object.__setattr__(self, "extra_args", _arguments(self.extra_args))  # frozen: the one way to normalise
        if self.cpu_cores is not None and not (isinstance(self.cpu_cores, str) and CORE_LIST.fullmatch(self.cpu_cores)):
            raise ConfigError(f"cpu_cores is a list of cores like '0', '1-3' or '0,2', got {self.cpu_cores!r}.")
        check_host_and_key(self.host, self.api_key)  # beyond loopback, a classroom-strength key
        check_extra_args(self.extra_args, self.api_key)  # no flag the helper sets, no key on argv


@dataclass(frozen=True)
class Launch:
    """A command line and the environment variables it needs, ready for ``subprocess``.

    Its repr, and :meth:`shown_env`, hide the values of secrets (``COURSE_SERVER_KEY``, ...):

    >>> Launch(["python"], {"COURSE_SERVER_KEY": "s3cret", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    Launch(argv=['python'], env={'COURSE_SERVER_KEY': '<hidden>', 'VLLM_ENABLE_V1_MULTIPROCESSING': '0'})
    """

    argv: list[str]
    env: dict[str, str]  # only the variables the course sets, on top of os.environ

    def shown_env(self) -> dict[str, str]:
        """The environment with every secret's value replaced by ``<hidden>``, for printing.

        A variable is secret when its name contains KEY, TOKEN, SECRET or PASSWORD.
        """
        return {name: HIDDEN if is_secret_name(name) else value for name, value in self.env.items()}

    def __repr__(self) -> str:
        return f"Launch(argv={self.argv!r}, env={self.shown_env()!r})"

    def display_command(self) -> list[str]:
        """The argv without the interpreter path, for showing to learners."""
        return ["python", *self.argv[1:]]

    def shell_command(self) -> str:
        """The command as you would type it in a terminal, one flag (and its value) per line."""
        words = self.display_command()
        lines = [" ".join(shlex.quote(w) for w in words[:3])]
        for word in words[3:]:
            if word.startswith("-") or lines[-1].startswith("python"):
                lines.append(shlex.quote(word))
            else:
                lines[-1] += " " + shlex.quote(word)
        return " \\\n    ".join(lines)


def build_launch(
    config: ServerConfig, *, device: Device, model: str, served_name: str, load_format: str | None = None,
    machine_env: dict[str, str] | None = None,
) -> Launch:
    """Turn a validated config into vLLM's command line for the given device.

    ``load_format="dummy"`` serves random weights from a config-only folder (helpers.serve.dummy_model).
    ``machine_env`` is what this machine adds to the environment (tcmalloc, cores to bind, ...);
    None asks :func:`helpers.serve.engine_env.device_env`. The key goes in the environment, never argv:

    >>> cfg = ServerConfig(port=8000, host="0.0.0.0", api_key="s3cret-class-key")
    >>> launch = build_launch(cfg, device="cuda", model="/m", served_name="m", machine_env={})
    >>> launch.env, "s3cret-class-key" in launch.argv, launch.argv[-2:]
    ({'COURSE_SERVER_KEY': 's3cret-class-key'}, False, ['--middleware', 'helpers.serve.key_guard.RequireKeyEverywhere'])
    """
    if config.port is None:
        raise ConfigError("build_launch needs a concrete port; VLLMServer picks one.")
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--served-model-name", served_name,
        "--host", config.host,
        "--port", str(config.port),
        "--max-model-len", str(config.max_model_len),
    ]
    if load_format is not None:
        argv += ["--load-format", load_format]
    env = dict(device_env(device) if machine_env is None else machine_env)
    if device == "cpu" and config.cpu_cores is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = config.cpu_cores
    kv_gib = config.kv_cache_space_gib
    if device == "cpu":
        # -O0 and the "uni" executor: see the module docstring and helpers.serve.engine_env.
        argv += ["-O0", "--distributed-executor-backend", "uni"]
        kv_gib = kv_gib or DEFAULT_CPU_KV_CACHE_GIB  # the CPU build fails at start-up without a size
    if kv_gib is not None:
        # One flag for both builds (VLLM_CPU_KVCACHE_SPACE would take whole GiB only).
        argv += ["--kv-cache-memory-bytes", str(int(kv_gib * 2**30))]
    if config.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if config.enable_prefix_caching else "--no-enable-prefix-caching")
    if config.dtype is not None:
        argv += ["--dtype", config.dtype]
    if config.quantization is not None:
        argv += ["--quantization", config.quantization]
    if config.eager and device == "cuda":  # a CPU server never compiles (-O0 above)
        argv.append("--enforce-eager")
    argv += list(config.extra_args)
    if config.api_key:
        # Through the environment, not argv: argv is visible to every user in `ps`. And not as VLLM_API_KEY:
        # vLLM 0.26 writes that one, in plain text, into its compile cache's cache_key_factors.json. The
        # course's guard alone checks the key, on every route, /v1 included (helpers.serve.key_guard).
        env[KEY_VARIABLE] = config.api_key
        argv += ["--middleware", KEY_GUARD]
    return Launch(argv, env)


def cpu_dtype(cpu: CPUInfo, requested: str | None = None) -> tuple[str, str]:
    """The ``--dtype`` to serve on this CPU, and a sentence saying why.

    bfloat16 where the CPU computes it natively (AVX-512 BF16 or AMX), float32 elsewhere:
    without those instructions oneDNN cannot build a bf16 matmul and vLLM falls back to a
    path that measured 4.6x slower than float32 (7.8 against 35.9 tok/s on a 2-core AVX2 EPYC).
    float16 is refused where the CPU has no float16 arithmetic (on the same AVX-512 BF16 machine it
    measured 17.5 tok/s against bfloat16's 121-131 on the lab's prompts). A ``requested`` bfloat16 on a CPU
    without it is served, with the warning in the sentence (the course's benchmark compares both).

    >>> avx2 = CPUInfo("laptop", 2, frozenset({"avx2"}))
    >>> cpu_dtype(avx2)[0], cpu_dtype(CPUInfo("EPYC", 2, frozenset({"avx512f", "avx512_bf16"})))[0]
    ('float32', 'bfloat16')
    >>> cpu_dtype(avx2, "half")
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: dtype='half' cannot be served on this CPU (laptop, AVX2): it has no float16 arithmetic (AVX-512 FP16 or AMX-FP16), and vLLM emulates it about 7x slower than bfloat16. Use dtype='float32', or dtype=None to let the course choose.
    """
    native = "bfloat16" if cpu.native_bf16 else "float32"
    wanted = DTYPES.get(requested or "auto")
    if wanted is None:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {requested!r}.")
    if wanted == "auto":
        why = ("it computes bfloat16 natively (AVX-512 BF16 or AMX), at half the memory of float32"
               if cpu.native_bf16 else
               "it has no bfloat16 arithmetic (no AVX-512 BF16 or AMX), where bfloat16 measured 4.6x slower "
               "than float32; float32 also doubles the KV cache's bytes per token")
        return native, f"serving in {native} on this CPU ({cpu.describe()}): {why}"
    if wanted == "float16" and not cpu.native_fp16:
        raise ConfigError(
            f"dtype={requested!r} cannot be served on this CPU ({cpu.describe()}): it has no float16 arithmetic "
            f"(AVX-512 FP16 or AMX-FP16), and vLLM emulates it about 7x slower than bfloat16. Use dtype={native!r}, "
            "or dtype=None to let the course choose."
        )
    if wanted == "bfloat16" and not cpu.native_bf16:
        return wanted, (f"serving in bfloat16 as asked, but this CPU ({cpu.describe()}) has no bfloat16 "
                        "arithmetic: expect it several times slower than dtype='float32' (4.6x measured)")
    return wanted, f"serving in {wanted} as asked"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's value must not be shown: its name says it is a key.

    >>> is_secret_name("VLLM_API_KEY"), is_secret_name("HF_TOKEN"), is_secret_name("LD_PRELOAD")
    (True, True, False)
    """
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def _arguments(extra_args: object) -> tuple[str, ...]:
    """``extra_args`` as a tuple (None: no arguments); a single string or a non-sequence is refused."""
    if extra_args is None:
        return ()
    if isinstance(extra_args, (str, bytes)) or not isinstance(extra_args, Sequence):
        raise ConfigError("extra_args is a sequence of separate arguments, e.g. ('--seed', '0'), "
                          f"or None for none; got {validate.given(extra_args, typed=True)}.")
    return tuple(extra_args)
