"""allocbridge's benchmark suite (`make bench`, `python -m benchmarks`); not part of the package.

One module per measurement (`listing`, `paging`, `blocking`, `exec_stream`, `reconcile`,
`footprint`), the allocations they use (`population`), the cluster and processes they run on
(`harness`), timing loops (`timing`), the pure table and statistics (`table`) and the runner.
"""
