"""Reading a vLLM server's log: start-up milestones, the KV-cache capacity, and why it failed.

Every pattern here was taken from a real log of vLLM 0.32 (CPU) or 0.26 (GPU); the tests in
``tests/test_server_log.py`` replay those captured logs (``tests/data/server_logs/``).

Example::

    >>> diagnose("OSError: [Errno 98] Address already in use", returncode=1).cause
    'port in use'
    >>> diagnose("Value error, User-specified max_model_len (100000) is greater than the derived "
    ...          "max_model_len (max_position_embeddings=8192.0 or model_max_length=None in model's config.json).",
    ...          returncode=1).advice  # doctest: +NORMALIZE_WHITESPACE
    'max_model_len=100000 is longer than this model allows: its config.json allows 8192 tokens
     (max_position_embeddings). Start with max_model_len=8192 or less.'
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from helpers.serve._orphan_guard import NOTE_PREFIX


@dataclass(frozen=True)
class Diagnosis:
    cause: str  # a short label, stable enough for tests and notebooks to branch on
    advice: str  # what happened and what to do, in a sentence or two


# (cause, pattern, advice). The first match wins, so specific causes come before generic ones.
_CAUSES: tuple[tuple[str, str, str], ...] = (
    ("port in use", r"Address already in use",
     "Another program already listens on this port (often a server left from an earlier "
     "kernel). Stop it, or start with port=None to take the first free port."),
    ("invalid flag", r"api_server\.py: error: (?P<detail>.+)",
     "vLLM rejected a command-line flag: {detail}. Fix the value in ServerConfig / extra_args."),
    ("gated model", r"GatedRepoError|Cannot access gated repo|Access to model .* is restricted",
     "The model is gated: accept its licence on Hugging Face and set HF_TOKEN in the "
     "environment before starting Jupyter."),
    ("model not found",
     r"Repo id must be in the form|is not a local folder and is not a valid model identifier"
     r"|does not appear to have a file named config\.json|RepositoryNotFoundError",
     "vLLM could not find the model: check the folder path or the Hugging Face model id."),
    ("hub unreachable",
     r"Name or service not known|Temporary failure in name resolution|LocalEntryNotFoundError"
     r"|couldn't connect to 'https://huggingface\.co'|Network is unreachable",
     "The model is not cached locally and the Hugging Face hub cannot be reached. Connect to "
     "the internet or use the embedded model."),
    ("KV cache size not set", r"less than desired CPU memory utilization",
     "On CPU, vLLM needs an explicit KV-cache size: set kv_cache_space_gib (the course "
     "default is 2 GiB)."),
    ("GPU memory taken",
     r"less than desired GPU memory utilization",
     "Less GPU memory is free than gpu_memory_utilization asks for: another process holds "
     "some (often an old server; `nvidia-smi` lists it). Stop it (helpers.serve.server.stop_all_servers() "
     "for this kernel's), or lower gpu_memory_utilization, e.g. 0.45 for each of two servers."),
    ("max model length above the model's limit",
     # vLLM compares with max_position_embeddings (or a larger model_max_length, where config.json has one)
     r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived max_model_len "
     r"\((?P<limit_key>\w+)=(?P<allowed>\d+)",
     "max_model_len={asked} is longer than this model allows: its config.json allows {allowed} "
     "tokens ({limit_key}). Start with max_model_len={allowed} or less."),
    # Before "out of memory": vLLM says "memory", but the pool it was given is too small, not too big.
    ("KV cache too small", r"No available memory for the cache blocks",
     "The KV cache is too small to hold a single block of tokens: raise kv_cache_space_gib (the course "
     "default is 2 GiB), or on a GPU without it gpu_memory_utilization, which is what vLLM's log names. "
     "A pool still too small for one request of max_model_len tokens makes vLLM say how much it needs."),
    # vLLM 0.26 (GPU) and 0.32 (CPU) give both sizes; on a GPU this is also what a pool smaller than a block says.
    ("max model length exceeds KV cache",
     r"max seq len \((?P<mml>\d+)\), \((?P<needed>[\d.]+) GiB KV cache is needed, which is larger than "
     r"the available KV cache memory \((?P<available>[\d.]+) GiB\)",
     "One request of max_model_len={mml} tokens needs {needed} GiB of KV cache, and the pool has {available} GiB. "
     "Give the KV cache more than {needed} GiB (kv_cache_space_gib, or on a GPU gpu_memory_utilization), "
     "or lower max_model_len. (vLLM rounds both figures to 0.01 GiB and keeps one block of the pool back, so "
     "two equal figures mean the pool fell short by less than that.)"),
    ("max model length exceeds KV cache",
     r"larger than the available KV cache memory|KV cache is needed, which is larger than"
     r"|max seq len .* is larger than the maximum number of tokens that can be stored",
     "The KV cache cannot hold even one request of max_model_len tokens. Lower max_model_len "
     "or give the KV cache more memory (kv_cache_space_gib / gpu_memory_utilization)."),
    ("out of memory",
     r"CUDA out of memory|OutOfMemoryError"
     r"|Cannot allocate memory|Insufficient memory|is larger than the available memory"
     r"|less than requested memory for kv",
     "The server ran out of memory. Lower kv_cache_space_gib or gpu_memory_utilization, "
     "choose a smaller model, or stop other servers using the same memory."),
    # The course refuses this before launch (preflight reads the compute capability); vLLM's words
    # are kept for a user who forces the flag through: the T4 on Colab is such a GPU.
    ("dtype the GPU cannot run",
     r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0\. Your (?P<gpu>.+?) GPU",
     "This GPU ({gpu}) cannot compute in bfloat16: start with dtype='half', or dtype=None to let the course choose."),
    ("no GPU", r"No CUDA GPUs are available|Found no NVIDIA driver|Failed to infer device type",
     "This vLLM build needs a GPU that is not there. On a CPU-only machine use vLLM's CPU build in a new .venv "
     "(rm -rf .venv && VLLM_COURSE_DEVICE=cpu make setup: a .venv keeps the build it was made with) and do not "
     "ask for device='cuda'."),
    ("missing GPU kernel", r"_C::\w+\(\) expected at most 0 argument",
     "An operation requested (often a quantization such as fp8) is not compiled into vLLM's "
     "CPU build. Drop that option on CPU, or run on a GPU."),
    ("flashinfer missing", r"No module named 'flashinfer'",
     "vLLM tried to import flashinfer, which is not installed: set "
     "VLLM_USE_FLASHINFER_SAMPLER=0 (the course does when flashinfer is absent)."),
)

# Log lines worth showing a learner while the server starts, as (pattern, label).
MILESTONES: tuple[tuple[str, str], ...] = (
    (r"non-default args", "configuration read"),
    (r"Resolved architecture: (?P<arch>\S+)", "model architecture: {arch}"),
    (r"Initializing a V1 LLM engine", "engine process started"),
    (r"Starting to load model|Loading model from scratch", "loading weights"),  # the CPU runner's words, the GPU's
    (r"Loading weights took (?P<secs>[\d.]+) seconds", "weights loaded in {secs} s"),
    (r"(?:CPU|GPU) KV cache size: (?P<tokens>[\d,]+) tokens", "KV cache: {tokens} tokens"),
    (r"torch\.compile takes|Compiling a graph", "compiling the model (torch.compile)"),
    (r"Graph capturing finished", "CUDA graphs captured"),
    (r"init engine .* took (?P<secs>[\d.]+)", "engine initialised ({secs} s)"),
    (r"Starting vLLM server on (?P<url>\S+)", "HTTP server starting on {url}"),
)


# Phases of a start, each ending at the first milestone whose label starts with the given text.
PHASES: tuple[tuple[str, str], ...] = (
    ("imports", "configuration read"),  # Python imports vLLM and torch in the API server
    ("model config", "model architecture"),  # reads config.json, inspects the model class
    ("engine process", "engine process started"),  # a second process imports vLLM again
    ("worker start", "loading weights"),  # the worker: a third process unless the executor is "uni"
    ("weights", "weights loaded"),
    ("KV cache and warm-up", "engine initialised"),
    ("HTTP server", "ready"),
)


def startup_phases(timeline: list[tuple[float, str]], total_s: float | None = None) -> dict[str, float]:
    """Seconds per phase from (seconds since launch, milestone label) pairs, in start-up order.

    A phase whose end was not seen is merged into the next one that was. ``total_s`` adds what
    came before the launch (checks, choosing a port) as "before launch".

    >>> startup_phases([(7.0, "configuration read"), (16.0, "model architecture: Llama"),
    ...                 (24.0, "engine process started"), (33.0, "loading weights"),
    ...                 (33.5, "weights loaded in 0.4 s"), (37.5, "engine initialised (2.8 s)"),
    ...                 (39.5, "ready")], total_s=40.0)  # doctest: +NORMALIZE_WHITESPACE
    {'before launch': 0.5, 'imports': 7.0, 'model config': 9.0, 'engine process': 8.0, 'worker start': 9.0,
     'weights': 0.5, 'KV cache and warm-up': 4.0, 'HTTP server': 2.0}
    """
    ends = {}
    for seconds, label in timeline:
        for phase, prefix in PHASES:
            if label.startswith(prefix) and phase not in ends:
                ends[phase] = seconds
    phases: dict[str, float] = {}
    if total_s is not None and "HTTP server" in ends:
        phases["before launch"] = round(total_s - ends["HTTP server"], 2)
    previous = 0.0
    for phase, _ in PHASES:
        if phase in ends:
            phases[phase] = round(ends[phase] - previous, 2)
            previous = ends[phase]
    return phases


def watchdog_note(log_text: str) -> str | None:
    """The last line the watchdog (:mod:`helpers.serve._orphan_guard`) wrote in a server's log, without its prefix.

    >>> watchdog_note("vLLM's lines\\n[vllm-course watchdog] VLLM::EngineCore (pid 7) died; ...\\n")
    'VLLM::EngineCore (pid 7) died; ...'
    """
    notes = [line for line in log_text.splitlines() if line.startswith(NOTE_PREFIX)]
    return notes[-1][len(NOTE_PREFIX):].strip() if notes else None


def diagnose(log_text: str, returncode: int | None) -> Diagnosis:
    """Name the likely cause of a failed start from the log text and the exit code."""
    for cause, pattern, advice in _CAUSES:
        match = re.search(pattern, log_text)
        if match:  # the advice quotes the pattern's named groups: {detail}, {asked}, ...
            found = {name: (value or "").strip() for name, value in match.groupdict().items()}
            return Diagnosis(cause, advice.format(**found))
    # vLLM's own words come first (an engine that failed dies, then the watchdog ends the rest);
    # with none, the watchdog's note says why the processes were ended.
    if note := watchdog_note(log_text):
        return Diagnosis("watchdog", f"The course's watchdog ended the server: {note}")
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return Diagnosis(
            "process killed",
            f"The server process was killed by {name}. SIGKILL without a kill of your own "
            "usually means the operating system ran out of memory.",
        )
    if returncode is None:
        return Diagnosis("unknown", "The server did not finish starting; its log shows no known error.")
    return Diagnosis("process died", f"The server exited with code {returncode}; see the log lines below.")


def milestone(line: str) -> str | None:
    """The learner-facing label of a log line, or None for the many lines that are not milestones."""
    for pattern, label in MILESTONES:
        match = re.search(pattern, line)
        if match:
            return label.format(**match.groupdict())
    return None


@dataclass(frozen=True)
class KVCacheReport:
    """What the engine says about its KV cache after profiling memory."""

    num_tokens: int  # KV slots in the pool, i.e. tokens all requests together can hold
    num_blocks: int | None  # pool size in blocks (block_size tokens each)
    block_size: int | None  # tokens per block: 128 on vLLM's CPU build, 16 on GPU
    max_model_len: int | None  # the per-request length the concurrency figure assumes
    max_concurrency: float  # requests of max_model_len tokens that fit at once
    memory_bytes: int | None = None  # KV pool size in bytes, where the engine reports it
    memory_rounding_bytes: int = 0  # memory_bytes is exact (0), or rounded by the log to within +/- this
    dtype: str | None = None  # the dtype the model is served in ("bfloat16", "float32", ...)
    cache_dtype: str | None = None  # the KV cache's own dtype: "auto" follows ``dtype``; or "fp8", ...

    @property
    def bytes_per_value(self) -> int | None:
        """Bytes of one K or V number in the pool: 2 in bfloat16, 4 in float32, 1 in fp8.

        >>> KVCacheReport(1, 1, 1, 1, 1.0, dtype="float32", cache_dtype="auto").bytes_per_value
        4
        """
        kind = self.dtype if self.cache_dtype in (None, "auto") else self.cache_dtype
        return next((size for prefix, size in _BYTES_PER_VALUE if kind and kind.startswith(prefix)), None)


_BYTES_PER_VALUE = (("float32", 4), ("bfloat16", 2), ("float16", 2), ("fp8", 1))


def parse_kv_cache_report(log_text: str, cache_info: dict[str, str] | None = None) -> KVCacheReport | None:
    """Combine the engine's log line with the labels of the ``vllm:cache_config_info`` metric.

    The log line ("CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens per
    request: 45.50x") exists in every version the course supports; the metric labels add the
    block size and block count; the pool's bytes come from the metric where it has them,
    else from the GPU worker's "Available KV cache memory: 113.66 GiB" line, which rounds it to two decimals
    (vLLM's ``format_gib``, ``f"{round(b / GiB_bytes, 2)}"``, drops a trailing zero: "128.0 GiB" is 127.995-128.005
    GiB): ``memory_rounding_bytes`` says by how much (0.005 GiB; 0 for the metric's exact bytes).
    """
    size = re.search(r"KV cache size: ([\d,]+) tokens", log_text)
    concurrency = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log_text)
    if not size or not concurrency:
        return None
    info = cache_info or {}
    memory = _optional_int(info.get("kv_cache_memory_bytes"))
    available = re.search(r"Available KV cache memory: ([\d.]+) GiB", log_text)
    dtype = re.search(r"\bdtype=torch\.(\w+)", log_text)  # the engine's config line
    cache_dtype = info.get("cache_dtype") or _group(re.search(r"kv_cache_dtype=(\w+)", log_text))
    rounding = 0
    if memory is None and available:  # the GPU worker's line, rounded to 0.01 GiB however many decimals it shows
        memory = round(float(available.group(1)) * 2**30)
        rounding = round(0.005 * 2**30)
    return KVCacheReport(
        num_tokens=_int(size.group(1)),
        num_blocks=_optional_int(info.get("num_gpu_blocks")),
        block_size=_optional_int(info.get("block_size")),
        max_model_len=_int(concurrency.group(1)),
        max_concurrency=float(concurrency.group(2)),
        memory_bytes=memory,
        memory_rounding_bytes=rounding,
        dtype=_group(dtype),
        cache_dtype=cache_dtype,
    )


def tail(text: str, lines: int = 25) -> str:
    """The last lines of a log, with vLLM's repetitive process prefixes left as they are."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _group(match: re.Match[str] | None) -> str | None:
    return match.group(1) if match else None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _optional_int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None
