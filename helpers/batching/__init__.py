"""Continuous batching (notebook 04, ``notebooks/04_continuous_batching.ipynb``): simulate, measure, predict.

Pure core:
- ``trace``: request traces (who arrives when, with how many tokens), ``BatchRequest``.
- ``step_time``: the clock, ``StepTimeModel`` (seconds per engine step), and its fit to measurements.
- ``sim_records``: what a simulation records (``SimResult``) and ``summarize_batching``.
- ``sim_state``: one request's mutable state inside a simulation.
- ``sim``: the static and continuous schedulers, step by step.
- ``predict``: predictions made by simulating with the clock (throughput, load tests as measurements).
- ``measure_stats``: numbers and tables from the records of live requests.
- ``fit_plan``: which decode batches the step-time fit times, on which server (up to the lab's 64 on a GPU).
- ``explain``: the notebook's findings in sentences built from the run's numbers (``summarize_batching_run``).

I/O: ``measure`` (step-time measurements and trace replays against a running server, through
``helpers.load``); ``front_end`` (the API server's and the client's CPU time per request and per token,
the pipeline's other stages); ``prediction`` (the prediction file the lab reads); ``prefill_clocks`` (lone
prompts' prefill on the server's clock and the client's at once, ``scripts/bench_prefill_clocks.py``).
Drawing: ``view`` (batch slots over time, the animated player) and ``measure_plots``.
Notebook glue: ``exercises`` (the notebook's checks); ``loop_exercise`` (the learner's continuous-batching
loop, its schedule compared step by step with the simulator's).
"""
