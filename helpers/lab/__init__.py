"""The concurrency lab (``labs/01_concurrency_lab.ipynb``): measure ``max_num_seqs`` 8 vs 64, then explain it.

- ``sweep``: I/O; for each setting start a server, run the load test N times, save the runs
  (the lab's cells and ``scripts/lab_sweep.py``).
- ``side_by_side``: I/O; the lab's two servers up at once (started together on a CPU), the settings taking turns.
- ``results``: I/O; run files saved as JSON and loaded back, the committed reference runs.
- ``table``: pure; runs grouped by setting, pooled into typed rows, written as Markdown tables.
- ``plots``: drawing; latency CDFs, throughput bars, the per-request timeline, the sweep.
- ``client_exercise``: I/O and checks; the learner's ``send_one`` run over a workload and held against the
  course's load tester.
- ``client_section``: notebook glue; one server for the learner's client, the course's tester and the naive
  loop's requests, then the loop against vLLM.
- ``naive``: I/O; the lab's requests one at a time through ``transformers``' ``generate()``, against vLLM.
- ``findings``: pure text; one sentence-builder per effect, from the numbers.
- ``step_cost``: pure text; the per-step cost and hardware findings, step growth read against batch growth.
- ``prediction_check``: pure text; notebook 04's prediction held against the lab's runs.
- ``explain``: notebook glue; the explanation of the speed-up, findings in order.
- ``checks``: notebook glue; the learner's guided questions, graded (``grade_*``) and printed (``check_*``).
"""
