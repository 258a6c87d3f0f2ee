"""The replica's garbage-collection settings (process-wide; restored after the test)."""

from __future__ import annotations

import gc

from allocbridge.app import GC_YOUNG_THRESHOLD, tune_garbage_collection


def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    saved = gc.get_threshold()
    try:
        tune_garbage_collection()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, saved[1], saved[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
