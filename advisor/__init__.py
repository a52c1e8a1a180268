"""rack-advisor: decide how to fill racks for the most agentic AI tasks per hour."""

__version__ = "0.1.0"
