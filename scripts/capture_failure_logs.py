"""Start the course's server with each setting that should fail, and keep vLLM's log of each.

The known causes of a failed start (helpers/serve/log.py) are tested against real logs, one
per cause and per vLLM build (tests/test_server_log.py). This script makes those logs on the
machine it runs on, through the same helper a notebook uses, and prints what the helper said:

    python scripts/capture_failure_logs.py --out tests/data/server_logs/gpu-0.26

On a GPU it adds --enforce-eager to each start: the failures come before or during the
memory profile, and compiling first would only make each case take two minutes longer.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.errors import ServerStartError  # noqa: E402
from helpers.hardware import detect_device  # noqa: E402
from helpers.serve.server import VLLMServer  # noqa: E402

# case -> (settings, the cause the helper must name)
CASES = {
    "mml_over_model_limit": ({"max_model_len": 100_000}, "max model length above the model's limit"),
    "kv_pool_too_small": ({"kv_cache_space_gib": 1e-6}, "KV cache too small"),
    "mml_exceeds_kv": ({"max_model_len": 8192, "kv_cache_space_gib": 0.01}, "max model length exceeds KV cache"),
    "bad_flag": ({"extra_args": ("--max-num-batched-tokens", "lots")}, "invalid flag"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the <case>.log files")
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="run only these cases")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    eager = ("--enforce-eager",) if detect_device() == "cuda" else ()
    wrong = 0
    for case in args.only or CASES:
        settings, expected = CASES[case]
        settings = {**settings, "extra_args": tuple(settings.get("extra_args", ())) + eager}
        server = VLLMServer(**settings, startup_timeout_s=400)
        try:
            server.start(quiet=True)
            print(f"{case}: STARTED, which it should not have", flush=True)
            wrong += 1
        except ServerStartError as error:
            named = error.cause == expected
            wrong += not named
            print(f"{case}: cause {error.cause!r} ({'as expected' if named else 'expected ' + repr(expected)})")
            print(f"    {str(error).splitlines()[0][:400]}", flush=True)
        finally:
            server.stop()
        if server.log_path is not None:
            shutil.copy(server.log_path, args.out / f"{case}.log")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
