"""Notebook 05's sentences on what held a batch back (helpers.tuning.limits): each claim follows its numbers."""

from types import SimpleNamespace

from helpers.tuning.limits import explain_batch_cap, explain_small_pool


def run(setting, *, ran, n=50, ttft=(1.0, 2.0), tpot_ms=40.0, preempted=0, cap=None, ok=True):
    summary = SimpleNamespace(num_requests=n, ttft_p50_s=ttft[0], ttft_p95_s=ttft[1], tpot_mean_ms=tpot_ms)
    return SimpleNamespace(setting=setting, comparable=ok, summary=summary, engine=SimpleNamespace(peak_running=ran),
                           num_preemptions=preempted, max_num_seqs=cap,
                           trouble=lambda: None if ok else f"{setting}: server died: exit code -9")


def test_a_bigger_batch_whose_tokens_took_longer_is_said_to_carry_more_requests():
    text = explain_batch_cap(run("8", ran=8, tpot_ms=40.0), run("256", ran=50, tpot_ms=60.0), 256)
    assert "ran at most 8 requests at once, and the rest waited" in text
    assert "took longer with the bigger batch (60.0 ms against 40.0 ms): every step carried more" in text


def test_tokens_as_fast_or_faster_at_the_bigger_batch_are_not_said_to_be_slower():
    same = explain_batch_cap(run("8", ran=8, tpot_ms=40.0), run("256", ran=50, tpot_ms=42.0), 256)
    assert "about as long at both (42.0 ms against 40.0 ms, within 10%)" in same and "carried more" not in same
    faster = explain_batch_cap(run("8", ran=8, tpot_ms=40.0), run("256", ran=50, tpot_ms=30.0), 256)
    assert "took less time at 256 (30.0 ms against 40.0 ms)" in faster and "longer" not in faster


def test_a_cap_above_the_load_made_nobody_wait_and_gpu_times_keep_their_digits():
    text = explain_batch_cap(run("8", ran=6, n=6, ttft=(0.0123, 0.0456), tpot_ms=1.5),
                             run("256", ran=6, n=6, ttft=(0.011, 0.02), tpot_ms=1.5), 256)
    assert "so none of its requests had to wait" in text and "median TTFT 12.3 ms (p95 45.6 ms)" in text


def test_a_failed_run_is_named_instead_of_explained():
    text = explain_batch_cap(run("8", ran=3, ok=False), run("256", ran=50), 256)
    assert text == "8: server died: exit code -9"


def test_the_pool_is_called_the_limit_only_when_the_batch_stayed_under_the_cap():
    assert "the pool, not the cap, was the limit; it preempted 3 requests" in explain_small_pool(
        run("0.05 GiB", ran=5, preempted=3), cap=256)
    reached = explain_small_pool(run("0.5 GiB", ran=256), cap=256)
    assert "the cap, not the pool, bounded the batch; nothing was preempted" in reached
    assert "server died" in explain_small_pool(run("0.05 GiB", ran=1, ok=False), cap=256)
