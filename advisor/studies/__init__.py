"""Studies over many solves: scenario files, batch runs with their SQLite results, what-if sweeps, crossovers and robustness."""
