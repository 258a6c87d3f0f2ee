"""The watch-fed, in-memory view of allocations that every replica serves the API from.

Only `model` and `config` may be imported from here: no Kubernetes, no HTTP.
"""

from allocbridge.store.allocation import StoredAllocation, stub_jsons
from allocbridge.store.listing import list_page
from allocbridge.store.memory import AllocationStore
from allocbridge.store.paging import Page

__all__ = ["AllocationStore", "Page", "StoredAllocation", "list_page", "stub_jsons"]
