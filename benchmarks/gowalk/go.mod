module allocbridge.io/benchmarks/gowalk

go 1.26
