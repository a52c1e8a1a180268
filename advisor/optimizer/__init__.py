"""The optimizer: candidate server options, the MILP formulation and its constraint groups, solve stages, rows of racks, cost objectives, tail-wait capacity curves and layout comparison."""
