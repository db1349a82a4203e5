"""Training N runs: configuration, trainers, orchestration, local and Dask backends, processes."""
