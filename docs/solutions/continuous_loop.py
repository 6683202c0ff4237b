"""A solution to notebook 04's loop exercise (helpers/batching/loop_exercise.py checks it).

The notebook's static_batching runs a loop over batches with a loop over steps inside it; continuous batching
is the inner loop alone, with admission moved into every step."""


def continuous_batching(trace, max_num_seqs):
    pending = sorted(trace, key=lambda r: r.arrival_s)  # not arrived yet
    waiting = []  # arrived, no slot yet
    slots = [None] * max_num_seqs  # the running batch, kept for the whole run
    left = {}  # request id -> output tokens it still has to produce
    schedule = []
    step = 0
    while pending or waiting or any(slots):
        while pending and pending[0].arrival_s <= step:
            waiting.append(pending.pop(0))
        for i in range(max_num_seqs):  # every step: free slots go to the oldest waiting requests
            if slots[i] is None and waiting:
                request = waiting.pop(0)
                slots[i], left[request.request_id] = request.request_id, request.output_len
        if any(slots):
            schedule.append((step, tuple(slots)))
            for i, request_id in enumerate(slots):  # one token each; a finished request leaves at the step's end
                if request_id is not None:
                    left[request_id] -= 1
                    if left[request_id] == 0:
                        slots[i] = None
        step += 1  # an idle pass too: the engine waits for the next arrival
    return schedule
