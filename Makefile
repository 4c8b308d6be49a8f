# The two commands of the README:
#   make book   set up .venv and node_modules, build the whole book into _build/html
#   make test   set up .venv and node_modules, run every test (chapters, package, build, twins, website)
# and one for a developer between them:
#   make check  lint, types, and every test that neither runs a chapter nor builds the book (~2 min)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CHAPTER_SOURCES := $(wildcard book/*.md)
# Locally, a changed chapter is re-exported before anything runs. In CI the committed package and
# twins must already match their chapters, so there the same step only checks, and fails loudly.
SYNC_FLAGS := $(if $(CI),--check,)

.PHONY: book test check sync lock timing benchmark robustness pretrain clean

# When the build fails, Sphinx still records the failed chapter's page as read, and the next make book
# would pass without running it again; forgetting Sphinx's environment makes it read every page again
# (the chapters that ran come from the execution cache; a failed one has no cached run, so it runs).
book: $(VENV)/.installed _build/.sync-stamp
	$(PY) scripts/invalidate_cache.py
	$(PY) scripts/build_book.py . --builder html -W -n --keep-going || \
	  { rm -f _build/.doctrees/environment.pickle; echo "The build failed: see the end of its log above, and the whole of it in _build/build.log."; exit 1; }
	@echo "The book is in _build/html/index.html"

test: $(VENV)/.installed _build/.sync-stamp
	$(PY) -m pytest

# The fast half of make test: ruff and mypy (tests/test_lint.py, tests/test_typing.py), the package's
# unit tests and the source tests. Chapters, the Sphinx build, the browser and the rerun of the
# pretraining's first steps are left to make test.
check: $(VENV)/.installed _build/.sync-stamp
	$(PY) -m pytest -m "not chapter and not build and not browser and not pretraining and not assignments" --durations=5

# Regenerate the package, the Colab twins, the tables of README and course plan, and the assignments from the chapters.
sync: $(VENV)/.installed
	$(PY) scripts/export.py
	$(PY) scripts/sync_twins.py
	$(PY) scripts/reading_time.py --update-readme
	$(PY) scripts/course_plan.py
	$(PY) scripts/assignments.py
	mkdir -p _build && touch _build/.sync-stamp

# make book and make test do the same when a chapter (or the export scripts) changed.
_build/.sync-stamp: $(CHAPTER_SOURCES) scripts/export.py scripts/sync_twins.py scripts/reading_time.py scripts/course_plan.py scripts/assignments.py robustness-runs.jsonl pyproject.toml _config.yml | $(VENV)/.installed
	$(PY) scripts/export.py $(SYNC_FLAGS)
	$(PY) scripts/sync_twins.py $(SYNC_FLAGS)
	$(PY) scripts/reading_time.py $(if $(CI),--check,--update-readme)
	$(PY) scripts/course_plan.py $(if $(CI),--check,)
	$(PY) scripts/assignments.py $(SYNC_FLAGS)
	mkdir -p _build && touch $@

# Print each chapter's execution time and the total.
timing: $(VENV)/.installed
	$(PY) scripts/time_chapters.py

# Re-run the stochastic chapters over 10 seeds x {1, 2, 4} threads (and CUDA when present); print
# each claim's pass rate, values and margin (nothing asserted). One pass over the chapters takes
# 12 to 17 minutes on 2 cores, the sweep 30 passes: on a bigger machine pass more parallel runs,
# make robustness ROBUSTNESS_ARGS="--jobs 12", or split it (--runs-out, --from-runs). Every run is
# appended to robustness-runs.jsonl, and robustness.json summarises exactly those runs.
robustness: $(VENV)/.installed
	$(PY) scripts/robustness.py $(ROBUSTNESS_ARGS)

# Pretrain the book's language model and write its weights and card to src/transformer_book/weights/book-lm
# (about an hour on one CPU thread; not part of make book). PRETRAIN_ARGS="--steps 50" reruns the
# recipe's first 50 steps and compares them with the card's losses, writing nothing.
pretrain: $(VENV)/.installed
	$(PY) scripts/pretrain.py $(PRETRAIN_ARGS)

# Print training throughput of the book's Transformer against nn.Transformer (nothing asserted).
benchmark: $(VENV)/.installed
	$(PY) scripts/benchmark_training.py

# Resolve requirements.txt into requirements.lock, and requirements-otter.txt into requirements-otter.lock
# (exact versions and hashes): run after editing either.
lock: $(VENV)/.installed
	$(PY) scripts/lock.py

# The locked packages with their hashes checked; then torch, pinned by version only, so a machine gets
# the build it can use (CPU or CUDA); then the book's own package; pip check proves they fit together.
# The assignments' autograder goes into a folder of its own, $(VENV)/otter, outside the book's environment
# (requirements-otter.txt says why); only tests/test_assignments.py puts it on the path.
# npm ci installs package-lock.json: MathJax, which the site serves itself, and axe-core for the tests.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check
$(VENV)/.installed: requirements.lock requirements.txt requirements-otter.lock pyproject.toml package.json package-lock.json
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --require-hashes --no-deps -r requirements.lock
	$(PIP_INSTALL) "$$(grep '^torch==' requirements.txt)"
	$(PIP_INSTALL) --no-deps -e .
	$(PY) -m pip check
	rm -rf $(VENV)/otter
	$(PIP_INSTALL) --require-hashes --no-deps --target $(VENV)/otter -r requirements-otter.lock
	npm ci --no-audit --no-fund
	touch $@

clean:
	rm -rf _build
