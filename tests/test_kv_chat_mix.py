"""helpers.paged.capacity.chat_mix: notebook 03's capacity table counts the lab's prompts as the server does.

The lab's prompts are 16/64/256/512 tokens of text; its records' usage.prompt_tokens read 46/94/286/542 (the chat
template adds 30 tokens on SmolLM2). Counted as text only, every request of the lab's mix was a multiple of 16 tokens
long, and the notebook said blocks of 16 leave no empty tail, which the lab's own numbers contradict.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.load.workload import ServerTokenizer
from helpers.paged.capacity import LAB_MIX, Capacity, LengthMix, chat_mix, lab_capacity
from helpers.paged.explain import explain_capacity
from helpers.serve.log import KVCacheReport

TEMPLATE_TOKENS = 30  # SmolLM2's chat template around one user message, as the lab's usage shows it
NOTEBOOK_03 = Path(__file__).resolve().parent.parent / "notebooks" / "03_paged_attention.ipynb"
CAPACITY_CELL = "92bcb8b4"  # notebook 03's capacity table of the lab's mix


class WordTokenizer:
    """One token a word; count_chat adds a template's tokens, as the server's /tokenize with messages does."""

    def __init__(self) -> None:
        self.words: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self.words:
                self.words.append(word)
            ids.append(self.words.index(word))
        return ids

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in ids)

    def count_chat(self, content: str) -> int:
        return len(self.encode(content)) + TEMPLATE_TOKENS


def test_the_lab_mix_is_counted_inside_the_chat_template():
    mix = chat_mix(WordTokenizer(), output_len=64)
    assert mix.prompt_lens == (46, 94, 286, 542) and mix.output_len == 64
    assert mix.num_requests == LAB_MIX.num_requests == 50


def test_blocks_of_16_are_not_said_to_leave_no_tail_on_the_lab_as_the_server_counts_it():
    report = KVCacheReport(num_tokens=93_184, num_blocks=728, block_size=128, max_model_len=2048, max_concurrency=45.5)
    text_only = lab_capacity(report, LengthMix(output_len=64), block_sizes=[128, 16])
    assert "no empty tail at all" in explain_capacity(text_only, LAB_MIX, 2048)  # what the notebook said before
    mix = chat_mix(WordTokenizer(), output_len=64)
    rows = lab_capacity(report, mix, block_sizes=[128, 16])
    text = explain_capacity(rows, mix, 2048)
    assert "no empty tail at all" not in text
    # 110, 158, 350 and 606 tokens: each leaves 2 of its last 16 slots empty
    assert rows[3].slots_per_request - rows[1].slots_per_request == 2
    assert "Blocks of 16 would leave 0.66% of the held slots empty" in text


def test_a_tail_under_one_slot_is_not_said_to_cost_nothing():
    rows = [Capacity("naive", 93_184, 2048, 2048, 45, 50, 45, 0.13),
            Capacity("exact", 93_184, 1, 269.0, 50, 50, 338, 1.0),
            Capacity("paged", 93_184, 16, 269.25, 50, 50, 337, 0.999)]
    assert "cost 0.25 slots per request" in explain_capacity(rows, LAB_MIX, 2048)


def test_notebook_03s_capacity_cell_counts_the_lab_mix_through_the_servers_tokenizer(monkeypatch, capsys):
    """The cell as the notebook has it, on the report above with a template-adding tokenizer for the server's."""
    cells = json.loads(NOTEBOOK_03.read_text())["cells"]
    source = "".join(next(c["source"] for c in cells if c.get("id") == CAPACITY_CELL))
    server, asked = object(), []
    monkeypatch.setattr(ServerTokenizer, "of", classmethod(lambda cls, s: asked.append(s) or WordTokenizer()))
    report = KVCacheReport(num_tokens=93_184, num_blocks=728, block_size=128, max_model_len=2048, max_concurrency=45.5)
    cell_globals = {"server": server, "kv": report, "LAB_OUTPUT_TOKENS": 64}
    exec(source, cell_globals)  # noqa: S102 (the course's own cell)
    said = capsys.readouterr().out
    assert "no empty tail at all" not in said
    assert "Blocks of 16 would leave 0.66% of the held slots empty" in said
    assert asked == [server], "the lab mix is counted by ServerTokenizer.of(server)"
    assert cell_globals["lab_mix"] == chat_mix(WordTokenizer(), output_len=64)
