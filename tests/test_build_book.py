"""scripts/build_book.py: how many chapters the build executes at once, with how many threads, in what order."""

from __future__ import annotations

from pathlib import Path

import build_book
import pytest


@pytest.mark.parametrize(
    ("cores", "environment", "expected"),
    [
        (2, {}, (2, 1)),  # the default: a chapter per core, one thread each
        (1, {}, (1, 1)),
        (2, {"OMP_NUM_THREADS": "1"}, (2, 1)),
        (2, {"OMP_NUM_THREADS": "4"}, (1, 4)),  # the reader's thread count is kept; fewer chapters at once
        (8, {"OMP_NUM_THREADS": "2"}, (4, 2)),
        (8, {"BOOK_BUILD_JOBS": "3"}, (3, 1)),
        (2, {"OMP_NUM_THREADS": "", "BOOK_BUILD_JOBS": "0"}, (2, 1)),  # empty or zero: not set
    ],
)
def test_jobs_and_threads(cores: int, environment: dict[str, str], expected: tuple[int, int]) -> None:
    assert build_book.jobs_and_threads(cores, environment) == expected


def test_every_page_is_read_once_and_the_longest_first() -> None:
    pages = ["book/preface", "book/batching", "book/decoder-only", "book/glossary", "book/training"]
    batches = build_book.one_page_per_batch(pages, 2)
    assert sorted(page for batch in batches for page in batch) == sorted(pages)
    assert all(len(batch) == 1 for batch in batches)
    order = [batch[0] for batch in batches]
    recorded = build_book.swept_seconds()
    assert recorded["decoder-only"] > recorded["batching"], "the sweep's records no longer say what this test assumes"
    assert order.index("book/decoder-only") < order.index("book/batching") < order.index("book/preface")


def test_the_execution_cache_is_where_myst_nb_looks(tmp_path: Path) -> None:
    assert build_book.execution_cache([".", "--builder", "html"]) == Path(".").resolve() / "_build" / ".jupyter_cache"
    arguments = [".", "--builder", "html", "--path-output", str(tmp_path), "-W"]
    assert build_book.execution_cache(arguments) == tmp_path / "_build" / ".jupyter_cache"


def test_the_execution_cache_is_created_once_before_the_parallel_build(tmp_path: Path) -> None:
    """The database and its tables exist before any worker opens it, and creating it again is harmless."""
    from jupyter_cache import get_cache

    cache = tmp_path / "_build" / ".jupyter_cache"
    build_book.create_execution_cache(cache)
    build_book.create_execution_cache(cache)
    assert (cache / "global.db").is_file()
    assert get_cache(str(cache)).list_cache_records() == []
