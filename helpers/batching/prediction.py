"""The prediction notebook 04 makes and the lab checks: one file, one reader, one writer.

Notebook 04 fits a step-time model to its own measurements and predicts the lab's output
throughput at each ``max_num_seqs`` (:func:`prediction_record`); it saves the prediction to
``build/results/batching_prediction.json`` (:func:`save_prediction`); the lab overlays it on
what it measures (:func:`load_prediction`), simulated again for the lab's own output length where
its pace probe chose another (:func:`for_output_tokens`). Saved whole or not at all, so a stopped kernel
leaves the previous prediction, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.batching.predict import predict_throughput
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import BatchRequest, lab_trace
from helpers.errors import ResultsFileError
from helpers.files import read_json, write_atomically
from helpers.paths import build_dir

# ----- the prediction the lab compares with -----------------------------------------------------
PREDICTION_FILE = "batching_prediction.json"


def prediction_path() -> Path:
    """build/results/batching_prediction.json: written by notebook 04, overlaid by the lab."""
    return build_dir("results") / PREDICTION_FILE


def prediction_record(
    model: StepTimeModel | Mapping[int, StepTimeModel],
    settings: Sequence[int] = (8, 64),
    trace: Sequence[BatchRequest] | None = None,
    fitted_from: str = "",
    measurements: Sequence[StepMeasurement] = (),
    served_model: str = "",
    device: str = "",
) -> dict[str, Any]:
    """The predicted output tok/s of `trace` (default: the lab's) at each max_num_seqs, as plain JSON data.

    `model`: one clock for every setting, or one for each (``{8: clock_8, 64: clock_64}``), each
    timed on a server started with that max_num_seqs (on a GPU the same step can cost servers of different
    max_num_seqs different times).

    Keys: max_num_seqs, predicted_output_tok_s, ratio_<last>_vs_<first>, step_time_model
    (the last setting's parameters), step_time_models (each setting's), fitted_from (how the model was measured), created (ISO time),
    measurements (the numbers it was fitted to), and what it is a prediction for: the served
    model, the device (:func:`prediction_mismatch` compares them) and the trace's output tokens
    (:func:`for_output_tokens` simulates the clocks again for another).

    >>> rec = prediction_record(StepTimeModel(), fitted_from="defaults")
    >>> rec["max_num_seqs"], round(rec["ratio_64_vs_8"], 2)
    ([8, 64], 1.6)
    >>> faster_at_8 = StepTimeModel(overhead_s=0.02)
    >>> round(prediction_record({8: faster_at_8, 64: StepTimeModel()})["ratio_64_vs_8"], 2) < 1.6
    True
    """
    settings = validate.positive_ints(settings, "settings",
                                      hint="They are the max_num_seqs values to predict, e.g. (8, 64).")
    trace = list(trace) if trace is not None else lab_trace()
    clocks = {n: model for n in settings} if isinstance(model, StepTimeModel) else dict(model)
    missing = [n for n in settings if n not in clocks]
    if missing:
        raise validate.InvalidArgumentError(f"no clock for max_num_seqs {missing}: pass one StepTimeModel, or one "
                                            f"for each of {list(settings)}.")
    tok_s = [predict_throughput(clocks[n], trace, n) for n in settings]
    return {
        "max_num_seqs": list(settings),
        "predicted_output_tok_s": tok_s,
        f"ratio_{settings[-1]}_vs_{settings[0]}": tok_s[-1] / tok_s[0],
        "step_time_model": asdict(clocks[settings[-1]]),
        "step_time_models": {str(n): asdict(clocks[n]) for n in settings},
        "fitted_from": fitted_from,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "measurements": [asdict(m) for m in measurements],
        "model": served_model,
        "device": device,
        "output_tokens": sorted({request.output_len for request in trace}),
    }


def prediction_mismatch(prediction: dict[str, Any], *, model: str, device: str) -> str | None:
    """Why a saved prediction is not one for this lab run (another model or device), or None.

    A step-time model fitted to one model on one machine says nothing about another: notebook 04
    run last on the 8B shape must not be overlaid on a lab run on SmolLM2. Another output length
    is only a different load for the same clocks: :func:`for_output_tokens` simulates them again.

    >>> saved = {"model": "dummy-llama-3.1-8b", "device": "cuda", "output_tokens": [256]}
    >>> prediction_mismatch(saved, model="smollm2", device="cuda")
    "it was made for model 'dummy-llama-3.1-8b', this run serves 'smollm2'"
    >>> prediction_mismatch(saved, model="dummy-llama-3.1-8b", device="cuda") is None
    True
    """
    saved = {"model": prediction.get("model"), "device": prediction.get("device")}
    for key, now in (("model", model), ("device", device)):
        if saved[key] and saved[key] != now:
            return f"it was made for {key} {saved[key]!r}, this run serves {now!r}" if key == "model" else \
                f"it was made on {saved[key]}, this run is on {device}"
    return None


def for_output_tokens(prediction: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    """The saved prediction for the lab's load with `output_tokens` a request: itself where it already is,
    else its own step-time models simulated again on that load, with ``resimulated_from`` (the output
    tokens it was saved for) added and everything else as saved.

    Each notebook sizes the answers from its own pace probe, so on a slower machine notebook 04 and the
    lab can pick lengths a few tokens apart. The clocks were fitted to the machine, not to that length
    (the step-time model has no term for it), so this is the prediction notebook 04 would have saved
    for the lab's length.

    >>> saved = prediction_record(StepTimeModel(), trace=lab_trace(output_len=32), served_model="smollm2", device="cpu")
    >>> again = for_output_tokens(saved, 64)
    >>> again["output_tokens"], again["resimulated_from"], round(again["ratio_64_vs_8"], 2)
    ([64], [32], 1.6)
    >>> for_output_tokens(saved, 32) is saved
    True
    """
    if prediction.get("output_tokens") in (None, [output_tokens]):
        return prediction
    settings = prediction["max_num_seqs"]
    # a file saved before each setting had its own clock used one for all of them
    saved = prediction.get("step_time_models") or {str(n): prediction["step_time_model"] for n in settings}
    record = prediction_record({int(n): StepTimeModel(**m) for n, m in saved.items()}, settings=settings,
                               trace=lab_trace(output_len=output_tokens), fitted_from=prediction.get("fitted_from", ""),
                               measurements=[StepMeasurement(**m) for m in prediction.get("measurements", ())],
                               served_model=prediction.get("model", ""), device=prediction.get("device", ""))
    return {**record, "created": prediction.get("created", record["created"]),
            "resimulated_from": prediction["output_tokens"]}


PREDICTION_REMEDY = ("Run notebook 04 (notebooks/04_continuous_batching.ipynb) again down to the cell that saves "
                     "the prediction (save_prediction), or delete the file.")


def save_prediction(record: dict[str, Any], path: Path | None = None) -> Path:
    """Write a `prediction_record` as JSON (default: `prediction_path()`); returns the path.

    Written whole or not at all (`helpers.files.write_atomically`): a kernel stopped while
    saving leaves the previous prediction, never half of one."""
    path = Path(path) if path is not None else prediction_path()
    return write_atomically(path, json.dumps(record, indent=2) + "\n")


def load_prediction(path: Path | None = None) -> dict[str, Any] | None:
    """The saved prediction, or None when notebook 04 has not written one yet.

    A file that is empty, cut short, or not a prediction raises
    `helpers.errors.ResultsFileError` (a ValueError) naming it and how to make it again."""
    path = Path(path) if path is not None else prediction_path()
    if not path.exists():
        return None
    data = read_json(path, remedy=PREDICTION_REMEDY)
    if not isinstance(data, dict) or "max_num_seqs" not in data or "predicted_output_tok_s" not in data:
        raise ResultsFileError(f"{path} is not a batching prediction (no max_num_seqs and predicted_output_tok_s). "
                               f"{PREDICTION_REMEDY}")
    return data

