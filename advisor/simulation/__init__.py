"""Validation side of rack-advisor: a discrete-event simulator of a configuration (des), a synthetic trace generator
(traces) and a workload-profile fitter for real traces (fit)."""
