# The two commands of the README, and their pieces. Each sets up what it needs first.
PY := .venv/bin/python

.PHONY: course test test-gpu setup browser unit notebooks clean

course: setup            ## the notebooks and both learner labs in the story's order, headless; results under build/
	$(PY) scripts/run_course.py

test: setup browser      ## unit tests, the helpers' docstring examples, every notebook validated against the real server (and in a browser)
	$(PY) -m pytest tests notebooks --nbval-lax -p no:cacheprovider -v --durations=40  # each lab runs once, as both versions with the answers: tests/test_filled_learner_lab.py
	$(PY) -m pytest helpers --doctest-modules -p no:cacheprovider -q

test-gpu: setup          ## on an NVIDIA GPU: the tests, then every notebook and instructor lab against the GPU server (VLLM_COURSE_GPU_AS=t4: the course chooses a T4's flags; vLLM still sees the real GPU)
	@nvidia-smi -L >/dev/null 2>&1 || { echo "make test-gpu needs an NVIDIA GPU, and nvidia-smi sees none: use make test"; exit 1; }
	$(PY) -m helpers.serve.gpu
	$(PY) -m pytest tests notebooks labs --nbval-lax -p no:cacheprovider -v -m "not browser" --ignore=labs/learner

setup:                   ## .venv with the right vLLM build and the embedded model
	bash scripts/setup.sh

browser: setup           ## Chromium (Debian's, or the one VLLM_COURSE_CHROMIUM names) + playwright, for tests/test_browser_widgets.py
	bash scripts/setup_browser.sh

unit: setup              ## only the tests/ folder and the docstring examples
	$(PY) -m pytest tests -v
	$(PY) -m pytest helpers --doctest-modules -p no:cacheprovider -q

clean:                   ## remove generated files (not the venv or the model cache)
	rm -rf build
