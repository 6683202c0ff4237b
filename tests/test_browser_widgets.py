"""The animated notebooks in a real JupyterLab, in a real (headless) browser.

For the PagedAttention and continuous-batching notebooks, this test opens a copy in a private
JupyterLab (tests/jupyterlab_browser.py) with headless Chromium, runs every cell from the Run
menu, and then checks from the page:

- every code cell ran, and none produced an error output (vLLM's warnings on stderr are fine);
- each animation's widgets rendered (Play, the step slider, the frame image), without
  "Error displaying widget";
- after pressing Play, the step advances and the drawn frame changes (the PNG bytes of the
  image differ between two moments), while the animation is still mid-run;
- the static fallback figures (for viewers without widgets) are there as loaded images.

The copy holds the notebook's cells up to its first server start (``start_server(``): both
notebooks build their animations and static figures from the simulators before that cell, and
``make test`` runs each whole notebook against the real server through nbval anyway, so a
second server start here (about 40 s a notebook on 2 cores) would test nothing the page shows.
If an animation or a figure moves below the first server, the test fails and says so.

Screenshots land in build/browser/: the notebook after its run, and each animation at two
moments while it plays. Needs Debian's chromium and the playwright package
(``scripts/setup_browser.sh``, run by ``make test``); without them the test fails, unless
VLLM_COURSE_SKIP_BROWSER=1 opts out on purpose (for quick local runs only).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from helpers.paths import COURSE_ROOT, build_dir
from tests.jupyterlab_browser import CHROMIUM, JupyterLab, launch_chromium

pytestmark = [pytest.mark.browser, pytest.mark.server]

RUN_TIMEOUT_S = 600  # Run All of one notebook's cells before its server; under a minute on a quiet 2-core machine
FIRST_SERVER = "start_server("  # the copy stops before the first code cell that contains this
FRAME_TIMEOUT_S = 60  # waiting for the kernel to draw the next frame

# notebook -> what its page must show: animations (Play widgets), and the cells whose image
# outputs are the static fallback of the animation (found by a piece of their source).
NOTEBOOKS = {
    "03_paged_attention.ipynb": {
        "players": 1,
        "fallbacks": ("plot_memory_over_time(naive, paged)", "side_by_side(naive, paged, index=widest)",
                      "small_multiples(paged, steps=moments)"),
    },
    "04_continuous_batching.ipynb": {
        "players": 1,
        "fallbacks": ("compare_figure(simulate_static(trace, 8), simulate_continuous(trace, 8))",),
    },
}

# ----- what the test reads from the page (JavaScript run in it) -----------------------------------
NOTEBOOK_STATE_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session?.kernel?.status ?? null;
  const cells = [];
  const model = panel.content.model.cells;
  for (let i = 0; i < model.length; i++) {
    const cell = model.get(i);
    if (cell.type !== 'code') continue;
    cells.push({index: i, count: cell.executionCount, source: cell.sharedModel.getSource(),
                outputs: cell.outputs.toJSON().map(o => ({type: o.output_type, name: o.name ?? null,
                  ename: o.ename ?? null, evalue: o.evalue ?? null, mimes: Object.keys(o.data ?? {})}))});
  }
  const prompts = Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'));
  const busy = prompts.filter(p => p.textContent.includes('*')).length;
  return {kernel, busy, cells};
}"""

PLAYER_STATE_JS = """async (k) => {
  const play = document.querySelectorAll('.jp-Notebook .widget-play')[k];
  const box = play.closest('.widget-vbox');
  let step = null, max = null;
  for (const slider of box.querySelectorAll('.widget-slider')) {
    if (slider.querySelector('.widget-label')?.textContent.trim() !== 'step') continue;
    step = Number(slider.querySelector('.widget-readout').textContent.trim());
    max = Number(slider.querySelector('.noUi-handle')?.getAttribute('aria-valuemax'));
  }
  const img = box.querySelector('img');
  let digest = null;
  if (img && img.src) {
    const bytes = await (await fetch(img.src)).arrayBuffer();
    digest = Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', bytes)))
      .map(b => b.toString(16).padStart(2, '0')).join('').slice(0, 16);
  }
  return {step, max, digest, width: img?.naturalWidth ?? 0, height: img?.naturalHeight ?? 0,
          buttons: play.querySelectorAll('button').length};
}"""

CELL_IMAGES_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[index];
  return Array.from(cell.querySelectorAll('.jp-OutputArea-output img'))
    .map(img => ({width: img.naturalWidth, height: img.naturalHeight, complete: img.complete}));
}"""


# ----- fixtures -------------------------------------------------------------------------------------
def _require_browser() -> None:
    if os.environ.get("VLLM_COURSE_SKIP_BROWSER") == "1":
        pytest.skip("VLLM_COURSE_SKIP_BROWSER=1: the browser test was turned off on purpose")
    problems = []
    if not os.access(CHROMIUM, os.X_OK):
        problems.append(f"Chromium is not installed at {CHROMIUM}.")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("The playwright package is not installed in this environment.")
    if problems:
        pytest.fail(" ".join(problems) + " Run scripts/setup_browser.sh (make test runs it).", pytrace=False)


@pytest.fixture(scope="module")
def out_dir() -> Path:
    _require_browser()  # before clearing: a run that cannot take screenshots keeps the last ones
    folder = build_dir("browser")
    for old in [*folder.glob("*.png"), folder / "timings.json"]:
        old.unlink(missing_ok=True)
    return folder


@pytest.fixture(scope="module")
def lab(tmp_path_factory, out_dir):
    work = tmp_path_factory.mktemp("jupyterlab")
    root = work / "course"
    (root / "notebooks").mkdir(parents=True)
    for name in NOTEBOOKS:  # copies: whatever the browser does, the course's notebooks stay untouched
        before_first_server(COURSE_ROOT / "notebooks" / name, root / "notebooks" / name)
    with JupyterLab(root, work / "home", out_dir / "jupyterlab.log") as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = launch_chromium(playwright, tmp_path_factory.mktemp("chromium-profile"))
        try:
            yield context
        finally:
            context.close()


def before_first_server(source: Path, copy: Path) -> None:
    """Write ``copy``: ``source``'s cells up to (not including) the first code cell that starts a server."""
    notebook = json.loads(source.read_text())
    starts = [i for i, cell in enumerate(notebook["cells"])
              if cell["cell_type"] == "code" and FIRST_SERVER in "".join(cell["source"])]
    assert starts, f"{source.name} starts no server ({FIRST_SERVER!r}): copy it whole instead"
    notebook["cells"] = notebook["cells"][:starts[0]]
    copy.write_text(json.dumps(notebook, indent=1) + "\n")


# ----- the test ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_notebook_runs_in_jupyterlab_and_its_animations_play(name, lab, browser, out_dir, no_server_left_behind):
    expected = NOTEBOOKS[name]
    stem = name.removesuffix(".ipynb")
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    try:
        page.goto(lab.page_url(f"notebooks/{name}"), timeout=120_000)
        _wait_for_kernel(page)
        began = time.monotonic()
        _run_all_cells_from_the_menu(page)
        state = _wait_until_run_finished(page, RUN_TIMEOUT_S)
        _record_timing(out_dir, name, time.monotonic() - began)
        page.screenshot(path=str(out_dir / f"{stem}-after-run.png"))

        _assert_every_cell_ran_without_error(state)
        assert page.locator(".jp-Notebook :text('Error displaying widget')").count() == 0
        players = page.locator(".jp-Notebook .widget-play")
        assert players.count() == expected["players"], "the animation's widgets did not render"
        for k in range(expected["players"]):
            _press_play_and_watch_frames_advance(page, k, out_dir / f"{stem}-player{k + 1}")
        _assert_fallback_figures_shown(page, state, expected["fallbacks"])
    finally:
        (out_dir / f"{stem}-console.log").write_text("\n".join(console) + "\n")
        lab.shutdown_kernels()  # the kernel's clean-up stops any server a failed run left running
        page.close()


# ----- steps ------------------------------------------------------------------------------------------
def _wait_for_kernel(page, timeout_s: float = 180) -> None:
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    page.wait_for_function(
        "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'",
        timeout=timeout_s * 1000,
    )


def _run_all_cells_from_the_menu(page) -> None:
    page.locator(".lm-MenuBar-item").filter(has_text="Run").first.click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    # The cells are queued at once: their prompts show [*] until each has run.
    page.wait_for_function("() => document.querySelectorAll('.jp-Notebook .jp-InputPrompt').length > 0 && "
                           "Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'))"
                           ".some(p => p.textContent.includes('*'))", timeout=30_000)


def _wait_until_run_finished(page, timeout_s: float) -> dict:
    """The notebook's state once the kernel is idle and no cell is queued, three polls in a row."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        state = page.evaluate(NOTEBOOK_STATE_JS)
        quiet = quiet + 1 if state["kernel"] == "idle" and state["busy"] == 0 else 0
        if quiet >= 3:
            return state
        time.sleep(1.0)
    pending = [c["index"] for c in state["cells"] if c["count"] is None]
    raise AssertionError(f"the notebook was still running after {timeout_s} s (cells not run yet: {pending})")


def _assert_every_cell_ran_without_error(state: dict) -> None:
    errors = [f"cell {c['index']}: {o['ename']}: {o['evalue']}" for c in state["cells"]
              for o in c["outputs"] if o["type"] == "error"]
    assert errors == [], "cells showed errors in the browser:\n" + "\n".join(errors)
    not_run = [c["index"] for c in state["cells"] if c["count"] is None and c["source"].strip()]
    assert not_run == [], f"cells never ran: {not_run}"


def _press_play_and_watch_frames_advance(page, k: int, shot_prefix: Path) -> None:
    player = page.locator(".jp-Notebook .widget-play").nth(k).locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]")
    player.scroll_into_view_if_needed()
    start = page.evaluate(PLAYER_STATE_JS, k)
    assert start["buttons"] >= 2 and start["digest"], f"player {k + 1} is missing its buttons or its frame: {start}"
    assert start["width"] > 0 and start["height"] > 0, "the frame image did not load"
    assert start["max"] and start["max"] > 2, f"player {k + 1} has almost no steps: {start}"

    page.locator(".jp-Notebook .widget-play").nth(k).locator("button").first.click()  # Play
    first = _next_frame(page, k, after=start)
    player.screenshot(path=f"{shot_prefix}-playing-a.png")
    # The second look comes about a sixth of the way in, where the two schemes already differ.
    second = _next_frame(page, k, after=first, min_step=max(first["step"] + 5, start["max"] // 6))
    player.screenshot(path=f"{shot_prefix}-playing-b.png")
    page.locator(".jp-Notebook .widget-play").nth(k).locator("button").nth(1).click()  # Pause

    assert start["step"] < first["step"] < second["step"], (start, first, second)
    assert len({start["digest"], first["digest"], second["digest"]}) == 3, "the drawn frame did not change"
    assert second["step"] < second["max"], f"the animation already ended ({second}); the screenshots are not mid-run"


def _next_frame(page, k: int, after: dict, min_step: int = 0) -> dict:
    """The player's state once its step (at least ``min_step``) and its drawn frame differ from ``after``."""
    deadline = time.monotonic() + FRAME_TIMEOUT_S
    while time.monotonic() < deadline:
        now = page.evaluate(PLAYER_STATE_JS, k)
        if now["step"] != after["step"] and now["step"] >= min_step and now["digest"] != after["digest"]:
            return now
        time.sleep(0.25)
    raise AssertionError(f"player {k + 1} showed no new frame (step >= {min_step}) within {FRAME_TIMEOUT_S} s: "
                         f"{now}, before: {after}")


def _assert_fallback_figures_shown(page, state: dict, markers: tuple[str, ...]) -> None:
    for marker in markers:
        cells = [c for c in state["cells"] if marker in c["source"]]
        assert len(cells) == 1, (f"no single cell before the first server contains {marker!r}; was the notebook "
                                 "changed, or the figure moved below the server start?")
        cell = cells[0]
        assert any("image/png" in o["mimes"] for o in cell["outputs"]), f"cell {cell['index']} has no figure"
        images = page.evaluate(CELL_IMAGES_JS, cell["index"])
        assert images and all(i["complete"] and i["width"] > 0 for i in images), \
            f"cell {cell['index']}'s figure is not shown in the page: {images}"


def _record_timing(out_dir: Path, name: str, seconds: float) -> None:
    path = out_dir / "timings.json"
    timings = json.loads(path.read_text()) if path.exists() else {}
    timings[name] = round(seconds, 1)
    path.write_text(json.dumps(timings, indent=2) + "\n")
