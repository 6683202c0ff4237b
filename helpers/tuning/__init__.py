"""The tuning room: change one server setting, load-test before and after, say what changed.

Used by ``notebooks/05_throughput_tuning.ipynb``. Modules, by role:

- :mod:`~helpers.tuning.measure` (I/O): load tests with ``/metrics`` polled (``measure``), the
  server's tokenizer and KV-cache report, the served model's config, a checkpoint's parameter count;
- :mod:`~helpers.tuning.measurement` (pure): ``Measurement`` (one run + the engine's counters)
  and ``CapacityPoint`` (one server's KV pool);
- :mod:`~helpers.tuning.workloads` (pure, through a tokenizer): the shared-system-prompt load;
- :mod:`~helpers.tuning.arithmetic` (pure): parameters, memory per precision, KV blocks, pools,
  server settings;
- :mod:`~helpers.tuning.comparison` (pure): before/after ratios and the sentences about them;
- :mod:`~helpers.tuning.limits` (pure): whether the cap or the KV pool held a batch back, in words from its counters;
- :mod:`~helpers.tuning.report` (pure): the Markdown checklist and memory table;
- :mod:`~helpers.tuning.ranking` (pure): the module text's "order of impact" judged with a run's factors;
- :mod:`~helpers.tuning.command` (pure): the module's tuning command beside the settings a default server ran with;
- :mod:`~helpers.tuning.roofline` (pure, and a copy benchmark): the memory-bandwidth bound of a decode step;
- :mod:`~helpers.tuning.startup` (pure, and its results file): compiled against eager start-up on a GPU;
- :mod:`~helpers.tuning.plots` (drawing): the notebook's figures;
- :mod:`~helpers.tuning.exercises` (notebook glue): the exercises' ``grade_*`` / ``check_*``.
"""
