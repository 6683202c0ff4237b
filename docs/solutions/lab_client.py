"""A solution to the lab's client exercise (helpers/lab/client_exercise.py checks it): one streamed chat
completion with the official openai client, one record, never an exception."""

import time


async def send_one(client, model, prompt, max_tokens):
    record = {"send": time.perf_counter(), "first_token": None, "end": None, "tokens": None, "error": None}
    try:
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},  # vLLM: exactly max_tokens tokens, so every run does the same work
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                now = time.perf_counter()
                if record["first_token"] is None:
                    record["first_token"] = now
                record["end"] = now
            if chunk.usage is not None:  # the last chunk: the server's own token counts
                record["tokens"] = chunk.usage.completion_tokens
    except Exception as error:  # a failed request is a record, not an exception
        record["error"] = f"{type(error).__name__}: {error}"
    return record
