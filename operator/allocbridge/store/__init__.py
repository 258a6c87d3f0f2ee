"""The watch-fed, in-memory view of allocations that every replica serves the API from.

The store itself imports only `model` and `config`: no Kubernetes, no HTTP. `store.feed`, the
watch that fills it, is the one module that reads from Kubernetes, through the streams of
`cluster.watch.ObjectWatches` (the client library stays inside `cluster`, checked by
import-linter).
"""

from allocbridge.store.allocation import StoredAllocation, stub_array
from allocbridge.store.listing import list_page
from allocbridge.store.memory import AllocationStore
from allocbridge.store.paging import Page

__all__ = ["AllocationStore", "Page", "StoredAllocation", "list_page", "stub_array"]
