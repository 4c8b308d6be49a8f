"""Forget the cached execution of each chapter whose package code changed, and only of those.

myst-nb's execution cache (jupyter-cache) re-runs a chapter when its own code cells change. It
cannot see the package the chapter imports: edit ``decoding``'s export cells, and the translation
chapter, which does not import ``decoding``, may keep its cache, but the decoding chapter must
not. This script follows each chapter's ``transformer_book`` imports through the package, hashes
the modules it reaches, and for every chapter whose hash changed since the last build removes its
cached run and touches its source, since Sphinx re-reads (and so re-executes) only the pages whose
source is newer than its last build. ``make book`` runs it before building::

    python scripts/invalidate_cache.py
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from chapters import PACKAGE, ROOT, book_chapters, reached_modules

CACHE = ROOT / "_build" / ".jupyter_cache"
FINGERPRINTS = ROOT / "_build" / ".package-fingerprints.json"
SYNC_STAMP = ROOT / "_build" / ".sync-stamp"


def fingerprint(chapter: Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(reached_modules(chapter.read_text())):
        digest.update(name.encode() + b"\0" + (PACKAGE / f"{name}.py").read_bytes())
    return digest.hexdigest()


def main() -> int:
    chapters = {chapter.stem: chapter for chapter in book_chapters()}
    current = {stem: fingerprint(chapter) for stem, chapter in chapters.items()}
    previous = json.loads(FINGERPRINTS.read_text()) if FINGERPRINTS.exists() else {}
    # On the first build there is nothing to forget: every page is read and executed anyway.
    changed = {stem for stem, value in current.items() if stem in previous and previous[stem] != value}
    if CACHE.exists() and changed:
        from jupyter_cache import get_cache

        cache = get_cache(CACHE)
        for record in cache.list_cache_records():
            if Path(record.uri).stem in changed:
                cache.remove_cache(record.pk)
    for stem in sorted(changed):
        os.utime(chapters[stem])  # newer than the last build: Sphinx reads and executes it again
        print(f"the package code {chapters[stem].name} imports changed: it will run again")
    if changed and SYNC_STAMP.exists():
        os.utime(SYNC_STAMP)  # the touched chapters have not changed: no need to export them again
    FINGERPRINTS.parent.mkdir(parents=True, exist_ok=True)
    FINGERPRINTS.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
